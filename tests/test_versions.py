"""The torch, torchvision and Python range the generated project claims, proven at both ends.

The template's own environment (uv.lock: today's torch on Python 3.11) runs every other test. Each
MATRIX entry here gets its own uv environment (uv's default cache, shared by the entries and by
later runs, so only a first run downloads torch) on one Python with one torch/torchvision pair and
the project's [test] extra, then the default bake's quick tier and its ONNX and .pt2 round trips
(scripts/versions/check.sh). The generated pyproject.toml claims exactly the range these entries
span, and the generated CI workflow runs the same ends for its users.

Interpreters: uv cannot download one offline, so each is looked up as `uv python find` does, then
in pyenv's versions folder. One that is missing fails its entry (the range would go unproven), unless
TEMPLATE_SKIP_MISSING_PYTHONS=1 makes it a skip. Each entry's timings (seconds: install, quick tier,
export round trip) are printed at the end of the session (conftest.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from helpers import TEMPLATE, VERSION_TIMINGS, describe, run


@dataclass(frozen=True)
class Entry:
    """One environment: a Python, a torch release series and the torchvision built for it."""

    python: str
    torch: str
    torchvision: str
    why: str

    def __str__(self) -> str:
        return f"py{self.python}-torch{self.torch}"


MATRIX = [
    # torch 2.4 is the floor: the checkpoint code asks torch.serialization.get_safe_globals() (new in 2.4) what
    # weights_only loading accepts. Python 3.10 is the oldest that the newest torch still had wheels for (2.14).
    Entry("3.10", "2.4", "0.19", "the oldest torch pair, on the oldest Python"),
    Entry("3.12", "2.11", "0.26", "the GPU machine's pins"),
    Entry("3.13", "2.15", "0.29", "the newest torch pair, on the newest Python"),
]
OLDEST, NEWEST = MATRIX[0], MATRIX[-1]
CHECK = TEMPLATE / "scripts" / "versions" / "check.sh"


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _next_minor(version: str) -> str:
    """The first release series after `version`: 2.15 -> 2.16, 0.29 -> 0.30, 3.13 -> 3.14."""
    major, minor = _key(version)
    return f"{major}.{minor + 1}"


def find_uv() -> str:
    """The uv that runs this session (`uv run` names itself in $UV), else the one on PATH."""
    uv = os.environ.get("UV") or shutil.which("uv")
    if not uv:
        pytest.fail("uv is needed to build the version environments (python3 -m pip install uv)")
    return uv


def find_python(uv: str, version: str) -> str | None:
    """An interpreter for `version` (3.10): where uv finds one, else under pyenv's versions folder."""
    found = subprocess.run([uv, "python", "find", "--no-python-downloads", version],
                           capture_output=True, text=True)
    if found.returncode == 0 and found.stdout.strip():
        return found.stdout.strip()
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = sorted(pyenv.glob(f"{version}.*/bin/python"), key=lambda p: _key(p.parts[-3]))
    return str(candidates[-1]) if candidates else None


@pytest.mark.slow
@pytest.mark.parametrize("entry", MATRIX, ids=str)
def test_the_default_project_passes_its_quick_tier_and_export_round_trip(entry, bakery, tmp_path, pytestconfig):
    """Each end of the claimed range, installed from the index as a user would: quick tier and exports pass."""
    uv = find_uv()
    python = find_python(uv, entry.python)
    if python is None:
        message = f"Python {entry.python} is not installed (uv python install {entry.python}, or pyenv)"
        if os.environ.get("TEMPLATE_SKIP_MISSING_PYTHONS") == "1":
            pytest.skip(message)
        pytest.fail(message)
    project = tmp_path / "project"  # a copy: the editable install writes into the project folder
    shutil.copytree(bakery.project(), project)
    proc = run(["bash", str(CHECK), uv, python, entry.torch, entry.torchvision, str(project), str(tmp_path / "venv")],
               cwd=TEMPLATE, timeout=1500)
    assert proc.returncode == 0, f"{entry} ({entry.why}): {describe(proc)}"
    timings = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"install \d+ quick \d+ export \d+", timings), describe(proc)
    pytestconfig.stash.setdefault(VERSION_TIMINGS, []).append(f"{entry} torchvision {entry.torchvision}: {timings}")


def test_the_generated_pyproject_claims_exactly_the_tested_range(bakery):
    """requires-python, torch and torchvision: from the oldest entry up to the series after the newest."""
    pyproject = (bakery.project() / "pyproject.toml").read_text(encoding="utf-8")  # no tomllib on Python 3.10
    pythons = sorted({entry.python for entry in MATRIX}, key=_key)
    assert re.findall(r"^requires-python = (.*)$", pyproject, re.M) == [f'">={pythons[0]},<{_next_minor(pythons[-1])}"']
    for name in ("torch", "torchvision"):
        claimed = re.findall(rf'^\s*"{name}([<>=].*?)",', pyproject, re.M)
        assert claimed == [f">={getattr(OLDEST, name)},<{_next_minor(getattr(NEWEST, name))}"]
    assert _key(OLDEST.torch) == min(_key(entry.torch) for entry in MATRIX)
    assert _key(NEWEST.torch) == max(_key(entry.torch) for entry in MATRIX)


def test_the_generated_ci_workflow_tests_both_ends_of_the_range(bakery):
    """The project's own CI runs its suite on the oldest and the newest entry, as the template's tests do."""
    workflow = yaml.safe_load((bakery.project() / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8"))
    include = workflow["jobs"]["test"]["strategy"]["matrix"]["include"]
    ends = [{"python": entry.python, "torch": entry.torch, "torchvision": entry.torchvision}
            for entry in (OLDEST, NEWEST)]
    assert [{key: str(row[key]) for key in ("python", "torch", "torchvision")} for row in include] == ends
