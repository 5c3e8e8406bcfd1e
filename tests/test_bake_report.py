"""scripts/bake_report.py: every answer bake within the house's limits, and the report failing when one is not.

The report bakes the defaults and each non-default answer, and fails on an import arrow that runs upward, a
module nothing in the bake imports, a function or class nothing in it names, or a module, function or train.py
over its limit. These tests run it as CI does, then break a copy of the default bake each of those ways.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import DEFAULT_PACKAGE, TEMPLATE

REPORT = TEMPLATE / "scripts" / "bake_report.py"


def report(*args: str) -> subprocess.CompletedProcess:
    """scripts/bake_report.py's run; the timeout guards a hang only (every answer bake took 180 s quiet, 530 s on a
    loaded 2-core machine)."""
    return subprocess.run([sys.executable, str(REPORT), *args], capture_output=True, text=True, timeout=1800)


def test_every_answer_bake_keeps_the_limits_and_the_layers():
    """CI's run: each answer bake within its limits, no upward arrow, no module its answers cannot reach."""
    result = report()
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line for line in result.stdout.splitlines() if line and not line.startswith((" ", "bake"))]
    assert rows[0].startswith("defaults") and len(rows) > 10, result.stdout


@pytest.fixture
def copy(bakery, tmp_path) -> Path:
    """A copy of the default bake to break."""
    target = tmp_path / "project"
    shutil.copytree(bakery.project(), target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


BREAKAGES = {
    "an upward arrow": ("data/splits.py", lambda text: text + "\nfrom ..training import run_state  # noqa\n",
                        "upward import"),
    "an unreachable module": ("data/forgotten.py", lambda text: '"""Nothing imports me."""\n', "unreachable"),
    "a long function": ("task.py", lambda text: text + "\n\ndef long():\n" + "    x = 1\n" * 60, "lines (at most 50)"),
    "a function only tests call": ("task.py", lambda text: text + '\n\ndef spare():\n    """For tests."""\n',
                                   "unused: "),
    "many parameters": ("task.py", lambda text: text + "\n\ndef wide(a, b, c, d, e, f, g, h, i):\n    pass\n",
                        "9 parameters"),
}


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_the_report_fails_on_each_broken_rule(copy, breakage):
    """Each rule can fail: the report names the problem and exits 1."""
    relative, change, says = BREAKAGES[breakage]
    path = copy / DEFAULT_PACKAGE / relative
    path.write_text(change(path.read_text(encoding="utf-8") if path.exists() else ""), encoding="utf-8")
    result = report("--project", str(copy))
    assert result.returncode == 1 and says in result.stdout, result.stdout
