"""Unreadable images: skipped deterministically in training, and found up front by `python -m PACKAGE.data check`."""

from __future__ import annotations

import csv
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import HANG_S, train_one_thread
from run_helpers import assert_same_run, load_cpu, start_train, wait_for

import train
from {{ cookiecutter.package_name }}.data import DataError, check, unreadable
from {{ cookiecutter.package_name }}.data.folders import image_folder
from {{ cookiecutter.package_name }}.data.sampling import SeededSamples

PROJECT = Path(__file__).resolve().parents[2]
ARGS = ["--device", "cpu", "--batch-size", "8", "--image-size", "32", "--no-pretrained", "--precision", "fp32",
        "--parallel", "none", "--seed", "7"]


def _copy_with_bad_files(tiny_data: Path, folder: Path, *relative: str) -> Path:
    """A copy of the tiny data in which the named files hold bytes no decoder reads."""
    root = folder / "data"
    shutil.copytree(tiny_data, root)
    for name in relative:
        (root / name).write_bytes(b"not an image at all")
    return root


@pytest.fixture
def bad_data(tiny_data, tmp_path) -> Path:
    """Tiny data with one unreadable training image."""
    return _copy_with_bad_files(tiny_data, tmp_path, "train/circle/0002.png")


def test_an_unreadable_image_is_replaced_by_the_next_one_drawn_under_its_own_seed(bad_data):
    """Item (i, epoch) is image i+1 with i's augmentation seed, names file i and why; twice the same tensors."""
    folder = image_folder(bad_data, "train", 32, train=True)
    bad = next(i for i, (path, _) in enumerate(folder.samples) if path.endswith("circle/0002.png"))
    samples = SeededSamples(unreadable.SkipUnreadable(folder), seed=7)
    image, target, path, reason = samples[(bad, 3)]
    again = samples[(bad, 3)]
    assert torch.equal(image, again[0]) and target == folder.targets[bad + 1]
    assert path.endswith("circle/0002.png") and reason
    assert samples[(bad + 1, 3)][2:] == ("", "")


def test_the_log_warns_once_per_file_and_stops_past_the_allowed_fraction():
    """A file counts once however often it is read; one file too many over the fraction raises DataError."""
    log = unreadable.UnreadableLog({"train": 100, "val": 10}, max_fraction=0.02)
    assert log.add("train", "a.png") and not log.add("train", "a.png")
    log.add("train", "b.png")
    log.check()  # 2 of 100 is not more than 2 %
    log.add("train", "c.png")
    with pytest.raises(DataError, match="3 of 100 images in train/ are unreadable"):
        log.check()
    restored = unreadable.UnreadableLog({"train": 100, "val": 10}, 0.02, saved=log.state())
    assert restored.count() == 3 and not restored.add("train", "a.png")


def test_check_reports_unreadable_files_empty_classes_balance_and_sizes(bad_data, capsys):
    """Exit 1 naming the bad file and the empty class; per-class counts and image sizes in the report."""
    (bad_data / "val" / "hexagon").mkdir()
    (bad_data / "train" / "hexagon").mkdir()
    code = check.main(["check", str(bad_data), "--workers", "2"])
    out = capsys.readouterr().out
    assert code == 1
    assert "train: 24 images, 5 classes, 1 unreadable" in out and "circle/0002.png" in out
    assert "  square: 6 (25.0%)" in out and "width 32..32" in out
    assert "problem: train/hexagon holds no images" in out
    assert "problem: 1 of 24 images in train/ are unreadable" in out


@pytest.mark.slow
def test_check_of_clean_data_exits_0_through_python_dash_m(tiny_data):
    """`python -m PACKAGE.data check DATA` on readable data: exit 0 and says nothing would stop a run."""
    result = subprocess.run([sys.executable, "-m", "{{ cookiecutter.package_name }}.data", "check", str(tiny_data),
                             "--workers", "2"], cwd=PROJECT, capture_output=True, text=True, timeout=HANG_S)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "nothing here would stop a run" in result.stdout
    assert "val: 12 images, 4 classes, 0 unreadable" in result.stdout


def test_check_of_a_missing_folder_is_exit_2(tmp_path, capsys):
    """Bad input, not a report: one line and exit 2."""
    assert check.main(["check", str(tmp_path / "nowhere")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.slow
def test_training_skips_an_unreadable_image_warns_once_counts_it_and_resumes_exactly(bad_data, tmp_path, capfd):
    """Two epochs: exit 0, one warning, unreadable_images = 1; SIGTERM mid-epoch 2 then resume ends bit-exact."""
    reference = tmp_path / "reference"
    args = ["--data", str(bad_data), "--epochs", "2", "--max-bad-fraction", "0.1", *ARGS]
    assert train_one_thread([*args, "--out", str(reference)]) == 0
    warnings = [line for line in capfd.readouterr().err.splitlines() if "warning: skipping" in line]
    assert len(warnings) == 1 and "circle/0002.png" in warnings[0]
    with open(reference / "metrics.csv", newline="") as handle:
        assert [row["unreadable_images"] for row in csv.DictReader(handle)] == ["1", "1"]

    out, log = tmp_path / "run", tmp_path / "term.log"
    command = [sys.executable, "train.py", *args, "--out", str(out)]
    process = start_train(bad_data, out, 0, resume=False, pause="step:2:1", log=log, command=command)
    wait_for(process, log, "paused at step:2:1")
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=HANG_S) == 143
    assert train_one_thread([*args, "--out", str(out), "--resume", "auto"]) == 0
    assert_same_run(load_cpu(out / "last.pt"), load_cpu(reference / "last.pt"))
    assert "warning: skipping" not in capfd.readouterr().err  # known from the checkpoint: not warned again


@pytest.mark.slow
def test_more_unreadable_images_than_allowed_stop_the_run_with_exit_2(tiny_data, tmp_path, capsys):
    """2 of 24 training images unreadable with --max-bad-fraction 0.05: one error line naming the check, exit 2."""
    data = _copy_with_bad_files(tiny_data, tmp_path, "train/circle/0001.png", "train/square/0003.png")
    code = train.main(["--data", str(data), "--epochs", "1", "--max-bad-fraction", "0.05",
                       "--out", str(tmp_path / "run"), *ARGS])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert code == 2 and len(errors) == 1
    assert "2 of 24 images in train/ are unreadable" in errors[0] and "data check" in errors[0]
