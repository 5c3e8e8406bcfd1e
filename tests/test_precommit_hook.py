"""The `devicelint` pre-commit hook works in any repository, offline, straight from a commit of this one."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TEMPLATE

HOOKS_FILE = ".pre-commit-hooks.yaml"
LINTER = "{{cookiecutter.project_slug}}/tools/devicelint.py"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("pre_commit") is None or shutil.which("git") is None,
    reason="needs pre-commit and git",
)


def git(cwd: Path, *args: str) -> str:
    """Run git with a throwaway identity; return its stdout."""
    command = ["git", "-c", "user.name=devicelint test", "-c", "user.email=test@example.invalid",
               "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", *args]
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def hook_repo(tmp_path: Path) -> tuple[Path, str]:
    """A git repository holding this checkout's hook definition and linter, committed; (path, sha)."""
    repo = tmp_path / "hook-repo"
    for name in (HOOKS_FILE, LINTER):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(TEMPLATE / name, repo / name)  # copy2 keeps the executable bit `script` needs
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "hook")
    return repo, git(repo, "rev-parse", "HEAD")


def pre_commit(project: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """`pre-commit run --all-files` in a project, with its cache in the temp dir and no network."""
    env = {**os.environ, "PRE_COMMIT_HOME": str(cache), "PRE_COMMIT_COLOR": "never",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0"}
    return subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_hook_definition_runs_the_single_file_linter() -> None:
    """The hook is a `script`: no install step, so it needs no network; its entry is the linter file."""
    text = (TEMPLATE / HOOKS_FILE).read_text()
    assert "id: devicelint" in text and "language: script" in text and LINTER in text
    assert os.access(TEMPLATE / LINTER, os.X_OK), "language: script needs the executable bit"
    assert (TEMPLATE / LINTER).read_text().startswith("#!/usr/bin/env python3\n")


def test_pre_commit_fails_on_a_hazard_and_passes_once_fixed(tmp_path: Path, hook_repo: tuple[Path, str]) -> None:
    """In a fresh repository the hook names the finding and fails; on clean code it passes."""
    repo, sha = hook_repo
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q")
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {repo.as_posix()}\n    rev: {sha}\n    hooks:\n      - id: devicelint\n")
    (project / "train.py").write_text("import torch\nmodel = torch.nn.Linear(2, 2).to(torch.device('cuda'))\n")
    git(project, "add", ".")
    failed = pre_commit(project, tmp_path / "cache")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "train.py:2:47: DEV002 hard-coded accelerator device: 'cuda'" in failed.stdout

    (project / "train.py").write_text("import torch\nmodel = torch.nn.Linear(2, 2).to(device)\n")
    git(project, "add", ".")
    passed = pre_commit(project, tmp_path / "cache")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "devicelint" in passed.stdout and "Passed" in passed.stdout
