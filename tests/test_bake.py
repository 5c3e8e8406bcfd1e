"""Baking the template: every choice value renders a complete, compilable project with the answers in it.

These tests only read the baked files; running the baked code is in test_baked_runs.py.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from helpers import CHOICES, DEFAULT_PACKAGE, EVERY_VALUE, NEEDS, choice_id, text_files

# The generated project's layout from the design brief; {pkg} is the package folder.
CONTRACT_FILES = [
    "train.py",
    "evaluate.py",
    "predict.py",
    "export.py",
    "pyproject.toml",
    "README.md",
    "ARCHITECTURE.md",
    "{pkg}/__init__.py",
    "{pkg}/config.py",
    "{pkg}/settings.py",
    "{pkg}/errors.py",
    "{pkg}/model.py",
    "{pkg}/task.py",
    "{pkg}/devkit/__init__.py",
    "{pkg}/devkit/resolve.py",
    "{pkg}/devkit/placement.py",
    "{pkg}/devkit/checkpoint.py",
    "{pkg}/devkit/precision.py",
    "{pkg}/data/__init__.py",
    "{pkg}/data/pipeline.py",
    "{pkg}/training/loop.py",
    "{pkg}/training/run.py",
    "{pkg}/training/wrapping.py",
    "{pkg}/training/run_state.py",
    "tools/devicelint.py",
    ".github/workflows/ci.yml",
    ".pre-commit-config.yaml",
    "tests/conftest.py",
]

# Files that exist only when an answer asks for them: what each answer brings (the template README's table).
OPTION_FILES = {
    "LICENSE": lambda answers: answers["license"] != "Proprietary",
    "scripts/launch_ddp.sh": lambda answers: answers["multi_gpu"] == "ddp",
    "{pkg}/plugins/ddp/processes.py": lambda answers: answers["multi_gpu"] == "ddp",
    "docs/multi-node.md": lambda answers: answers["multi_gpu"] == "ddp",
    "scripts/slurm_train.sh": lambda answers: answers["scheduler"] == "slurm",
    "docs/preemption.md": lambda answers: answers["scheduler"] == "slurm",
    "{pkg}/plugins/tensorboard.py": lambda answers: answers["tracker"] == "tensorboard",
    "{pkg}/plugins/mlflow.py": lambda answers: answers["tracker"] == "mlflow",
    "{pkg}/plugins/wandb.py": lambda answers: answers["tracker"] == "wandb",
    "{pkg}/plugins/_tracker_run.py": lambda answers: answers["tracker"] in ("mlflow", "wandb"),
    "{pkg}/plugins/gpu_decode/__init__.py": lambda answers: answers["gpu_decode"] == "yes",
    "{pkg}/plugins/fine_tuning/__init__.py": lambda answers: answers["fine_tuning"] == "yes",
    "docs/fine-tuning.md": lambda answers: answers["fine_tuning"] == "yes",
    "docs/gpu-decode.md": lambda answers: answers["gpu_decode"] == "yes",
    "{pkg}/plugins/compile_cache.py": lambda answers: answers["multi_gpu"] == "ddp",
    "benchmarks/compile_cache.py": lambda answers: answers["multi_gpu"] == "ddp",
}

LICENSE_MARKERS = {
    "MIT": "Permission is hereby granted, free of charge",
    "Apache-2.0": "Apache License",
    "BSD-3-Clause": "Redistribution and use in source and binary forms",
}

# `%}` alone is not checked: f"{acc:.1%}" is ordinary Python.
# `${{ matrix.x }}` is a GitHub Actions expression the workflow keeps, not Jinja left unrendered.
JINJA_LEFTOVER = re.compile(r"(?<!\$)\{\{|\{%")


def answers_for(var: str, value: str) -> dict[str, str]:
    """The full set of choice answers when only `var` departs from the defaults."""
    answers = {k: v[0] for k, v in CHOICES.items()}
    answers.update(NEEDS.get((var, value), {}))
    answers[var] = value
    return answers


def config_values(project: Path) -> dict[str, object]:
    """Module-level constants and TrainConfig field defaults of the baked config.py, read with ast."""
    tree = ast.parse((project / DEFAULT_PACKAGE / "config.py").read_text(encoding="utf-8"))
    found: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
        if isinstance(node, ast.ClassDef) and node.name == "TrainConfig":
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.value, ast.Constant):
                    found[f"TrainConfig.{item.target.id}"] = item.value.value
    return found


def test_cookiecutter_json_choices_are_unique_and_non_empty():
    """Every choice lists at least two distinct values, so 'first is default' means something."""
    for var, values in CHOICES.items():
        assert len(values) >= 2 and len(set(values)) == len(values), var


def test_defaults_bake_to_the_expected_names(bakery):
    """With no answers, the project folder is image-classifier and the package image_classifier."""
    result = bakery.bake()
    assert result.exit_code == 0, result.exception
    assert result.exception is None
    assert result.project_path.name == "image-classifier"
    assert (result.project_path / DEFAULT_PACKAGE / "__init__.py").is_file()


def test_default_bake_has_every_contract_file(bakery):
    """The default project holds every file the design brief promises (CLIs, package modules, docs)."""
    project = bakery.project()
    missing = [f for f in CONTRACT_FILES if not (project / f.format(pkg=DEFAULT_PACKAGE)).is_file()]
    assert not missing, f"missing from the baked project: {missing}"


def test_names_follow_project_name(bakery):
    """project_name drives the slug, the package and the device environment variable's name."""
    project = bakery.project(project_name="Cat Sorter 2")
    assert project.name == "cat-sorter-2"
    config = (project / "cat_sorter_2" / "config.py").read_text(encoding="utf-8")
    assert 'PACKAGE = "cat_sorter_2"' in config
    assert 'name = "cat-sorter-2"' in (project / "pyproject.toml").read_text(encoding="utf-8")


def test_explicit_package_name_is_used(bakery):
    """An explicit valid package_name names the package folder, independent of the slug."""
    project = bakery.project(package_name="vision_kit")
    assert (project / "vision_kit" / "config.py").is_file()
    assert not (project / DEFAULT_PACKAGE).exists()


@pytest.mark.parametrize("pair", EVERY_VALUE, ids=choice_id)
def test_every_choice_value_bakes(bakery, pair):
    """Each value of each choice bakes with exit code 0 and no exception."""
    var, value = pair
    result = bakery.bake(**{var: value})
    assert result.exit_code == 0, result.exception
    assert result.exception is None
    assert result.project_path.is_dir()


@pytest.mark.parametrize("pair", EVERY_VALUE, ids=choice_id)
def test_option_files_present_exactly_when_enabled(bakery, pair):
    """Each answer brings its files and nothing else does: LICENSE unless Proprietary, the ddp plugin and launch
    script with multi_gpu=ddp, the SLURM script with scheduler=slurm, one tracker plugin per tracker."""
    var, value = pair
    project = bakery.project(**{var: value})
    answers = answers_for(var, value)
    for path, wanted in OPTION_FILES.items():
        path = path.format(pkg=DEFAULT_PACKAGE)
        assert (project / path).exists() == wanted(answers), f"{path} with {var}={value}"
    if (project / "scripts").exists():
        assert any((project / "scripts").iterdir()), "an empty scripts/ folder was left behind"


@pytest.mark.parametrize("pair", EVERY_VALUE, ids=choice_id)
def test_no_template_syntax_survives(bakery, pair):
    """No file name or text file in the baked project still holds Jinja markers ({{ or {%)."""
    project = bakery.project(**{pair[0]: pair[1]})
    names = [p for p in project.rglob("*") if JINJA_LEFTOVER.search(p.name)]
    assert not names, f"unrendered file names: {names}"
    leftovers = [
        f"{path.relative_to(project)}:{n}: {line.strip()}"
        for path, text in text_files(project)
        for n, line in enumerate(text.splitlines(), 1)
        if JINJA_LEFTOVER.search(line)
    ]
    assert not leftovers, "unrendered template syntax:\n" + "\n".join(leftovers)


@pytest.mark.parametrize("pair", EVERY_VALUE, ids=choice_id)
def test_every_python_file_compiles(bakery, pair):
    """Every .py file of the baked project is valid Python."""
    project = bakery.project(**{pair[0]: pair[1]})
    sources = sorted(project.rglob("*.py"))
    assert sources, "no Python files were generated"
    for path in sources:
        compile(path.read_text(encoding="utf-8"), str(path), "exec", dont_inherit=True)


@pytest.mark.parametrize("pair", EVERY_VALUE, ids=choice_id)
def test_answers_reach_config(bakery, pair):
    """config.py's defaults are the answers: device, backbone, pretrained, precision, parallel."""
    var, value = pair
    answers = answers_for(var, value)
    values = config_values(bakery.project(**{var: value}))
    assert values["DEFAULT_DEVICE"] == answers["default_device"]
    assert values["TrainConfig.backbone"] == answers["backbone"]
    assert values["TrainConfig.pretrained"] is (answers["pretrained"] == "yes")
    assert values["TrainConfig.precision"] == answers["default_precision"]
    assert values["TrainConfig.parallel"] == answers["multi_gpu"]


@pytest.mark.parametrize("license_name", CHOICES["license"])
def test_license_is_reflected(bakery, license_name):
    """pyproject.toml declares the chosen licence and LICENSE holds its text (none for Proprietary)."""
    project = bakery.project(license=license_name)
    pyproject = (project / "pyproject.toml").read_text(encoding="utf-8")
    expected = "LicenseRef-Proprietary" if license_name == "Proprietary" else license_name
    assert re.search(rf'^license = "{re.escape(expected)}"$', pyproject, re.M), pyproject
    if license_name != "Proprietary":
        assert LICENSE_MARKERS[license_name] in (project / "LICENSE").read_text(encoding="utf-8")
