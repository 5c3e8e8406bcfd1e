"""Running baked projects: every answer's bake passes its quick tier; the default bake passes its whole suite
after the README's own install commands.

Runs are subprocesses of this interpreter (which has torch and torchvision) with the baked project
as the working directory, so the project's own package and conftest are the ones used. For each
bake, `train.py --help` and the quick tier share one process (tests/bake_check.py) because
importing torchvision dominates the cost.

CI time: one bake per answer would run the quick tier 13 times. The answers are independent
choices, so the non-default values are packed into as few bakes as the longest choice has values
(plan.ANSWER_SETS: 4 bakes, each a real combination a user could pick). Three of them run their quick
tier in a version entry's environment (tests/test_versions.py); the rest run it here, skipping the test
folders whose code and tests are byte-identical in every bake (ANSWER_INDEPENDENT, checked below).
The default bake's whole suite runs as two tests (its quick tier and its slow one), so that pytest-xdist's
workers (one a core; pyproject.toml's addopts) take them beside the rest.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers import CHOICES, DEFAULT_PACKAGE, NON_DEFAULT, TEMPLATE, describe, python_digest, run
from plan import ANSWER_SETS, CODE_CHANGING, MATRIX, QUICK_ON_MAIN, bake_id

pytestmark = pytest.mark.slow

# Folders whose files are the same bytes in every bake: their tests give the default bake's result.
ANSWER_INDEPENDENT = ["tools", "tests/tools"]
QUICK_TIER = ["-m", "not slow", "tests", *(f"--ignore={f}" for f in ANSWER_INDEPENDENT if f.startswith("tests/"))]


def folder_digest(folder: Path) -> str:
    """A hash of every file's relative path and bytes under `folder` (caches left out)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@pytest.fixture(scope="session")
def bake_checks(bakery):
    """Per bake and worker, once: `train.py --help` and, when asked, the quick tier, in one subprocess.

    The help test asks for the help alone: under xdist it may run on another worker than the quick-tier test,
    whose check (help included) would otherwise run the quick tier a second time there.
    """
    cache: dict = {}

    def check(answers, quick=False):
        key = (tuple(sorted(answers.items())), quick)
        if key not in cache:
            project = bakery.project(**answers)
            targets = QUICK_TIER if quick else []
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


def test_each_answer_bake_runs_its_quick_tier_exactly_once():
    """Every answer bake's quick tier runs in one place: a version entry's environment or this one."""
    runs = [entry.answers for entry in MATRIX] + QUICK_ON_MAIN
    assert sorted(map(bake_id, runs)) == sorted(map(bake_id, ANSWER_SETS))


@pytest.mark.parametrize("answers", ANSWER_SETS, ids=bake_id)
def test_answer_independent_folders_are_identical_in_every_bake(bakery, answers):
    """The folders the quick tier skips for non-default bakes are byte-identical to the default bake's."""
    for folder in ANSWER_INDEPENDENT:
        assert folder_digest(bakery.project(**answers) / folder) == folder_digest(bakery.project() / folder), folder


def checked(bake_checks, answers, quick=False):
    """The bake's check result, asserted to have been produced."""
    project, proc, result = bake_checks(answers, quick)
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


@pytest.mark.parametrize("answers", QUICK_ON_MAIN, ids=bake_id)
def test_quick_tier_passes(bake_checks, answers):
    """The bake's own quick tier (`pytest -m "not slow"`) passes for the answer bakes no version entry runs
    (tests/test_versions.py runs the others' in their own environments)."""
    project, proc, result = checked(bake_checks, answers, quick=True)
    assert result["pytest_code"] == 0, describe(proc)


# The answer bakes that bring plugins (plugins/ and tests/plugins/: ddp, a tracker, gpu_decode, fine_tuning): their
# quick tests run in the bake's quick tier above; their slow ones (real torchrun jobs, tracker resumes) run here.
PLUGIN_BAKES = [answers for answers in ANSWER_SETS
                if answers.get("multi_gpu") == "ddp" or answers.get("tracker", "csv") != "csv"
                or answers.get("gpu_decode") == "yes" or answers.get("fine_tuning") == "yes"]


@pytest.mark.parametrize("answers", PLUGIN_BAKES, ids=bake_id)
def test_plugin_slow_tests_pass(bakery, answers, tmp_path):
    """The slow tests of the plugins an answer bake brings pass there (`pytest tests/plugins -m slow`); a bake whose
    quick tier ran in a version entry's environment runs its plugins' quick tests here too, so that both environments
    run them (the gpu_decode tests take TorchCodec here, where the dev group has it, and torchvision's decoder
    there)."""
    project = bakery.project(**answers)
    assert (project / "tests" / "plugins").is_dir(), f"{bake_id(answers)} brings no plugin tests"
    tiers = ["-m", "slow"] if answers in QUICK_ON_MAIN else []
    suite = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tiers, "tests/plugins",
                 f"--basetemp={tmp_path / 'plugins'}"], cwd=project, timeout=2700, OMP_NUM_THREADS="1")
    shutil.rmtree(tmp_path / "plugins", ignore_errors=True)
    assert suite.returncode in (0, 5), describe(suite)  # 5: no slow test in the folders this bake brings


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
def readme_install(bakery, tmp_path_factory):
    """The default bake copied and installed as its README says, inside the README's venv: `pip install -e
    '.[test]'` (--no-deps --no-build-isolation: the dependencies come from this interpreter, offline).
    The project, the venv's python, the README and the install's result."""
    work = tmp_path_factory.mktemp("readme-install")
    project = work / "project"
    shutil.copytree(bakery.project(), project)
    readme = (project / "README.md").read_text(encoding="utf-8")
    python = readme_venv(project, work / ".venv")
    install = run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", ".[test]"],
                  cwd=project, timeout=600)
    return project, python, readme, install


# The default bake's whole suite, in two runs that CI's workers can take side by side.
TIERS = {"quick": "not slow", "slow": "slow"}

# Writes, with the project's own weights_file, a weights file with the right keys for every stock backbone (as its
# tests/test_model.py does): a hub cache like that of a machine that has run pretrained torchvision models before.
WARM_HUB = """
import json, os, sys, torch
from torchvision import models
from {package}.model import weights_file
for name in json.loads(sys.argv[1]):
    os.makedirs(os.path.dirname(weights_file(name)), exist_ok=True)
    torch.manual_seed(1)
    torch.save(models.get_model(name, weights=None).state_dict(), weights_file(name))
"""


@pytest.fixture(scope="session")
def users_machine(readme_install, tmp_path_factory) -> dict[str, str]:
    """The environment of a user who has used torch before: a warm hub cache under TORCH_HOME and XDG_CACHE_HOME
    (one folder, as torch lays it out by default) and unusual values for the variables the project and torch read.
    The suite must decide these for itself (issue 46): none of them may change a result."""
    project, python, _, _ = readme_install
    cache = tmp_path_factory.mktemp("users-cache")
    machine = {
        "XDG_CACHE_HOME": str(cache),
        "TORCH_HOME": str(cache / "torch"),  # torch's default place under XDG_CACHE_HOME, named as users name it
        "OMP_NUM_THREADS": "3",  # more threads than CI's cores: a run compared bit for bit with it differs
        "CUDA_VISIBLE_DEVICES": "0,1",  # set, yet hiding none of the 0, 1 or 2 GPUs a CI machine has
        f"{DEFAULT_PACKAGE.upper()}_DEVICE": "meta",  # the device nothing trains on: a test it reaches fails
    }
    proc = run([str(python), "-c", WARM_HUB.format(package=DEFAULT_PACKAGE), json.dumps(CHOICES["backbone"])],
               cwd=project, timeout=600, TORCH_HOME=machine["TORCH_HOME"])
    cached = sorted(path.name for path in (cache / "torch" / "hub" / "checkpoints").glob("*.pth"))
    assert proc.returncode == 0 and len(cached) == len(CHOICES["backbone"]), describe(proc)
    return machine


@pytest.mark.parametrize("tier", TIERS)
def test_default_project_suite_passes_after_the_readme_install(readme_install, users_machine, tier):
    """The default bake's whole suite (its quick tier, then its slow one) passes inside the README's venv after its
    `pip install -e '.[test]'`, on a user's machine: every stock backbone's weights cached, and TORCH_HOME,
    XDG_CACHE_HOME, OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES and the project's device variable set."""
    project, python, readme, install = readme_install
    assert "python3 -m venv .venv" in readme and "python -m pip install -e '.[test]'" in readme
    assert install.returncode == 0, describe(install)
    # the quick tier as the generated README runs it; the slow one (205 tests that mostly wait on their train.py
    # processes: 30+ minutes in one worker, CI's longest path) in two
    workers = ["-n", "auto"] if tier == "quick" else ["-n", "2"]
    suite = run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", TIERS[tier], *workers,
                 f"--basetemp={project.parent / f'{tier}-tmp'}"], cwd=project, timeout=2700, **users_machine)
    shutil.rmtree(project.parent / f"{tier}-tmp", ignore_errors=True)  # GBs of checkpoints on a disk CI shares
    assert suite.returncode == 0, describe(suite)
