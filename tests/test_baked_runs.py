"""Running baked projects: the CLI starts for every choice, the device tests pass, the default suite passes.

Runs are subprocesses of this interpreter (which has torch and torchvision) with the baked project
as the working directory, so the project's own package and conftest are the ones used. For each
bake, `train.py --help` and the device tests share one process (tests/bake_check.py) because
importing torchvision dominates the cost.
"""

from __future__ import annotations

import json
import sys

import pytest
from helpers import NON_DEFAULT, TEMPLATE, choice_id, describe, python_digest, run

pytestmark = pytest.mark.slow

DEVICE_TEST_FILES = ["tests/devkit/test_devices.py", "tests/test_config.py"]


def bake_id(pair) -> str:
    """`defaults` for the default bake, else `var=value`."""
    return "defaults" if pair is None else choice_id(pair)


def answers(pair) -> dict[str, str]:
    """extra_context for one parametrised bake."""
    return {} if pair is None else {pair[0]: pair[1]}


@pytest.fixture(scope="session")
def bake_checks(bakery):
    """Per bake, once: `train.py --help` and (for non-default bakes) the device tests, in one subprocess."""
    cache: dict = {}

    def check(pair):
        if pair not in cache:
            project = bakery.project(**answers(pair))
            targets = [] if pair is None else [f for f in DEVICE_TEST_FILES if (project / f).is_file()]
            proc = run([sys.executable, str(TEMPLATE / "tests" / "bake_check.py"), *targets], cwd=project, timeout=600)
            last = proc.stdout.strip().splitlines()[-1:] or [""]
            result = json.loads(last[0][len("BAKE_CHECK "):]) if last[0].startswith("BAKE_CHECK ") else None
            cache[pair] = (project, proc, result)
        return cache[pair]

    return check


# The licence answers change only LICENSE and pyproject.toml (test_licence_answers_leave_the_python_alone
# proves it), so running their Python again would repeat the default bake's runs.
CODE_CHANGING = [pair for pair in NON_DEFAULT if pair[0] != "license"]


def checked(bake_checks, pair):
    """The bake's check result, asserted to have been produced."""
    project, proc, result = bake_checks(pair)
    assert result is not None, describe(proc)
    return project, proc, result


@pytest.mark.parametrize("value", [v for k, v in NON_DEFAULT if k == "license"])
def test_licence_answers_leave_the_python_alone(bakery, value):
    """A licence answer renders byte-identical Python to the defaults, so the default bake's runs cover it."""
    assert python_digest(bakery.project(license=value)) == python_digest(bakery.project())


@pytest.mark.parametrize("pair", [None, *CODE_CHANGING], ids=bake_id)
def test_train_help_exits_zero(bake_checks, pair):
    """`python train.py --help` exits 0 and documents --device, whatever the answers were."""
    project, proc, result = checked(bake_checks, pair)
    assert (project / "train.py").is_file(), "train.py was not generated"
    assert result["help_code"] == 0, describe(proc)
    assert "--device" in result["help"], result["help"]


@pytest.mark.parametrize("pair", CODE_CHANGING, ids=bake_id)
def test_device_tests_pass(bake_checks, pair):
    """The baked device tests (and config tests, when present) pass for each non-default answer."""
    project, proc, result = checked(bake_checks, pair)
    device_tests = project / "tests" / "devkit" / "test_devices.py"
    assert device_tests.is_file(), "tests/devkit/test_devices.py was not generated"
    assert result["pytest_code"] == 0, describe(proc)


def test_default_project_suite_passes(bakery):
    """The default bake's whole test suite passes on this machine (exit 0: tests ran and none failed)."""
    project = bakery.project()
    proc = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project, timeout=2700)
    assert proc.returncode == 0, describe(proc)
