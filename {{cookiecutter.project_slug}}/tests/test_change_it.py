"""The README's "Change it" recipes that edit the package, made the way the project's owner makes them: a few
lines in the one file the README names (in a copy of the project), then the changed project trains, resumes,
evaluates, predicts and exports with loader workers on, and the change is what it used.

The recipes that need no edit of the package (your own data, your own backbone, an optimizer and schedule by
flag) have their tests beside the code they exercise; README.md's "Change it" table names each one.
"""

from __future__ import annotations

import ast
import csv
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
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
    """A copy of the project's code with `change` made to the text of `relative` (a path under the project; a file
    that is not there is a new one, its text "" before the change)."""
    copy = tmp_path / "project"
    copy.mkdir()
    for name in SOURCES:
        source = PROJECT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, copy / name)
    path = copy / relative
    before = path.read_text(encoding="utf-8") if path.exists() else ""
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


def _add_worst_recall(text: str) -> str:
    """A new column in _metrics_row, from the validation's ClassReport: the recall of the worst class."""
    return text.replace('"val_macro_f1": round(val_report.macro_f1, 6)',
                        '"val_macro_f1": round(val_report.macro_f1, 6),\n'
                        '            "val_worst_recall": round(min(val_report.recall), 6)', 1)


@pytest.mark.slow
def test_a_new_metric_in_metrics_row_reaches_metrics_csv_and_the_tracker_through_a_resume(tiny_data, tmp_path):
    """training/epochs.py `_metrics_row`: a column computed from the validation's ClassReport lands in
    metrics.csv for every epoch, the resumed one too, and reaches the tracker (TensorBoard's scalars, read
    back with its own reader, in a bake with the tracker answer tensorboard and its extra installed)."""
    copy = changed_copy(tmp_path, f"{PACKAGE}/training/epochs.py", _add_worst_recall)
    out = tmp_path / "run"
    tensorboard = ((PROJECT / PACKAGE / "plugins" / "tensorboard.py").is_file()
                   and importlib.util.find_spec("tensorboard") is not None)
    run_lifecycle(copy, tiny_data, out, *(["--logger", "tensorboard"] if tensorboard else []))
    with open(out / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["epoch"] for row in rows] == ["1", "2"]
    assert all(0.0 <= float(row["val_worst_recall"]) <= 1.0 for row in rows)
    if tensorboard:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        accumulator = EventAccumulator(str(out))
        accumulator.Reload()
        logged = [event.value for event in accumulator.Scalars("val_worst_recall")]
        assert logged == pytest.approx([float(row["val_worst_recall"]) for row in rows])


JSONL_TRACKER = '''"""Ours: each epoch's metrics.csv row, every column, as a JSON line in the run folder."""

import json
from pathlib import Path

from . import Plugin


class JsonLinesPlugin(Plugin):
    """--logger jsonl: runs/NAME/epochs.jsonl."""

    name, optional = "jsonl", True

    def __init__(self):
        self.path = None

    def choices(self) -> dict[str, list[str]]:
        return {"logger": ["jsonl"]}

    def start(self, run, out: Path) -> None:
        self.path = Path(out) / "epochs.jsonl" if run.cfg.logger == "jsonl" and run.processes.is_main() else None

    def after_epoch(self, run, row: dict) -> None:
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({**row, "step": row["epoch"] * run.steps_per_epoch}) + "\\n")


PLUGIN = JsonLinesPlugin()
'''


@pytest.mark.slow
def test_a_new_tracker_in_plugins_gets_every_metrics_column_and_a_resume_continues_it(tiny_data, tmp_path):
    """A new file in plugins/ with a Plugin subclass and its PLUGIN makes `--logger jsonl` (no other file changes);
    it gets each epoch's whole metrics.csv row, and the resumed run adds epoch 2 to the same file."""
    copy = changed_copy(tmp_path, f"{PACKAGE}/plugins/jsonl.py", lambda text: JSONL_TRACKER)
    out = tmp_path / "run"
    run_lifecycle(copy, tiny_data, out, "--logger", "jsonl")
    logged = [json.loads(line) for line in (out / "epochs.jsonl").read_text().splitlines()]
    with open(out / "metrics.csv", newline="") as handle:
        columns = next(csv.reader(handle))
    assert [row["epoch"] for row in logged] == [1, 2]
    assert all(set(columns) <= row.keys() for row in logged)


@pytest.mark.slow
def test_sgd_with_a_step_schedule_by_flags_trains_resumes_evaluates_predicts_and_exports(tiny_data, tmp_path):
    """No code: --optimizer sgd --momentum 0.9 --nesterov --schedule step --step-epochs 1 runs a whole life, and
    the checkpoint holds SGD's momentum and the run's config says so."""
    out = tmp_path / "run"
    run_lifecycle(PROJECT, tiny_data, out, "--optimizer", "sgd", "--momentum", "0.9", "--nesterov",
                  "--schedule", "step", "--step-epochs", "1")
    recorded = json.loads((out / "config.json").read_text())
    assert (recorded["optimizer"], recorded["schedule"], recorded["nesterov"]) == ("sgd", "step", True)
    state = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    assert "momentum_buffer" in next(iter(state["optimizer"]["state"].values()))


ADAM_OPTIMIZER = '''

def _adam(groups: list[dict], cfg, fused: bool | None) -> torch.optim.Optimizer:
    return torch.optim.Adam(groups, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused)


OPTIMIZERS["adam"] = OptimizerChoice(_adam, lr=1e-3, weight_decay=0.0)
'''


@pytest.mark.slow
def test_a_new_optimizer_in_optimization_py_trains_resumes_evaluates_predicts_and_exports(tiny_data, tmp_path):
    """training/optimization.py: a builder and its OPTIMIZERS entry make `--optimizer adam` with its own default
    learning rate; the checkpoint holds Adam's state and the run's config says adam."""
    copy = changed_copy(tmp_path, f"{PACKAGE}/training/optimization.py", lambda text: text + ADAM_OPTIMIZER)
    out = tmp_path / "run"
    run_lifecycle(copy, tiny_data, out, "--optimizer", "adam")
    recorded = json.loads((out / "config.json").read_text())
    assert recorded["optimizer"] == "adam" and recorded["lr"] == 1e-3
    state = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    assert {"exp_avg", "exp_avg_sq"} <= next(iter(state["optimizer"]["state"].values())).keys()
    assert "momentum_buffer" not in next(iter(state["optimizer"]["state"].values()))


def _change_it_rows() -> list[list[str]]:
    """The cells of README.md's "Change it" table, one list per row (header and rule left out)."""
    readme = (PROJECT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Change it\n", 1)[1].split("\n## ", 1)[0]
    rows = [re.split(r"(?<!\\)\|", line.strip()[1:-1]) for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row] for row in rows[2:]]


def _defined_names(path: Path) -> set[str]:
    """Names a Python file defines or imports at its top level (functions, classes, assignments, imports)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


def test_every_change_it_row_names_a_file_and_names_it_defines_and_a_test_that_exists():
    """The "Change it" table stays true: each row's file exists and defines the names the row gives for it, and
    the test that backs the row exists."""
    rows = _change_it_rows()
    assert len(rows) >= 6
    for change, where, test in rows:
        tokens = re.findall(r"`([^`]+)`", where)
        files = [token for token in tokens if token.endswith(".py")]
        assert files, f"{change}: no file named"
        names = {token for token in tokens if token.isidentifier()}
        defined = set().union(*(_defined_names(PROJECT / name) for name in files))
        assert names <= defined, f"{change}: {sorted(names - defined)} not defined in {files}"
        for path, name in re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", test) or [("", "")]:
            assert path, f"{change}: no test named"
            assert name in _defined_names(PROJECT / path), f"{change}: {path}::{name} does not exist"
