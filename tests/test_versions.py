"""The torch, torchvision and Python range the generated project claims, proven at both ends.

The template's own environment (uv.lock: today's torch on Python 3.11) runs every other test. Each
MATRIX entry (tests/plan.py) gets its own uv environment (uv's default cache, shared by the entries and
by later runs, so only a first run downloads torch) on one Python with one torch/torchvision pair and
the project's [test] extra, then a bake's quick tier and its ONNX and .pt2 round trips
(scripts/versions/check.sh). The bake is one of the answer bakes, whose quick tier then runs here
instead of a second time in the template's environment; the default bake's whole suite runs there.
The generated pyproject.toml claims exactly the range these entries span, and the generated CI
workflow runs the same ends for its users.

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
import time
from pathlib import Path

import pytest
import yaml
from helpers import TEMPLATE, describe, run
from plan import MATRIX, NEWEST, OLDEST, bake_id

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
def test_a_generated_project_passes_its_quick_tier_and_export_round_trip(entry, bakery, tmp_path, record_property):
    """Each end of the claimed range, installed from the index as a user would: a generated project's quick tier
    and export round trips pass."""
    uv = find_uv()
    python = find_python(uv, entry.python)
    if python is None:
        message = f"Python {entry.python} is not installed (uv python install {entry.python}, or pyenv)"
        if os.environ.get("TEMPLATE_SKIP_MISSING_PYTHONS") == "1":
            pytest.skip(message)
        pytest.fail(message)
    project = tmp_path / "project"  # a copy: the editable install writes into the project folder
    shutil.copytree(bakery.project(**entry.answers), project)
    proc = run(["bash", str(CHECK), uv, python, entry.torch, entry.torchvision, str(project), str(tmp_path / "venv"),
                entry.timm], cwd=TEMPLATE, timeout=1500, OMP_NUM_THREADS="1")
    assert proc.returncode == 0, f"{entry} ({entry.why}), bake {bake_id(entry.answers)}: {describe(proc)}"
    timings = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"install \d+ quick \d+ export \d+", timings), describe(proc)
    if entry.plugins_of:  # in the same environment, after the entry's own bake
        timings += f" plugins {_plugin_tests(entry, bakery, tmp_path)}"
    # the session's summary prints these (conftest.py); a property reaches it from any xdist worker
    line = f"{entry} torchvision {entry.torchvision}, bake {bake_id(entry.answers)}: {timings}"
    record_property("version_timings", line)


def _plugin_tests(entry, bakery, tmp_path: Path) -> int:
    """Run the quick tier of `entry.plugins_of`'s plugin tests with the entry's environment; return its seconds.

    The environment has the entry's own bake installed: its package has the same name, and `python -m pytest`
    in the other bake's folder imports that folder's package first (the current folder leads sys.path).
    """
    project = bakery.project(**entry.plugins_of)
    assert (project / "tests" / "plugins").is_dir(), f"{bake_id(entry.plugins_of)} brings no plugin tests"
    started = time.monotonic()
    proc = run([str(tmp_path / "venv" / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "-m", "not slow", "tests/plugins", f"--basetemp={tmp_path / 'plugins'}"],
               cwd=project, timeout=900, OMP_NUM_THREADS="1")
    assert proc.returncode == 0, f"{entry}: plugin tests of {bake_id(entry.plugins_of)}: {describe(proc)}"
    return round(time.monotonic() - started)


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
    assert re.findall(r'^timm = \["timm(.*?)"\]$', pyproject, re.M) == [f">={OLDEST.timm}"]  # the pinned floor


def test_the_oldest_entry_pins_timm_s_floor_and_the_others_take_the_newest():
    """One entry proves the [timm] extra's floor; the rest install what a user gets today."""
    assert OLDEST.timm and not any(entry.timm for entry in MATRIX[1:])


def test_the_generated_ci_workflow_tests_both_ends_of_the_range(bakery):
    """The project's own CI runs its suite on the oldest and the newest entry, as the template's tests do."""
    workflow = yaml.safe_load((bakery.project() / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8"))
    include = workflow["jobs"]["test"]["strategy"]["matrix"]["include"]
    ends = [{"python": entry.python, "torch": entry.torch, "torchvision": entry.torchvision, "timm": entry.timm}
            for entry in (OLDEST, NEWEST)]
    keys = ("python", "torch", "torchvision", "timm")
    assert [{key: str(row.get(key, "")) for key in keys} for row in include] == ends
