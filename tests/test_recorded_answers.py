"""The generated project records its answers (.cookiecutter.json), the template's commit for `cruft update`
(.cruft.json), starts as a git repository, and carries the chosen licence."""

from __future__ import annotations

import filecmp
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter

TEMPLATE = Path(__file__).resolve().parent.parent
ANSWERS = {"project_name": 'Cat "Sorter" <v2>', "author": "Ada O'Neil", "license": "BSD-3-Clause",
           "backbone": "mobilenet_v3_small", "multi_gpu": "ddp"}


def bake(out: Path, **extra) -> Path:
    """Generate a project into `out` without questions; return its folder."""
    return Path(cookiecutter(str(TEMPLATE), no_input=True, output_dir=str(out), extra_context=extra,
                             default_config=True))


def differences(left: Path, right: Path) -> list[str]:
    """Relative paths that differ between two trees, recursively."""
    compared = filecmp.dircmp(left, right, ignore=[".git"])  # each generation starts its own repository
    found = [*compared.left_only, *compared.right_only, *compared.diff_files, *compared.funny_files]
    for name, sub in compared.subdirs.items():
        found += [f"{name}/{path}" for path in differences(Path(sub.left), Path(sub.right))]
    return found


def test_cookiecutter_json_records_every_answer_as_valid_json(tmp_path):
    """Quotes and angle brackets in answers still give valid JSON holding exactly what was answered."""
    project = bake(tmp_path, **ANSWERS)
    recorded = json.loads((project / ".cookiecutter.json").read_text())["cookiecutter"]
    assert {key: recorded[key] for key in ANSWERS} == ANSWERS
    assert recorded["package_name"] == "cat_sorter_v2" and recorded["_template"] == str(TEMPLATE)
    assert not any(key.startswith("_") and key != "_template" for key in recorded)


def test_replaying_the_recorded_answers_regenerates_the_same_project(tmp_path):
    """`cookiecutter --replay-file .cookiecutter.json` asks nothing and rebuilds an identical tree."""
    project = bake(tmp_path / "first", **ANSWERS)
    again = Path(cookiecutter(str(TEMPLATE), replay=str(project / ".cookiecutter.json"),
                              output_dir=str(tmp_path / "second"), default_config=True))
    assert again.name == project.name
    assert differences(project, again) == []


@pytest.mark.parametrize("licence, first_line", [("MIT", "MIT License"), ("Apache-2.0", "Apache License"),
                                                 ("BSD-3-Clause", "BSD 3-Clause License")])
def test_license_file_holds_the_chosen_licence(licence, first_line, tmp_path):
    """LICENSE is the chosen text with the author named where the licence has a copyright line."""
    text = (bake(tmp_path, license=licence, author="Ada") / "LICENSE").read_text()
    assert text.lstrip().startswith(first_line) and text.endswith("\n")
    assert "Ada" in text or licence == "Apache-2.0"
    assert "{%" not in text and "cookiecutter" not in text


def test_proprietary_projects_have_no_license_file(tmp_path):
    """Choosing Proprietary removes LICENSE rather than leaving an empty one."""
    assert not (bake(tmp_path, license="Proprietary") / "LICENSE").exists()


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """git's result in `cwd`, never raising."""
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@needs_git
def test_cruft_json_names_the_template_its_commit_and_the_answers(tmp_path):
    """.cruft.json: the template's repository, the commit it was generated from, the answers of .cookiecutter.json."""
    project = bake(tmp_path, **ANSWERS)
    state = json.loads((project / ".cruft.json").read_text(encoding="utf-8"))
    top = Path(git(TEMPLATE, "rev-parse", "--show-toplevel").stdout.strip())
    assert state["template"] == str(top.resolve()) and state["directory"] is None
    assert state["commit"] == git(TEMPLATE, "rev-parse", "HEAD").stdout.strip()
    answers = json.loads((project / ".cookiecutter.json").read_text())["cookiecutter"]
    context = state["context"]["cookiecutter"]
    assert {key: value for key, value in context.items() if not key.startswith("_")} == {
        key: value for key, value in answers.items() if not key.startswith("_")}
    assert context["_commit"] == state["commit"]


@needs_git
def test_a_generated_project_is_its_own_quiet_git_repository(tmp_path, capfd):
    """The README's first steps (pre-commit install) need a repository: the project is one, with nothing committed
    for the owner (their first commit is theirs), and git printed nothing."""
    project = bake(tmp_path)
    assert Path(git(project, "rev-parse", "--show-toplevel").stdout.strip()) == project.resolve()
    assert git(project, "rev-parse", "HEAD").returncode != 0  # no commit yet
    out = capfd.readouterr()
    assert "Initialized empty Git repository" not in out.out + out.err


@needs_git
def test_a_project_generated_inside_a_repository_does_not_start_a_nested_one(tmp_path):
    """Generated into a folder of an existing repository (a monorepo), the project joins it."""
    assert git(tmp_path, "init", "-q").returncode == 0
    project = bake(tmp_path)
    assert not (project / ".git").exists()


def test_a_template_without_git_history_still_generates_without_cruft_json(tmp_path):
    """A template copied without .git (a zip, an archive) has no commit to record: no .cruft.json, no error."""
    copy = tmp_path / "template"
    shutil.copytree(TEMPLATE, copy, ignore=shutil.ignore_patterns(".git", ".venv", ".scratch", "__pycache__"))
    project = Path(cookiecutter(str(copy), no_input=True, output_dir=str(tmp_path / "out"), default_config=True))
    assert (project / ".cookiecutter.json").is_file() and not (project / ".cruft.json").exists()

