"""A project generated from an older commit of this template takes the current template with `cruft update`,
keeping its owner's committed changes, and its suite still passes.

The template is cloned into a scratch repository whose newest commit is this checkout's working tree (so
uncommitted edits are what gets tested) plus one marker line at the end of the generated README, a change
the update must bring. The project is made with `cruft create --checkout` an older commit of the template's
own history, committed, changed by its owner (README's title, a module of their own), committed again, then
updated non-interactively. cruft runs from the test environment when installed there, else through
`uvx --from cruft` (PyPI, once; then uv's cache).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import DEFAULT_PACKAGE, TEMPLATE, describe, run, text_files

GENERATIONS_BACK = 3  # how many first-parent commits before HEAD the project is generated from
MARKER = "<!-- a line the newer template adds: the update must bring it -->"
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def cruft_command() -> list[str] | None:
    """How to run cruft here: the installed module, or uvx; None when neither is available."""
    if importlib.util.find_spec("cruft") is not None:
        return [sys.executable, "-m", "cruft"]
    uvx = shutil.which("uvx")
    return [uvx, "--from", "cruft==2.16.0", "cruft"] if uvx else None


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


def scratch_template(root: Path) -> tuple[Path, str, str]:
    """A clone of the template whose HEAD is this working tree plus MARKER; (repo, older commit, newest commit)."""
    repo = root / "template"
    git(root, "clone", "--quiet", "--no-checkout", str(TEMPLATE), str(repo))
    ancestors = git(repo, "rev-list", "--first-parent", f"--max-count={GENERATIONS_BACK + 1}", "HEAD").split()
    if len(ancestors) <= GENERATIONS_BACK:
        pytest.skip("the template's history is too shallow for an older commit")
    git(repo, "checkout", "--quiet", "HEAD")
    files = git(TEMPLATE, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    git(repo, "rm", "-rq", "--cached", ".")
    for name in filter(None, files):
        source, target = TEMPLATE / name, repo / name
        if source.is_file():  # a file deleted in the working tree but not yet in git is left out
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    readme = repo / "{{cookiecutter.project_slug}}" / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + f"\n{MARKER}\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "--allow-empty", "-m", "the template as it is now")
    return repo, ancestors[GENERATIONS_BACK], git(repo, "rev-parse", "HEAD")


def cruft(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """Run cruft without questions (and without a cookiecutter config of the user's)."""
    return run([*CRUFT, *args], cwd=cwd, timeout=900, COOKIECUTTER_CONFIG="/dev/null", **GIT_IDENTITY)


def test_a_changed_project_from_an_older_template_takes_the_update_and_keeps_its_changes(tmp_path):
    """cruft create at an older commit, the owner commits two changes, `cruft update -y`: the newer template's
    lines arrive, the owner's changes stay, nothing is left half-merged, and the project's tests pass."""
    repo, older, newest = scratch_template(tmp_path)
    made = cruft(tmp_path, "create", str(repo), "--checkout", older, "--no-input", "--output-dir", str(tmp_path))
    assert made.returncode == 0, describe(made)
    project = tmp_path / "image-classifier"
    assert json.loads((project / ".cruft.json").read_text())["commit"] == older
    git(project, "init", "--quiet")
    git(project, "add", "-A")
    git(project, "commit", "--quiet", "-m", "generated")

    readme = project / "README.md"
    title, rest = readme.read_text(encoding="utf-8").split("\n", 1)
    readme.write_text(f"{title} (our fork)\n{rest}", encoding="utf-8")
    own_module = project / DEFAULT_PACKAGE / "our_notes.py"
    own_module.write_text('"""Something of ours the template knows nothing about."""\n\nANSWER = 42\n')
    git(project, "add", "-A")
    git(project, "commit", "--quiet", "-m", "our changes")

    updated = cruft(project, "update", "--skip-apply-ask", "--allow-untracked-files")
    assert updated.returncode == 0, describe(updated)
    assert json.loads((project / ".cruft.json").read_text())["commit"] == newest
    text = readme.read_text(encoding="utf-8")
    assert text.startswith(f"{title} (our fork)\n") and text.rstrip().endswith(MARKER)
    assert own_module.read_text().endswith("ANSWER = 42\n")
    assert not list(project.rglob("*.rej"))
    conflicted = git(project, "diff", "--name-only", "--diff-filter=U")
    assert conflicted == "", conflicted
    half_merged = [path for path, content in text_files(project) if "\n<<<<<<< " in f"\n{content}"]
    assert half_merged == []

    suite = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                 "tests/test_config.py", "tests/test_architecture.py"], cwd=project, timeout=900)
    assert suite.returncode == 0, describe(suite)
