"""A project generated from an older commit of this template takes the current template with `cruft update`,
keeping its owner's committed changes, and its suite still passes.

The template is cloned into a scratch repository whose newest commit is this checkout's working tree (so
uncommitted edits are what gets tested) plus one marker line at the end of the generated README, a change
the update must bring. The project is made with `cruft create --checkout` an older commit of the template's
own history, committed, changed by its owner (README's title, a module of their own), committed again, then
updated non-interactively. cruft runs from the test environment when installed there, else through
uv (`uvx --from cruft==2.16.0`: PyPI once, then uv's cache).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from helpers import DEFAULT_PACKAGE, TEMPLATE, describe, run, subprocess_env, text_files

GENERATIONS_BACK = 3  # how many first-parent commits before HEAD the project is generated from
MARKER = "<!-- a line the newer template adds: the update must bring it -->"
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def cruft_command() -> list[str] | None:
    """How to run cruft here: the installed module, else through uv (uvx, uv, or uv as a module); None if neither."""
    if importlib.util.find_spec("cruft") is not None:
        return [sys.executable, "-m", "cruft"]
    tool_run = ["tool", "run", "--from", "cruft==2.16.0", "cruft"]
    if shutil.which("uvx"):
        return [shutil.which("uvx"), *tool_run[2:]]
    if shutil.which("uv"):
        return [shutil.which("uv"), *tool_run]
    if importlib.util.find_spec("uv") is not None:
        return [sys.executable, "-m", "uv", *tool_run]
    return None


CRUFT = cruft_command()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("git") is None or CRUFT is None, reason="needs git and cruft (or uvx)"),
]


def git(cwd: Path, *args: str) -> str:
    """Run git with a throwaway identity; fail the test on a non-zero exit; return stdout."""
    result = run(["git", *args], cwd=cwd, timeout=300, **GIT_IDENTITY)
    assert result.returncode == 0, describe(result)
    return result.stdout.strip()


class Scratch(NamedTuple):
    """The scratch template repository and three of its commits, oldest first."""

    repo: Path
    older: str  # GENERATIONS_BACK first-parent commits before the template's HEAD
    current: str  # this checkout's working tree
    newest: str  # current + MARKER: what an update must bring


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Scratch:
    """A clone of the template with two new commits on top: this working tree, then the same plus MARKER."""
    root = tmp_path_factory.mktemp("scratch")
    repo = root / "template"
    git(root, "clone", "--quiet", str(TEMPLATE), str(repo))
    ancestors = git(repo, "rev-list", "--first-parent", f"--max-count={GENERATIONS_BACK + 1}", "HEAD").split()
    if len(ancestors) <= GENERATIONS_BACK:
        pytest.skip("the template's history is too shallow for an older commit")
    git(repo, "rm", "-rq", "--cached", ".")
    for name in filter(None, git(TEMPLATE, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")):
        if (TEMPLATE / name).is_file():  # a file deleted in the working tree but not yet in git stays out
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(TEMPLATE / name, repo / name)
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "--allow-empty", "-m", "the template as it is now")
    current = git(repo, "rev-parse", "HEAD")
    readme = repo / "{{cookiecutter.project_slug}}" / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + f"\n{MARKER}\n", encoding="utf-8")
    git(repo, "commit", "--quiet", "-am", "a newer template")
    return Scratch(repo, ancestors[GENERATIONS_BACK], current, git(repo, "rev-parse", "HEAD"))


def cruft(cwd: Path, config: Path, *args: str) -> subprocess.CompletedProcess:
    """Run cruft without questions, with the test's own cookiecutter config (replays stay in the test's folder)."""
    return run([*CRUFT, *args], cwd=cwd, timeout=900, COOKIECUTTER_CONFIG=str(config), **GIT_IDENTITY)


def change_commit_and_update(project: Path, config: Path) -> tuple[str, Path]:
    """The owner's two committed changes (README's title, a module of their own), then `cruft update -y`."""
    readme = project / "README.md"
    title, rest = readme.read_text(encoding="utf-8").split("\n", 1)
    readme.write_text(f"{title} (our fork)\n{rest}", encoding="utf-8")
    own_module = project / DEFAULT_PACKAGE / "our_notes.py"
    own_module.write_text('"""Something of ours the template knows nothing about."""\n\nANSWER = 42\n')
    git(project, "add", "-A")
    git(project, "commit", "--quiet", "-m", "our changes")
    updated = cruft(project, config, "update", "--skip-apply-ask", "--allow-untracked-files")
    assert updated.returncode == 0, describe(updated)
    return title, own_module


def assert_updated_and_still_ours(project: Path, title: str, own_module: Path, newest: str) -> None:
    """The newer template's line arrived, the owner's changes stayed, nothing half-merged, the suite passes."""
    assert json.loads((project / ".cruft.json").read_text())["commit"] == newest
    text = (project / "README.md").read_text(encoding="utf-8")
    assert text.startswith(f"{title} (our fork)\n") and text.rstrip().endswith(MARKER)
    assert own_module.read_text().endswith("ANSWER = 42\n")
    assert not list(project.rglob("*.rej"))
    assert git(project, "diff", "--name-only", "--diff-filter=U") == ""
    assert [path for path, content in text_files(project) if "\n<<<<<<< " in f"\n{content}"] == []
    suite = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                 "tests/test_config.py", "tests/test_architecture.py"], cwd=project, timeout=900)
    assert suite.returncode == 0, describe(suite)


def test_a_changed_project_from_an_older_template_commit_takes_the_update_and_keeps_its_changes(
        scratch, tmp_path, cli_config):
    """cruft create at a commit of the template's history, the owner commits changes, `cruft update -y`."""
    made = cruft(tmp_path, cli_config, "create", str(scratch.repo), "--checkout", scratch.older, "--no-input",
                 "--output-dir", str(tmp_path))
    assert made.returncode == 0, describe(made)
    project = tmp_path / "image-classifier"
    assert json.loads((project / ".cruft.json").read_text())["commit"] == scratch.older
    git(project, "init", "--quiet")
    git(project, "add", "-A")
    git(project, "commit", "--quiet", "-m", "generated")
    title, own_module = change_commit_and_update(project, cli_config)
    assert_updated_and_still_ours(project, title, own_module, scratch.newest)


def test_a_project_made_with_plain_cookiecutter_is_a_repository_that_cruft_can_update(scratch, tmp_path, cli_config):
    """Plain `cookiecutter` leaves a git repository and a .cruft.json naming the template and its commit; after
    the owner's first commit and changes, `cruft update -y` brings the newer template."""
    git(scratch.repo, "checkout", "--quiet", scratch.current)
    try:
        made = run([sys.executable, "-m", "cookiecutter", "--no-input", "--output-dir", str(tmp_path),
                    str(scratch.repo)], cwd=tmp_path, timeout=300, COOKIECUTTER_CONFIG=str(cli_config))
    finally:
        git(scratch.repo, "checkout", "--quiet", "-")
    assert made.returncode == 0, describe(made)
    project = tmp_path / "image-classifier"
    recorded = json.loads((project / ".cruft.json").read_text())
    assert (recorded["template"], recorded["commit"]) == (str(scratch.repo.resolve()), scratch.current)
    assert git(project, "rev-parse", "--show-toplevel") == str(project.resolve())  # its own repository
    git(project, "add", "-A")
    git(project, "commit", "--quiet", "-m", "generated")
    title, own_module = change_commit_and_update(project, cli_config)
    assert_updated_and_still_ours(project, title, own_module, scratch.newest)


def test_a_lean_project_gains_an_answers_machinery_by_cruft_update(scratch, tmp_path, cli_config):
    """Generated with the default answers, committed, then `cruft update --variables-to-update` with multi_gpu=ddp
    and a tracker (the README's "Growing later"): the answers' whole files arrive (the ddp plugin, its launch
    script and docs, the tracker plugin), train.py offers them, and the suite still passes."""
    made = cruft(tmp_path, cli_config, "create", str(scratch.repo), "--checkout", scratch.current, "--no-input",
                 "--output-dir", str(tmp_path))
    assert made.returncode == 0, describe(made)
    project = tmp_path / "image-classifier"
    assert not (project / DEFAULT_PACKAGE / "plugins" / "ddp").exists()
    git(project, "init", "--quiet")
    git(project, "add", "-A")
    git(project, "commit", "--quiet", "-m", "generated lean")
    grown = cruft(project, cli_config, "update", "--skip-apply-ask", "--allow-untracked-files", "--checkout",
                  scratch.current, "--variables-to-update", json.dumps({"multi_gpu": "ddp", "tracker": "tensorboard"}))
    assert grown.returncode == 0, describe(grown)
    for path in (f"{DEFAULT_PACKAGE}/plugins/ddp/processes.py", f"{DEFAULT_PACKAGE}/plugins/tensorboard.py",
                 "scripts/launch_ddp.sh", "docs/multi-node.md", "tests/plugins/ddp/test_ddp.py"):
        assert (project / path).is_file(), path
    assert json.loads((project / ".cruft.json").read_text())["context"]["cookiecutter"]["multi_gpu"] == "ddp"
    helped = run([sys.executable, "train.py", "--help"], cwd=project, timeout=300)
    assert "ddp" in helped.stdout and "tensorboard" in helped.stdout, describe(helped)
    suite = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "tests/test_config.py",
                 "tests/test_architecture.py"], cwd=project, timeout=900)
    assert suite.returncode == 0, describe(suite)


def docs_blocks(project: Path) -> list[str]:
    """The bash blocks of the project's docs/updates.md, in order."""
    text = (project / "docs" / "updates.md").read_text(encoding="utf-8")
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def in_shell(block: str, project: Path, config: Path, answers: str = "") -> subprocess.CompletedProcess:
    """A docs block run by bash in the project, `cruft` being this session's cruft and `python` and `cookiecutter`
    this interpreter's (`pip install cruft` is the line that provides them: not run here); `answers` are what the
    user types."""
    tools = project.parent / "tools"
    tools.mkdir(exist_ok=True)
    (tools / "cruft").write_text('#!/bin/sh\nexec ' + " ".join(f"'{part}'" for part in CRUFT) + ' "$@"\n')
    (tools / "cruft").chmod(0o755)
    for name, module in (("python", None), ("cookiecutter", "cookiecutter")):
        command = f"'{sys.executable}'" + (f" -m {module}" if module else "")
        (tools / name).write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        (tools / name).chmod(0o755)
    lines = [line for line in block.splitlines() if line.strip() and line.strip() != "pip install cruft"]
    path = os.pathsep.join([str(tools), os.environ.get("PATH", "")])
    env = subprocess_env(PATH=path, COOKIECUTTER_CONFIG=str(config), **GIT_IDENTITY)
    return subprocess.run(["bash", "-c", "\n".join(lines)], cwd=project, env=env, input=answers, capture_output=True,
                          text=True, timeout=900)


def make_project(way: str, scratch: Scratch, tmp_path: Path, config: Path) -> subprocess.CompletedProcess:
    """The project made at the template's `current` commit (its hook and docs are this working tree's), each way the
    template README documents: a local clone's `cookiecutter . --output-dir ..`, `cookiecutter GIT_URL`,
    `cruft create GIT_URL`."""
    named = scratch.repo.with_name("template.git")  # cookiecutter takes a URL for git's when it says "git"
    if not named.exists():
        named.symlink_to(scratch.repo)
    url = named.as_uri()  # file:///.../template.git: a git URL that needs no network
    if way == "clone":
        git(scratch.repo, "checkout", "--quiet", scratch.current)
        try:  # PWD as a shell sets it: the hook finds a relative template folder from there
            return run([sys.executable, "-m", "cookiecutter", ".", "--no-input", "--output-dir", str(tmp_path)],
                       cwd=scratch.repo, timeout=300, COOKIECUTTER_CONFIG=str(config), PWD=str(scratch.repo))
        finally:
            git(scratch.repo, "checkout", "--quiet", "-")
    if way == "url":
        return run([sys.executable, "-m", "cookiecutter", url, "--checkout", scratch.current, "--no-input",
                    "--output-dir", str(tmp_path)], cwd=tmp_path, timeout=300, COOKIECUTTER_CONFIG=str(config))
    return cruft(tmp_path, config, "create", url, "--checkout", scratch.current, "--no-input",
                 "--output-dir", str(tmp_path))


@pytest.mark.parametrize("way", ["clone", "url", "cruft"])
def test_the_update_docs_commands_work_for_a_project_made_each_documented_way(scratch, tmp_path, cli_config, way):
    """docs/updates.md as written, in a project made each way: creation prints the next steps once and leaves a
    git repository; the first-commit line, then `cruft check` (exit 1: a newer commit exists) and `cruft update
    --skip-apply-ask` bring the newer template without printing the next steps again; the re-generate lines
    re-generate the project from the template .cruft.json names, with its answers, and compare."""
    made = make_project(way, scratch, tmp_path, cli_config)
    assert made.returncode == 0, describe(made)
    assert made.stdout.count("Created image-classifier.") == 1, made.stdout
    project = tmp_path / "image-classifier"
    assert git(project, "rev-parse", "--show-toplevel") == str(project.resolve())
    blocks = docs_blocks(project)
    assert len(blocks) == 4, blocks  # the first commit, the update, growing by an answer, re-generating
    first_commit, update, _grow, regenerate = blocks
    committed = in_shell(first_commit, project, cli_config)
    assert committed.returncode == 0 and git(project, "status", "--porcelain") == "", describe(committed)
    check = in_shell(update.split("\n")[1], project, cli_config)  # `cruft check` alone: exit 1 when outdated
    assert check.returncode == 1, describe(check)
    updated = in_shell(update, project, cli_config)
    assert updated.returncode == 0, describe(updated)
    assert "Created " not in updated.stdout + updated.stderr, updated.stdout
    assert json.loads((project / ".cruft.json").read_text())["commit"] == scratch.newest
    assert (project / "README.md").read_text(encoding="utf-8").rstrip().endswith(MARKER)
    git(project, "commit", "--quiet", "-am", "updated")
    # made from the URL, cookiecutter asks whether to re-download the template it cloned then: the user says yes
    compared = in_shell(regenerate, project, cli_config, answers="y\n")
    assert compared.returncode in (0, 1) and "Traceback" not in compared.stderr, describe(compared)
    assert "Only in" not in compared.stdout, compared.stdout  # the same files: nothing lost or added by the update
