"""The tracker answer `tensorboard` (plugins/tensorboard.py), train.py --logger tensorboard: real event files, read
back with TensorBoard's own reader."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch
from conftest import train_one_thread
from run_helpers import killed_at

import train
from {{ cookiecutter.package_name }}.outputs import read_metrics
from {{ cookiecutter.package_name }}.plugins.tensorboard import STEP_TAG

pytest.importorskip("tensorboard", reason="needs the tensorboard extra: pip install -e '.[tensorboard]'")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

PROJECT = Path(__file__).resolve().parents[2]
STEPS_PER_EPOCH = 3  # the tiny data: 24 training images in batches of 8


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag's (step, value) points as TensorBoard shows them (restarts purged)."""
    accumulator = EventAccumulator(str(log_dir))
    accumulator.Reload()
    return {tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]}


def train_args(data: Path, out: Path, epochs: int = 2) -> list[str]:
    return ["--data", str(data), "--device", "cpu", "--epochs", str(epochs), "--batch-size", "8", "--image-size", "32",
            "--workers", "0", "--seed", "5", "--no-pretrained", "--precision", "fp32", "--parallel", "none",
            "--logger", "tensorboard", "--out", str(out)]


@pytest.fixture(scope="module")
def logged_run(tiny_data, tmp_path_factory) -> Path:
    """One uninterrupted two-epoch run with --logger tensorboard."""
    out = tmp_path_factory.mktemp("tb") / "run"
    assert train_one_thread(train_args(tiny_data, out)) == 0
    return out


def test_tensorboard_run_writes_epoch_scalars_step_loss_and_hparams(logged_run):
    """Every metrics.csv column (but epoch, the axis) as a scalar equal to it, one train_loss_step per optimizer
    step, and the settings."""
    points, rows = scalars(logged_run), read_metrics(logged_run / "metrics.csv")
    columns = [column for column in rows[0] if column != "epoch"]
    assert "val_macro_f1" in columns and set(points) == {*columns, STEP_TAG}
    for tag in columns:
        assert [step for step, _ in points[tag]] == [STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH]
        assert [value for _, value in points[tag]] == pytest.approx([row[tag] for row in rows], rel=1e-6)
    assert [step for step, _ in points[STEP_TAG]] == list(range(1, 2 * STEPS_PER_EPOCH + 1))
    # the epoch's train_loss is the mean of its steps' losses (batches of equal size here)
    first_epoch = [value for _, value in points[STEP_TAG][:STEPS_PER_EPOCH]]
    assert sum(first_epoch) / STEPS_PER_EPOCH == pytest.approx(rows[0]["train_loss"], abs=1e-5)
    accumulator = EventAccumulator(str(logged_run))
    accumulator.Reload()
    hparams = accumulator.PluginTagToContent("hparams")
    assert "_hparams_/session_start_info" in hparams
    start_info = hparams["_hparams_/session_start_info"]
    assert b"batch_size" in start_info and b"tensorboard" in start_info  # the settings, --logger among them
    assert (logged_run / "metrics.csv").is_file() and (logged_run / "curves.png").is_file()  # as without a logger


def test_missing_tensorboard_is_one_line_and_exit_2(tiny_data, tmp_path, monkeypatch, capsys):
    """Without the tensorboard package (its import fails as if absent): one line naming the extra, nothing written."""
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.delitem(sys.modules, "torch.utils.tensorboard", raising=False)
    out = tmp_path / "run"
    code = train.main(train_args(tiny_data, out))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0] == "error: --logger tensorboard needs the tensorboard package: pip install -e '.[tensorboard]'"
    assert not out.exists()


def _killed_before_saving_epoch_2(data: Path, out: Path) -> None:
    """Run train.py in a subprocess and SIGKILL it after epoch 2's last step, before its checkpoint: epoch 1 is
    saved and logged."""
    killed_at([sys.executable, "train.py", *train_args(data, out)], out.parent / "killed.log", "validate:2")


def assert_same_curves(log_dir: Path, reference: Path) -> None:
    """Every tag of `reference`'s run, each step once, with its values (but the timings)."""
    resumed, expected = scalars(log_dir), scalars(reference)
    assert resumed.keys() == expected.keys()
    for tag in expected:
        assert [step for step, _ in resumed[tag]] == [step for step, _ in expected[tag]], tag  # each step once
        if tag not in ("images_per_s", "epoch_time_s"):  # timings
            assert [v for _, v in resumed[tag]] == pytest.approx([v for _, v in expected[tag]], rel=1e-5), tag


@pytest.mark.slow
def test_a_resumed_run_continues_the_same_curves_each_step_once(tiny_data, tmp_path, logged_run):
    """Killed in epoch 2, then resumed: the same curves as an uninterrupted run. Resumed once more from a copy of
    epoch 1's checkpoint (an earlier last.pt kept aside), epoch 2's points written before are replaced, not
    doubled."""
    out = tmp_path / "run"
    _killed_before_saving_epoch_2(tiny_data, out)
    assert torch.load(out / "last.pt", map_location="cpu", weights_only=True)["epoch"] == 1
    assert len(scalars(out)[STEP_TAG]) == STEPS_PER_EPOCH  # epoch 1 was logged after its checkpoint
    shutil.copy(out / "last.pt", out / "epoch-1.pt")
    assert train_one_thread([*train_args(tiny_data, out), "--resume", str(out)]) == 0
    assert len(list(out.glob("events.out.tfevents.*"))) == 2  # the killed run's file and the resumed run's
    assert_same_curves(out, logged_run)
    assert train_one_thread([*train_args(tiny_data, out), "--resume", str(out / "epoch-1.pt")]) == 0
    assert_same_curves(out, logged_run)


@pytest.mark.slow
def test_a_run_with_another_logger_writes_no_event_files(tiny_data, tmp_path):
    """The plugin is installed in every run of this project, and records only when --logger tensorboard asks."""
    out = tmp_path / "run"
    argv = train_args(tiny_data, out, epochs=1)
    argv[argv.index("tensorboard")] = "csv"
    assert train_one_thread(argv) == 0
    assert (out / "metrics.csv").is_file() and not list(out.glob("events.out.tfevents.*"))
