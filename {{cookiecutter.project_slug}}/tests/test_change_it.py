"""The README's "Change it" recipes that edit the package, made the way the project's owner makes them: a few
lines in the one file the README names (in a copy of the project), then the changed project trains, resumes,
evaluates, predicts and exports with loader workers on, and the change is what it used.

The recipes that need no edit of the package (your own data, your own backbone, an optimizer and schedule by
flag) have their tests beside the code they exercise; README.md's "Change it" table names each one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import HANG_S

PROJECT = Path(__file__).resolve().parent.parent
PACKAGE = "{{ cookiecutter.package_name }}"
SOURCES = ("train.py", "evaluate.py", "predict.py", "export.py", PACKAGE)

# One interpreter for the whole life of a run: train one epoch, resume to two, evaluate, predict, export.
LIFECYCLE = """
import sys
import evaluate, export, predict, train

data, out, image, *flags = sys.argv[1:]
common = ["--data", data, "--out", out, "--device", "cpu", "--batch-size", "8", "--image-size", "32",
          "--no-pretrained", "--precision", "fp32", "--parallel", "none", "--workers", "1", *flags]
steps = {
    "train": lambda: train.main([*common, "--epochs", "1"]),
    "resume": lambda: train.main([*common, "--epochs", "2", "--resume", out]),
    "evaluate": lambda: evaluate.main([out + "/best.pt", "--device", "cpu", "--workers", "1"]),
    "predict": lambda: predict.main([out + "/best.pt", image, "--device", "cpu", "--json"]),
    "export": lambda: export.main([out + "/best.pt", "--format", "pt2", "--out", out + "/model.pt2"]),
}
for name, step in steps.items():
    code = step()
    print(f"STEP {name} {code}", flush=True)
    if code != 0:
        sys.exit(1)
"""


def changed_copy(tmp_path: Path, relative: str, change: Callable[[str], str]) -> Path:
    """A copy of the project's code with `change` made to the text of `relative` (a path under the project)."""
    copy = tmp_path / "project"
    copy.mkdir()
    for name in SOURCES:
        source = PROJECT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, copy / name)
    path = copy / relative
    before = path.read_text(encoding="utf-8")
    after = change(before)
    assert after != before, f"the change to {relative} did not apply"
    path.write_text(after, encoding="utf-8")
    return copy


def run_lifecycle(copy: Path, data: Path, out: Path, *flags: str) -> str:
    """Train, resume, evaluate, predict and export in the changed copy; every step must exit 0. Its output."""
    image = next(iter(sorted((data / "val").rglob("*.png"))))
    result = subprocess.run([sys.executable, "-c", LIFECYCLE, str(data), str(out), str(image), *flags], cwd=copy,
                            capture_output=True, text=True, timeout=HANG_S,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    done = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("STEP ")]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert done == ["train", "resume", "evaluate", "predict", "export"]
    return result.stdout


GREY_RECIPE = '''

def _grey(size: int, resize: int) -> list[v2.Transform]:
    """Colour should not matter: half of the training images in greyscale."""
    return [*_none(size, resize), v2.RandomGrayscale(p=0.5)]


AUGMENTATIONS["grey"] = _grey
'''


@pytest.mark.slow
def test_a_new_augmentation_recipe_in_transforms_py_trains_resumes_evaluates_predicts_and_exports(tiny_data, tmp_path):
    """data/transforms.py: a function and its AUGMENTATIONS entry make `--augment grey`, recorded with the run."""
    copy = changed_copy(tmp_path, f"{PACKAGE}/data/transforms.py", lambda text: text + GREY_RECIPE)
    out = tmp_path / "run"
    run_lifecycle(copy, tiny_data, out, "--augment", "grey")
    assert json.loads((out / "config.json").read_text())["augment"] == "grey"
    assert (out / "model.pt2").is_file()
