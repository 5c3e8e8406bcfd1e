"""The generated project records its answers (.cookiecutter.json) and carries the chosen licence."""

from __future__ import annotations

import filecmp
import json
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
    compared = filecmp.dircmp(left, right)
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
