"""Careless use, round 3: users' own datasets, models, labels files and trackers that gave silently wrong or lost
runs, and the commands' edges (a closed pipe, an odd OMP_NUM_THREADS). Each test is one finding of that round.

The users' modules are written into a temporary folder put on sys.path, as a user's own file would be.
"""

from __future__ import annotations

import io
import os
import sys

import pytest
import torch
from PIL import Image

import evaluate
import predict
import train
from {{ cookiecutter.package_name }} import config
from {{ cookiecutter.package_name }}.backbones import resolve_backbone
from {{ cookiecutter.package_name }}.data.errors import DataError
from {{ cookiecutter.package_name }}.data.folders import load_splits
from {{ cookiecutter.package_name }}.data.labels_csv import read_labels
from {{ cookiecutter.package_name }}.outputs import read_metrics
from {{ cookiecutter.package_name }}.plugins import Plugin

BASE = ["--device", "cpu", "--batch-size", "4", "--image-size", "32", "--no-pretrained", "--precision", "fp32",
        "--parallel", "none", "--workers", "0"]

USER_CODE = '''
import functools

import torch
from PIL import Image
from torch import nn


def _image(index):
    return Image.new("RGB", (32, 32), (40 * (index % 2), 200, 17 * index % 255))


class Digits:
    """torchvision's MNIST convention: targets in a tensor."""

    classes = ["zero", "one"]

    def __init__(self, count=20):
        self.targets = torch.tensor([index % 2 for index in range(count)])

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        return _image(index), self.targets[index]


class Numbered(Digits):
    classes = [0, 1]


class Unordered(Digits):
    classes = {"zero", "one"}


class Floats(Digits):
    def __init__(self):
        super().__init__()
        self.targets = [0.0, 1.0] * 10


class Liar(Digits):
    def __getitem__(self, index):
        return _image(index), 1 - int(self.targets[index])


def exits():
    raise SystemExit(0)


class Reads(nn.Module):
    """A backbone whose __init__ reads a value (no values on the meta device)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.scale = float(self.conv.weight.abs().sum().item() > 0)

    def forward(self, images):
        return self.conv(images).mean(dim=(2, 3)) * self.scale


@functools.cache
def shared():
    """A cached factory: every call hands out the same instance."""
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())


class Misdeclared(Reads):
    num_features = 10**9


class Needs(nn.Module):
    def __init__(self, width):
        super().__init__()


def wide_double():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten()).double()


def zero_width():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 0))


class PlainTensor(Reads):
    def __init__(self):
        super().__init__()
        self.offset = torch.zeros(4)  # not a buffer: not saved, not moved

    def forward(self, images):
        return super().forward(images) + self.offset
'''


@pytest.fixture
def user_code(tmp_path, monkeypatch) -> str:
    """The user's module on sys.path; its name."""
    (tmp_path / "user_code").mkdir()
    (tmp_path / "user_code" / "careless.py").write_text(USER_CODE)
    monkeypatch.syspath_prepend(str(tmp_path / "user_code"))
    monkeypatch.delitem(sys.modules, "careless", raising=False)
    resolve_backbone.cache_clear()
    return "careless"


def one_error(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


def test_tensor_targets_split_each_image_once(user_code):
    """Finding 4: targets in a torch tensor (MNIST's way) split 20 images into 16 + 4, no image on both sides."""
    train_set, val_set = load_splits(f"{user_code}:Digits", 32, val_split=0.2, seed=0)
    train_indices, val_indices = train_set.source.indices, val_set.source.indices
    assert len(train_indices) + len(val_indices) == 20 and not set(train_indices) & set(val_indices)
    assert all(type(target) is int for target in train_set.targets)


@pytest.mark.parametrize("alias", ["dots", "absolute", "linked folder", "hard link"])
def test_one_image_under_two_names_in_a_labels_file_is_refused(tmp_path, alias):
    """Finding 5: images/a.png and images/../images/a.png (or an absolute path, a linked folder, a hard link) are
    one image: listed twice, it would sit in train and val at once."""
    (tmp_path / "images").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "images" / "a.png")
    other = {"dots": "images/../images/a.png", "absolute": str(tmp_path / "images" / "a.png"),
             "linked folder": "linked/a.png", "hard link": "images/b.png"}[alias]
    (tmp_path / "linked").symlink_to(tmp_path / "images")
    os.link(tmp_path / "images" / "a.png", tmp_path / "images" / "b.png")
    (tmp_path / "labels.csv").write_text(f"path,label,split\nimages/a.png,x,train\n{other},x,val\n")
    with pytest.raises(DataError, match="row 3: .* is the image of row 2 again"):
        read_labels(tmp_path / "labels.csv")


@pytest.mark.parametrize("rows, says", [
    ("a.png,x,train\nb.png,y,val\n", "y have no train rows"),
    ('a.png,"x\ny",train\nb.png,z,val\n', "line break"),
    ("a.png,x,Train\nb.png,x,VAL\n", "Train, VAL"),
])
def test_a_labels_file_that_would_train_wrongly_is_one_line(tmp_path, rows, says):
    """A label only in val rows (never trained), a line break inside a label, Train/VAL for train/val."""
    for name in ("a.png", "b.png"):
        Image.new("RGB", (8, 8)).save(tmp_path / name)
    (tmp_path / "labels.csv").write_text("path,label,split\n" + rows)
    with pytest.raises(DataError, match=says):
        read_labels(tmp_path / "labels.csv")


class FailsAtEpochEnd(Plugin):
    """A tracker whose store breaks once the run has started (a corrupted database, a killed service)."""

    name, optional = "a failing tracker", True

    def after_epoch(self, run, row):
        raise OSError("database disk image is malformed")


@pytest.mark.slow
def test_a_tracker_failing_mid_run_loses_no_epoch(tiny_data, tmp_path, capsys):
    """Finding 6: each epoch's checkpoint is written before a tracker hears of it, and an optional plugin that fails
    is a warning: the run trains on to the end (exit 0), last.pt and metrics.csv hold every epoch.

    (The "tracker that cannot start" case is the mlflow answer's: tests/plugins/test_mlflow.py.)"""
    out = tmp_path / "run"
    tracker = FailsAtEpochEnd()
    assert train.main(["--data", str(tiny_data), "--out", str(out), "--epochs", "2", *BASE], plugins=[tracker]) == 0
    err = capsys.readouterr().err
    assert "warning: a failing tracker failed at epoch 1 (OSError: database disk image is malformed)" in err
    assert "failed at epoch 2" not in err  # told once, then left out
    assert torch.load(out / "last.pt", map_location="cpu", weights_only=True)["epoch"] == 2
    assert [row["epoch"] for row in read_metrics(out / "metrics.csv")] == [1, 2]


@pytest.mark.slow
@pytest.mark.parametrize("backbone", ["Reads", "shared"])
def test_an_own_backbone_that_reads_values_or_is_shared_trains_evaluates_and_resumes(backbone, user_code, tiny_data,
                                                                                    tmp_path, capsys):
    """Finding 8: a backbone whose __init__ calls .item(), or a cached factory's one instance: every rebuild is
    made as training made it (never first on meta), so evaluate, predict and --resume all work."""
    path, out = f"{user_code}:{backbone}", tmp_path / "run"
    assert train.main(["--backbone", path, "--data", str(tiny_data), "--out", str(out), "--epochs", "1", *BASE]) == 0
    allow = ["--allow-import", path]
    assert evaluate.main([str(out / "last.pt"), "--device", "cpu", *allow]) == 0
    assert predict.main([str(out / "last.pt"), str(tiny_data / "val"), "--device", "cpu", *allow]) == 0
    assert train.main(["--resume", str(out), "--epochs", "2", "--device", "cpu", *allow]) == 0, capsys.readouterr()
    assert torch.load(out / "last.pt", map_location="cpu", weights_only=True)["epoch"] == 2


@pytest.mark.slow
def test_numeric_class_names_train_and_their_checkpoints_load(user_code, tmp_path, capsys):
    """Finding 9: classes [0, 1] become the names "0" and "1": the checkpoints evaluate and resume."""
    path, out = f"{user_code}:Numbered", tmp_path / "run"
    assert train.main(["--data", path, "--out", str(out), "--epochs", "1", *BASE]) == 0
    state = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    assert state["class_names"] == ["0", "1"]
    assert evaluate.main([str(out / "last.pt"), "--device", "cpu", "--allow-import", path]) == 0
    assert train.main(["--resume", str(out), "--epochs", "2", "--data", path, "--device", "cpu"]) == 0


@pytest.mark.parametrize("flag, name, says", [
    ("--data", "exits", "SystemExit"), ("--data", "Floats", "targets[0] is 0.0"),
    ("--data", "Unordered", "classes is a set"), ("--data", "Liar", "gives target 1, but targets[0] is 0"),
    ("--backbone", "Misdeclared", "num_features is 1000000000, but it gives 4"),
    ("--backbone", "Needs", "calling it with no arguments failed"), ("--backbone", "wide_double", "torch.float64"),
    ("--backbone", "zero_width", "F >= 1"), ("--backbone", "PlainTensor", "offset is a plain tensor attribute"),
])
def test_an_own_dataset_or_backbone_that_cannot_train_right_is_one_line_before_the_run_folder(
        user_code, tiny_data, tmp_path, capsys, flag, name, says):
    """Exit 2, one line naming what is wrong, and no run folder: nothing trains on a silently wrong input."""
    others = ["--data", str(tiny_data)] if flag == "--backbone" else []
    out = tmp_path / "run"
    assert train.main([flag, f"{user_code}:{name}", *others, "--out", str(out), "--epochs", "1", *BASE]) == 2
    assert says in one_error(capsys)
    assert not (out / "last.pt").exists()


def test_a_reader_that_stops_early_ends_predict_quietly(checkpoint, tiny_data, monkeypatch, capsys):
    """predict.py ... | head -3: the pipe closing is the reader's choice, not a failure: exit 0, no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first row
    closed = io.TextIOWrapper(os.fdopen(write_end, "wb", buffering=0), write_through=True)
    monkeypatch.setattr(sys, "stdout", closed)
    assert predict.main([str(checkpoint), str(tiny_data / "val"), "--device", "cpu"]) == 0
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.slow
def test_evaluate_writes_its_figures_before_the_report_a_pipe_may_cut(tmp_path, tiny_data, monkeypatch, capsys):
    """evaluate.py ... | head -3: both figures are written even when the reader leaves after the first lines."""
    out = tmp_path / "run"
    assert train.main(["--data", str(tiny_data), "--out", str(out), "--epochs", "1", *BASE]) == 0
    read_end, write_end = os.pipe()
    os.close(read_end)
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(os.fdopen(write_end, "wb", buffering=0), write_through=True))
    assert evaluate.main([str(out / "last.pt"), "--device", "cpu"]) == 0
    assert (out / "confusion_val.png").is_file() and (out / "mistakes_val.png").is_file()
    assert "not written" not in capsys.readouterr().err


@pytest.mark.parametrize("value", ["²", "٣"])
def test_an_omp_num_threads_of_other_digits_is_read_or_ignored_never_a_crash(monkeypatch, value):
    """OMP_NUM_THREADS=² passed str.isdigit() and crashed int(); Arabic-Indic ٣ is a number int() reads."""
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    threads = config.default_threads()
    assert 1 <= threads <= config.usable_cores()
    if value == "٣":
        assert threads == min(3, config.usable_cores())
