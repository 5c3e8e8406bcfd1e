"""The first commands on a Python that refuses `pip install` (PEP 668), as Debian's and Ubuntu's own `python3` does.

The Python is simulated: a copy of this interpreter's installation (its executable copied, the rest linked) whose
standard library folder holds the `EXTERNALLY-MANAGED` marker, so that its pip refuses as a stock Debian's does.
The template README's commands (Try it, generate a project, Test it) install uv with that Python's pip and run the
rest through uv; the generated README makes its venv with it and installs the project there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers import TEMPLATE, describe, run, subprocess_env

README = (TEMPLATE / "README.md").read_text(encoding="utf-8")
FIRST_COMMANDS = 3  # Try it, generate a project of your own, Test it


def readme_commands() -> list[str]:
    """Every one-line bash block of the template README's "Try it" and "Test it" sections, in order."""
    sections = re.findall(r"^## (?:Try it|Test it)\n(.*?)(?=^## )", README, re.S | re.M)
    return [block.strip() for section in sections for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def externally_managed_python(root: Path) -> Path:
    """A Python at `root` that is this one's base installation with PEP 668's marker in its standard library."""
    base, stdlib = Path(sys.base_prefix), Path(sysconfig.get_path("stdlib"))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    executable = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    (root / "bin").mkdir(parents=True)
    shutil.copy2(executable, root / "bin" / version)  # a copy: Python finds its prefix from where it runs
    (root / "bin" / "python3").symlink_to(version)
    for entry in (base / "lib").iterdir():  # libpython, where the executable links to it
        if entry != stdlib:
            (root / "lib" / entry.name).parent.mkdir(exist_ok=True)
            (root / "lib" / entry.name).symlink_to(entry)
    own_stdlib = root / "lib" / version
    (own_stdlib / "site-packages").mkdir(parents=True)
    for entry in stdlib.iterdir():
        if entry.name != "site-packages":
            (own_stdlib / entry.name).symlink_to(entry)
    python = root / "bin" / "python3"
    pip = run([str(python), "-m", "ensurepip", "--default-pip"], cwd=root, timeout=300)
    if pip.returncode != 0:
        pytest.skip(f"this Python has no ensurepip to give the copy a pip of its own: {describe(pip)}")
    (own_stdlib / "EXTERNALLY-MANAGED").write_text("[externally-managed]\nError=Use apt.\n", encoding="utf-8")
    return python


@pytest.fixture(scope="module")
def stock_python(tmp_path_factory) -> Path:
    """The externally-managed Python's bin folder, its pip already shown to refuse a plain install."""
    python = externally_managed_python(tmp_path_factory.mktemp("stock") / "python")
    refused = run([str(python), "-m", "pip", "install", "--no-index", "uv"], cwd=python.parent, timeout=300)
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr, describe(refused)
    return python.parent


def in_shell(command: str, cwd: Path, bin_folder: Path, **env: str) -> subprocess.CompletedProcess:
    """`command` run by bash in `cwd` with the stock Python first on PATH, as a user's shell finds `python3`, and no
    environment of this session's active."""
    env = {k: v for k, v in subprocess_env(**env).items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
    env.update(PATH=os.pathsep.join([str(bin_folder), os.environ.get("PATH", "")]), UV_PYTHON_DOWNLOADS="never")
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_readme_commands_install_uv_where_pip_refuses_and_run_through_it(stock_python, cli_config, tmp_path):
    """Each of the README's first commands installs uv with the stock Python's pip and starts uv from there; the
    uv it installed then syncs the lock and runs the command's program (cookiecutter generates the default
    project, pytest collects; both with arguments appended so that nothing asks or runs long)."""
    commands = readme_commands()[:FIRST_COMMANDS]
    assert len(commands) == FIRST_COMMANDS, commands
    installs = {command.split(" && ")[0] for command in commands}
    assert len(installs) == 1, installs
    clone = tmp_path / "clone"
    shutil.copytree(TEMPLATE, clone, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".uv", ".scratch", ".gpu-bakes", ".whl", "runs", "gpu-check-out", "__pycache__"))
    install = in_shell(installs.pop(), clone, stock_python)
    assert install.returncode == 0, describe(install)
    appended = {"cookiecutter": " --no-input", "pytest": " --collect-only -q tests/test_repo.py"}
    for command in commands[1:]:
        extra = next(value for key, value in appended.items() if command.split()[-1] == key or f" {key} " in command)
        proc = in_shell(command + extra, clone, stock_python, COOKIECUTTER_CONFIG=str(cli_config))
        assert proc.returncode == 0, f"{command}{extra}\n{describe(proc)}"
    assert (tmp_path / "image-classifier" / "train.py").is_file()
    assert (clone / ".venv").is_dir()


def test_the_generated_readme_makes_its_venv_and_installs_where_pip_refuses(stock_python, bakery, tmp_path):
    """The generated README's venv line, run with the stock Python, gives a venv whose pip installs the project
    (`pip install -e '.[test]'` as the README says, offline: --no-deps --no-build-isolation, with this interpreter's
    packages made visible through a .pth file)."""
    project = tmp_path / "project"
    shutil.copytree(bakery.project(), project)
    readme = (project / "README.md").read_text(encoding="utf-8")
    venv_line = next(line for line in readme.splitlines() if line.startswith("python3 -m venv")).split("  #")[0]
    install_line = next(line for line in readme.splitlines() if "pip install -e '.[test]'" in line).split("  #")[0]
    parent = sysconfig.get_paths()["purelib"]
    show_parent = (f"python -c \"import sysconfig, pathlib; pathlib.Path(sysconfig.get_paths()['purelib'], "
                   f"'parent.pth').write_text({parent!r})\"")
    proc = in_shell(f"{venv_line.strip()} && {show_parent} && python -m pip uninstall -q -y setuptools; "
                    f"{install_line.strip()} -q --no-deps --no-build-isolation && python -c 'import image_classifier'",
                    project, stock_python)
    assert proc.returncode == 0, describe(proc)
