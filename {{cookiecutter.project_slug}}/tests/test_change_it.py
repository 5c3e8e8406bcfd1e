"""The README's "Change it" recipes that edit the package, made the way the project's owner makes them: a few
lines in the one file the README names (in a copy of the project), then the changed project trains, resumes,
evaluates, predicts and exports with loader workers on, and the change is what it used. evaluate.py on best.pt
and last.pt prints what metrics.csv recorded for their epochs (run_helpers.assert_evaluate_equals_training).

The recipes that need no edit of the package (your own data, your own backbone, an optimizer and schedule by
flag) have their tests beside the code they exercise; README.md's "Change it" table names each one.
"""

from __future__ import annotations

import ast
import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from changes import PACKAGE, PROJECT, changed_copy, focal_loss, top2_and_worst_recall
from conftest import HANG_S
from run_helpers import assert_evaluate_equals_training, evaluated_figures

import evaluate

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
    "evaluate_last": lambda: evaluate.main([out + "/last.pt", "--device", "cpu", "--workers", "1"]),
    "predict": lambda: predict.main([out + "/best.pt", image, "--device", "cpu", "--json"]),
    "export": lambda: export.main([out + "/best.pt", "--format", "pt2", "--out", out + "/model.pt2"]),
}
for name, step in steps.items():
    code = step()
    print(f"STEP {name} {code}", flush=True)
    if code != 0:
        sys.exit(1)
"""


def run_steps(script: str, copy: Path, *args: str) -> tuple[list[str], str]:
    """Run `script` (its steps print `STEP name code`) in the changed copy: the steps done, and its output."""
    result = subprocess.run([sys.executable, "-c", script, *args], cwd=copy, capture_output=True, text=True,
                            timeout=HANG_S, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [line.split()[1] for line in result.stdout.splitlines() if line.startswith("STEP ")], result.stdout


def run_lifecycle(copy: Path, data: Path, out: Path, *flags: str) -> str:
    """Train, resume, evaluate, predict and export in the changed copy; every step must exit 0, and evaluate.py
    on best.pt and last.pt must print what metrics.csv recorded. Its output."""
    image = next(iter(sorted((data / "val").rglob("*.png"))))
    done, printed = run_steps(LIFECYCLE, copy, str(data), str(out), str(image), *flags)
    assert done == ["train", "resume", "evaluate", "evaluate_last", "predict", "export"]
    assert_evaluate_equals_training(printed, out)
    return printed


# The quick tier's run: one epoch, then evaluate.py on best.pt and last.pt (loader workers on, as users run)
TRAIN_EVALUATE = """
import sys
import evaluate, train

data, out = sys.argv[1:]
code = train.main(["--data", data, "--out", out, "--device", "cpu", "--batch-size", "8", "--image-size", "32",
                   "--no-pretrained", "--precision", "fp32", "--parallel", "none", "--workers", "1", "--epochs", "1"])
print(f"STEP train {code}", flush=True)
for name in ("best.pt", "last.pt"):
    code = code or evaluate.main([out + "/" + name, "--device", "cpu", "--workers", "1"])
    print(f"STEP {name} {code}", flush=True)
"""


def train_and_evaluate(copy: Path, data: Path, out: Path) -> str:
    """One epoch in the changed copy, then evaluate.py on best.pt and last.pt, which must print what metrics.csv
    recorded for the epoch (the loss and every metric). Its output."""
    done, printed = run_steps(TRAIN_EVALUATE, copy, str(data), str(out))
    assert done == ["train", "best.pt", "last.pt"]
    assert_evaluate_equals_training(printed, out)
    return printed


def test_a_focal_loss_in_task_py_is_what_training_and_evaluate_measure(tiny_data, tmp_path, capsys):
    """task.py `build_loss`: a focal loss written there is what training minimised and recorded as val_loss, and
    evaluate.py on best.pt and last.pt prints that val_loss, not the cross entropy's."""
    copy = changed_copy(tmp_path, f"{PACKAGE}/task.py", focal_loss)
    out = tmp_path / "run"
    focal = evaluated_figures(train_and_evaluate(copy, tiny_data, out))[0]["val_loss"]
    assert evaluate.main([str(out / "best.pt"), "--device", "cpu", "--workers", "1"]) == 0  # the unchanged project
    [cross_entropy] = evaluated_figures(capsys.readouterr().out)
    assert abs(cross_entropy["val_loss"] - focal) > 1e-3  # the change is what was measured


def test_a_metric_in_task_py_reaches_metrics_csv_and_evaluate_prints_the_same(tiny_data, tmp_path):
    """task.py: a top-2 accuracy and the worst class's recall become metrics.csv columns (top-5 has no column
    with 4 classes), and evaluate.py on best.pt and last.pt prints the same figures under the same names."""
    copy = changed_copy(tmp_path, f"{PACKAGE}/task.py", top2_and_worst_recall)
    out = tmp_path / "run"
    [printed, _] = evaluated_figures(train_and_evaluate(copy, tiny_data, out))
    assert {"val_top2_acc", "val_worst_recall"} <= printed.keys() and "val_top5_acc" not in printed
    assert printed["val_acc"] <= printed["val_top2_acc"] <= 1.0


@pytest.mark.slow
def test_a_users_loss_and_metric_train_resume_evaluate_and_export_in_bf16(tiny_data, tmp_path):
    """The focal loss and the top-2 metric written into task.py, under --precision bf16 (autocast on the CPU):
    the run trains, resumes, and evaluate.py on best.pt and last.pt prints what metrics.csv recorded."""
    copy = changed_copy(tmp_path, f"{PACKAGE}/task.py", lambda text: top2_and_worst_recall(focal_loss(text)))
    out = tmp_path / "run"
    run_lifecycle(copy, tiny_data, out, "--precision", "bf16")
    state = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    assert state["config"]["precision"] == "bf16" and state["epoch"] == 2


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




JSONL_TRACKER = """\"\"\"Ours: each epoch's metrics.csv row, every column, as a JSON line (--logger jsonl).\"\"\"

import json
from pathlib import Path

from . import Plugin


class JsonLines(Plugin):
    name, optional = "jsonl", True

    def __init__(self):
        self.path = None

    def choices(self) -> dict[str, list[str]]:
        return {"logger": ["jsonl"]}

    def start(self, run, out) -> None:
        self.path = Path(out) / "epochs.jsonl" if run.cfg.logger == "jsonl" and run.processes.is_main() else None

    def after_epoch(self, run, row: dict) -> None:
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\\n")


PLUGIN = JsonLines()
"""


def with_jsonl_tracker(copy: Path) -> Path:
    """The project copy with our tracker added as a plugin: one new file, nothing else edited."""
    (copy / PACKAGE / "plugins" / "jsonl.py").write_text(JSONL_TRACKER, encoding="utf-8")
    return copy


def read_jsonl(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "epochs.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_new_metric_in_task_py_reaches_metrics_csv_and_the_tracker_through_a_resume(tiny_data, tmp_path):
    """task.py: a figure computed from the validation's confusion matrix lands in metrics.csv for every epoch, the
    resumed one too, and reaches a tracker plugin (ours, --logger jsonl)."""
    copy = with_jsonl_tracker(changed_copy(tmp_path, f"{PACKAGE}/task.py", top2_and_worst_recall))
    out = tmp_path / "run"
    run_lifecycle(copy, tiny_data, out, "--logger", "jsonl")
    with open(out / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["epoch"] for row in rows] == ["1", "2"]
    assert all(0.0 <= float(row["val_worst_recall"]) <= 1.0 for row in rows)
    logged = [row["val_worst_recall"] for row in read_jsonl(out)]
    assert logged == pytest.approx([float(row["val_worst_recall"]) for row in rows])


@pytest.mark.slow
def test_a_new_tracker_is_one_plugin_file_that_gets_every_metrics_column_and_a_resume_continues_it(tiny_data,
                                                                                                  tmp_path):
    """plugins/jsonl.py, a Plugin with after_epoch and `--logger jsonl` among its choices: it gets each epoch's
    whole metrics.csv row, and the resumed run adds epoch 2 to the same file."""
    copy = tmp_path / "project"
    shutil.copytree(PROJECT, copy, ignore=shutil.ignore_patterns("__pycache__", "runs", "tests", ".git"))
    out = tmp_path / "run"
    run_lifecycle(with_jsonl_tracker(copy), tiny_data, out, "--logger", "jsonl")
    logged = read_jsonl(out)
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
