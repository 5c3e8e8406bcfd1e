"""The habits of a maintained repository: ruff passes everywhere, and every bake ships CI and pre-commit.

The template repository and each baked project are checked with ruff under their own settings;
the generated workflow's commands are the README's; the generated pre-commit hooks run offline.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import DEFAULT_PACKAGE, EVERY_VALUE, TEMPLATE, choice_id, describe, run


def ruff(path: Path) -> subprocess.CompletedProcess:
    """`ruff check .` in `path`, with the settings of the pyproject.toml found there."""
    return run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=path, timeout=120)


def develop_commands(project: Path) -> list[str]:
    """The commands of the generated README's Develop block, in order."""
    readme = (project / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Develop", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.strip() for line in block.splitlines() if line.strip()]


def workflow_commands(project: Path) -> list[str]:
    """The `run:` steps of the generated CI workflow, in order."""
    workflow = yaml.safe_load((project / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8"))
    return [step["run"].strip() for job in workflow["jobs"].values() for step in job["steps"] if "run" in step]


def test_the_template_repository_passes_ruff():
    """Hooks, scripts and the template's tests pass the same rules as the generated project."""
    proc = ruff(TEMPLATE)
    assert proc.returncode == 0, describe(proc)


@pytest.mark.parametrize("pair", EVERY_VALUE, ids=choice_id)
def test_every_bake_passes_ruff(bakery, pair):
    """Whatever the answers, the generated project passes `ruff check` with its own configuration."""
    project = bakery.project(**{pair[0]: pair[1]})
    assert "[tool.ruff]" in (project / "pyproject.toml").read_text(encoding="utf-8")
    proc = ruff(project)
    assert proc.returncode == 0, describe(proc)


def test_the_ci_workflow_runs_the_readme_commands_on_push_and_pull_request(bakery):
    """.github/workflows/ci.yml installs, lints and tests with exactly the README's Develop commands."""
    project = bakery.project()
    workflow = yaml.safe_load((project / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8"))
    assert {"push", "pull_request"} <= set(workflow[True])  # YAML 1.1 reads the key `on` as True
    pin, *commands = workflow_commands(project)  # first the matrix entry's torch pair (tests/test_versions.py)
    assert pin.startswith("python -m pip install \"torch==${{ matrix.torch }}.*\"")
    assert commands == develop_commands(project)
    assert develop_commands(project)[0] == "python -m pip install -e '.[test]'"
    assert "python -m pytest" in develop_commands(project)


@pytest.mark.slow
def test_the_pre_commit_hooks_run_offline_and_catch_a_device_hazard(bakery, tmp_path):
    """`pre-commit run --all-files` passes on a fresh bake and fails, naming DEV001, once a .cuda() is added."""
    project = bakery.project()
    env = {"PRE_COMMIT_HOME": str(tmp_path / "pre-commit"),
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    work = tmp_path / "repo"
    subprocess.run(["cp", "-r", str(project), str(work)], check=True)
    git = ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=work, check=True)
    subprocess.run([*git, "add", "-A"], cwd=work, check=True)
    hooks = [sys.executable, "-m", "pre_commit", "run", "--all-files"]
    clean = run(hooks, cwd=work, timeout=300, **env)
    assert clean.returncode == 0, describe(clean)
    (work / DEFAULT_PACKAGE / "hazard.py").write_text("import torch\n\nx = torch.zeros(3).cuda()\n")
    subprocess.run([*git, "add", "-A"], cwd=work, check=True)
    dirty = run(hooks, cwd=work, timeout=300, **env)
    assert dirty.returncode == 1 and "DEV001" in dirty.stdout, describe(dirty)
