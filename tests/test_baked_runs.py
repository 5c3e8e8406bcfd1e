"""Running baked projects: every answer's bake passes its quick tier; the default bake passes its whole suite
after the README's own install commands.

Runs are subprocesses of this interpreter (which has torch and torchvision) with the baked project
as the working directory, so the project's own package and conftest are the ones used. For each
bake, `train.py --help` and the quick tier share one process (tests/bake_check.py) because
importing torchvision dominates the cost.

CI time: one bake per answer would run the quick tier 13 times. The answers are independent
choices, so the non-default values are packed into as few bakes as the longest choice has values
(ANSWER_SETS: 4 bakes, each a real combination a user could pick), and each bake skips the test
folders whose code and tests are byte-identical in every bake (ANSWER_INDEPENDENT, checked below).
The default bake's whole suite (the longest run) starts in the background with the first bake check
and is collected by the last test: it runs beside the quick tiers, one single-threaded process a core.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers import CHOICES, NON_DEFAULT, TEMPLATE, describe, python_digest, run, subprocess_env

pytestmark = pytest.mark.slow

# The licence answers change only LICENSE and pyproject.toml (test_licence_answers_leave_the_python_alone
# proves it), so running their Python again would repeat the default bake's runs.
CODE_CHANGING = [pair for pair in NON_DEFAULT if pair[0] != "license"]
# Bake i takes each code-changing choice's (i+1)-th non-default value, where it has one.
_OTHER_VALUES = {var: values[1:] for var, values in CHOICES.items() if var != "license"}
ANSWER_SETS = [{var: values[i] for var, values in _OTHER_VALUES.items() if i < len(values)}
               for i in range(max(map(len, _OTHER_VALUES.values())))]
# Folders whose files are the same bytes in every bake: their tests give the default bake's result.
ANSWER_INDEPENDENT = ["tools", "tests/tools"]
QUICK_TIER = ["-m", "not slow", "tests", *(f"--ignore={f}" for f in ANSWER_INDEPENDENT if f.startswith("tests/"))]


def bake_id(answers) -> str:
    """`defaults` for the default bake, else `var=value,var=value`."""
    return ",".join(f"{var}={value}" for var, value in answers.items()) if answers else "defaults"


def folder_digest(folder: Path) -> str:
    """A hash of every file's relative path and bytes under `folder` (caches left out)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@pytest.fixture(scope="session")
def bake_checks(bakery, default_suite):
    """Per bake, once: `train.py --help` and (for non-default bakes) the quick tier, in one subprocess.

    Asks for `default_suite` only to start it first, so that it runs beside these checks.
    """
    cache: dict = {}

    def check(answers):
        key = tuple(sorted(answers.items()))
        if key not in cache:
            project = bakery.project(**answers)
            targets = QUICK_TIER if answers else []
            proc = run([sys.executable, str(TEMPLATE / "tests" / "bake_check.py"), *targets], cwd=project,
                       timeout=1200, OMP_NUM_THREADS="1")
            last = proc.stdout.strip().splitlines()[-1:] or [""]
            result = json.loads(last[0][len("BAKE_CHECK "):]) if last[0].startswith("BAKE_CHECK ") else None
            cache[key] = (project, proc, result)
        return cache[key]

    return check


def test_the_answer_sets_cover_every_code_changing_answer():
    """Each non-default value of each choice but the licence is in exactly one of the quick-tier bakes."""
    covered = sorted((var, value) for answers in ANSWER_SETS for var, value in answers.items())
    assert covered == sorted(CODE_CHANGING)


@pytest.mark.parametrize("answers", ANSWER_SETS, ids=bake_id)
def test_answer_independent_folders_are_identical_in_every_bake(bakery, answers):
    """The folders the quick tier skips for non-default bakes are byte-identical to the default bake's."""
    for folder in ANSWER_INDEPENDENT:
        assert folder_digest(bakery.project(**answers) / folder) == folder_digest(bakery.project() / folder), folder


def checked(bake_checks, answers):
    """The bake's check result, asserted to have been produced."""
    project, proc, result = bake_checks(answers)
    assert result is not None, describe(proc)
    return project, proc, result


@pytest.mark.parametrize("value", [v for k, v in NON_DEFAULT if k == "license"])
def test_licence_answers_leave_the_python_alone(bakery, value):
    """A licence answer renders byte-identical Python to the defaults, so the default bake's runs cover it."""
    assert python_digest(bakery.project(license=value)) == python_digest(bakery.project())


@pytest.mark.parametrize("answers", [{}, *ANSWER_SETS], ids=bake_id)
def test_train_help_exits_zero_and_shows_the_defaults(bake_checks, answers):
    """`python train.py --help` exits 0, documents --device, and shows the defaults of the flags a newcomer
    changes first, whatever the answers were."""
    project, proc, result = checked(bake_checks, answers)
    assert (project / "train.py").is_file(), "train.py was not generated"
    assert result["help_code"] == 0, describe(proc)
    help_text = " ".join(result["help"].split())
    assert "--device" in help_text, help_text
    for default in ("to train (default: 3)", "(default: 32)", "(default: 0.002)", "(default: none)",
                    "(default: 1)"):
        assert default in help_text, default


@pytest.mark.parametrize("answers", ANSWER_SETS, ids=bake_id)
def test_quick_tier_passes(bake_checks, answers):
    """The bake's own quick tier (`pytest -m "not slow"`) passes for every non-default answer."""
    project, proc, result = checked(bake_checks, answers)
    assert result["pytest_code"] == 0, describe(proc)


def readme_venv(project: Path, venv: Path) -> Path:
    """The generated README's virtual environment, offline: `python -m venv` as it says, then this interpreter's
    packages (torch, torchvision, pytest...) made visible in it instead of downloading them. Its python."""
    proc = run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], cwd=project, timeout=300)
    assert proc.returncode == 0, describe(proc)
    python = venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=project)
    (Path(site.stdout.strip()) / "parent-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # The venv's bundled setuptools may predate the project's build requirement; the parent's is new enough.
    run([str(python), "-m", "pip", "uninstall", "-q", "-y", "setuptools"], cwd=project, timeout=300)
    return python


@pytest.fixture(scope="session")
def default_suite(bakery, tmp_path_factory):
    """The default bake's whole suite, started in the background inside the README's venv after its
    `pip install -e '.[test]'` (--no-deps --no-build-isolation: the dependencies come from this
    interpreter, offline). Yields the README, the install's result, the running suite and its log."""
    work = tmp_path_factory.mktemp("readme-install")
    project = work / "project"
    shutil.copytree(bakery.project(), project)
    readme = (project / "README.md").read_text(encoding="utf-8")
    python = readme_venv(project, work / ".venv")
    install = run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", ".[test]"],
                  cwd=project, timeout=600)
    with open(work / "suite.log", "w+", encoding="utf-8") as log:
        suite = None
        if install.returncode == 0:
            suite = subprocess.Popen([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project,
                                     env=subprocess_env(OMP_NUM_THREADS="1"), stdout=log, stderr=subprocess.STDOUT)
        yield readme, install, suite, log
        if suite is not None and suite.poll() is None:  # a failed or interrupted session: stop it
            suite.kill()
            suite.wait()


def test_default_project_suite_passes_after_the_readme_install(default_suite):
    """The default bake's whole suite passes inside the README's venv after its `pip install -e '.[test]'`."""
    readme, install, suite, log = default_suite
    assert "python3 -m venv .venv" in readme and "python -m pip install -e '.[test]'" in readme
    assert install.returncode == 0, describe(install)
    try:
        code = suite.wait(timeout=2700)
    except subprocess.TimeoutExpired:
        suite.kill()
        code = suite.wait()
    log.seek(0)
    assert code == 0, f"exit {code}; output tail:\n{log.read()[-3000:]}"
