"""Running baked projects: the CLI starts for every choice, the device tests pass, the default suite passes.

Each run is a subprocess with this interpreter (which has torch and torchvision) and the baked
project as its working directory, so the project's own package and conftest are the ones used.
"""

from __future__ import annotations

import sys

import pytest

from helpers import NON_DEFAULT, choice_id, describe, run

pytestmark = pytest.mark.slow

# The CLI check runs on the default bake too; the default's device tests run in its full suite.
BAKES = [None, *NON_DEFAULT]


def bake_id(pair) -> str:
    """`defaults` for the default bake, else `var=value`."""
    return "defaults" if pair is None else choice_id(pair)


def answers(pair) -> dict[str, str]:
    """extra_context for one parametrised bake."""
    return {} if pair is None else {pair[0]: pair[1]}


@pytest.mark.parametrize("pair", BAKES, ids=bake_id)
def test_train_help_exits_zero(bakery, pair):
    """`python train.py --help` exits 0 and documents --device, whatever the answers were."""
    project = bakery.project(**answers(pair))
    assert (project / "train.py").is_file(), "train.py was not generated"
    proc = run([sys.executable, "train.py", "--help"], cwd=project, timeout=180)
    assert proc.returncode == 0, describe(proc)
    assert "--device" in proc.stdout, proc.stdout


@pytest.mark.parametrize("pair", NON_DEFAULT, ids=bake_id)
def test_device_tests_pass(bakery, pair):
    """The baked project's device tests (and config tests, when present) pass for each non-default answer."""
    project = bakery.project(**answers(pair))
    assert (project / "tests" / "test_devices.py").is_file(), "tests/test_devices.py was not generated"
    targets = ["tests/test_devices.py"]
    if (project / "tests" / "test_config.py").is_file():
        targets.append("tests/test_config.py")
    proc = run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *targets],
        cwd=project,
        timeout=600,
    )
    assert proc.returncode == 0, describe(proc)


def test_default_project_suite_passes(bakery):
    """The default bake's whole test suite passes on this machine (exit 0: tests ran and none failed)."""
    project = bakery.project()
    proc = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project, timeout=900)
    assert proc.returncode == 0, describe(proc)
