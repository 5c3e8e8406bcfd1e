"""A generated project's suite survives its owner: the ordinary changes the generated README's "Change it"
section describes keep the tests that read those registries green, without editing one test.

The changes: an --augment recipe (data/transforms.py), a TrainConfig field (config.py), a tracker
(a new plugin module in plugins/), and their own backbone module made the project's default (a new module in the
package, config.py's `backbone`).

Each change is made in a copy of the default bake the way its owner would make it (a few lines in the one
file the README names), checked to have taken effect (train.py --help offers it; a recipe, which --help only
describes because the flags are checked before torch loads, is named when an unknown --augment is refused), and
then the generated tests that read the changed registry or dataclass run in their quick tier (`-m "not slow"`).
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
from helpers import DEFAULT_PACKAGE, describe, run

PKG = DEFAULT_PACKAGE

# (file in the project, how to change its text, what train.py then offers: in --help or refusing a wrong name)
AUGMENT_RECIPE = (
    f"{PKG}/data/transforms.py",
    lambda text: text + '''

def _grey(size: int, resize: int) -> list[v2.Transform]:
    """Colour that should not matter: half of the training images in greyscale."""
    return [*_none(size, resize), v2.RandomGrayscale(p=0.5)]


AUGMENTATIONS["grey"] = _grey
''',
    "grey",
)
CONFIG_FIELD = (
    f"{PKG}/config.py",
    lambda text: re.sub(r"^(    augment: str = .*\n)",
                        r"\1    min_confidence: float = 0.5  # ours: predictions below it are reported as unsure\n",
                        text, count=1, flags=re.M),
    None,
)
TRACKER = (
    f"{PKG}/plugins/printer.py",
    lambda text: text + '''"""Ours: each epoch's row on stdout (--logger print)."""

from . import Plugin


class PrintPlugin(Plugin):
    """--logger print."""

    name, optional = "print", True

    def choices(self) -> dict[str, list[str]]:
        return {"logger": ["print"]}

    def after_epoch(self, run, row: dict) -> None:
        if run.cfg.logger == "print" and run.processes.is_main():
            print(f"epoch {row['epoch']}: {row}")


PLUGIN = PrintPlugin()
''',
    "print",
)
OWN_BACKBONE_MODULE = (
    f"{PKG}/my_models.py",
    lambda text: text + '''"""Our own backbone."""

from torch import nn


class TinyNet(nn.Module):
    """(B, 3, H, W) -> (B, 12) features."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 12, 3, padding=1), nn.BatchNorm2d(12), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())

    def forward(self, images):
        return self.features(images)
''',
    None,
)
OWN_BACKBONE_DEFAULT = (
    f"{PKG}/config.py",
    lambda text: re.sub(r'^(    backbone: str = )"\w+"', rf'\1"{PKG}.my_models:TinyNet"', text, count=1, flags=re.M),
    f"{PKG}.my_models:TinyNet",
)
CHANGES = {"augment-recipe": AUGMENT_RECIPE, "config-field": CONFIG_FIELD, "tracker": TRACKER,
           "own-backbone": OWN_BACKBONE_MODULE, "own-backbone-default": OWN_BACKBONE_DEFAULT}

# The generated tests that read the augmentation registry, the loggers, the backbones or TrainConfig's fields.
READERS = ["tests/test_settings.py", "tests/data/test_transforms.py", "tests/test_config.py",
           "tests/test_backbones.py", "tests/test_own_backbone.py", "tests/test_model.py",
           "tests/plugins/test_tensorboard.py", "tests/plugins/test_mlflow.py", "tests/plugins/test_wandb.py",
           "tests/training/test_host_syncs.py",
           "tests/training/test_recipe.py"]


@pytest.fixture(scope="module")
def changed_project(bakery, tmp_path_factory) -> Path:
    """A copy of the default bake with every change in CHANGES made."""
    project = tmp_path_factory.mktemp("changed") / "image-classifier"
    shutil.copytree(bakery.project(), project)
    for relative, change, _ in CHANGES.values():
        path = project / relative
        before = path.read_text(encoding="utf-8") if path.exists() else ""  # a new file of the owner's
        after = change(before)
        assert after != before, f"the change to {relative} did not apply: the template moved; update CHANGES"
        path.write_text(after, encoding="utf-8")
    return project


@pytest.mark.slow
def test_ordinary_changes_keep_the_generated_tests_that_read_them_green(changed_project):
    """With a new augmentation recipe, a new config field, a new tracker and their own module as the default
    backbone, the quick tier of the tests that read those passes unchanged; train.py offers the new choices, so
    the changes are really there."""
    helped = run([sys.executable, "train.py", "--help"], cwd=changed_project, timeout=600)
    assert helped.returncode == 0, describe(helped)
    # the recipes are read from data/transforms.py once torch loads: an unknown one is refused with their names
    refused = run([sys.executable, "train.py", "--augment", "no-such-recipe", "--device", "cpu"], cwd=changed_project,
                  timeout=600)
    assert refused.returncode == 2 and "one of" in refused.stderr, describe(refused)
    offered = re.sub(r"\s+", " ", helped.stdout + refused.stderr)
    for name, (_, _, choice) in CHANGES.items():
        assert choice is None or choice in offered, f"{name}: train.py does not offer {choice!r}"
    present = [path for path in READERS if (changed_project / path).is_file()]
    suite = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", *present],
                cwd=changed_project, timeout=1800)
    assert suite.returncode == 0, describe(suite)
