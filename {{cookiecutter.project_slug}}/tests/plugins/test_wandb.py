"""The tracker answer `wandb` (plugins/wandb.py), train.py --logger wandb, for real and offline: W&B in offline mode
with its files under the test's folder. It gets every metrics.csv column and each step's loss, and a resumed
run continues the same W&B run."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from conftest import train_one_thread
from run_helpers import killed_at

import train
from {{ cookiecutter.package_name }}.outputs import read_metrics
from {{ cookiecutter.package_name }}.plugins._tracker_run import TRACKER_FILE
from {{ cookiecutter.package_name }}.plugins.wandb import STEP_TAG

STEPS_PER_EPOCH = 3  # the tiny data: 24 training images in batches of 8


def train_args(data: Path, out: Path, logger: str, epochs: int = 2) -> list[str]:
    return ["--data", str(data), "--device", "cpu", "--epochs", str(epochs), "--batch-size", "8", "--image-size", "32",
            "--workers", "0", "--seed", "5", "--no-pretrained", "--precision", "fp32", "--parallel", "none",
            "--logger", logger, "--out", str(out)]


def _killed_before_saving_epoch_2(data: Path, out: Path) -> None:
    """train.py in a subprocess, SIGKILLed after epoch 2's last step, before its checkpoint (epoch 1 saved, logged)."""
    killed_at([sys.executable, "train.py", *train_args(data, out, "wandb")], out.parent / "killed.log", "validate:2")
    assert torch.load(out / "last.pt", map_location="cpu", weights_only=True)["epoch"] == 1


def test_wandb_that_is_not_installed_is_one_line_and_exit_2(tiny_data, tmp_path, monkeypatch, capsys):
    """Without its package (the import fails as if absent): one line naming the extra; no run folder."""
    monkeypatch.setitem(sys.modules, "wandb", None)
    out = tmp_path / "run"
    code = train.main(train_args(tiny_data, out, "wandb"))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["error: --logger wandb needs the wandb package: pip install -e '.[wandb]'"]
    assert not out.exists()


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch) -> Iterator[Path]:
    """W&B in offline mode, its files under the test's folder: no account, no network."""
    wandb = pytest.importorskip("wandb", reason="needs the wandb extra: pip install -e '.[wandb]'")
    # wandb keeps one process-wide service whose settings (WANDB_DIR among them) are read once: a test after
    # another in the same pytest process would write into the first test's folder, so each test starts afresh.
    wandb.teardown()
    folder = tmp_path / "wandb-files"
    folder.mkdir()
    for name, value in {"WANDB_MODE": "offline", "WANDB_DIR": str(folder), "WANDB_PROJECT": "tests",
                        "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}.items():
        monkeypatch.setenv(name, value)
    yield folder
    wandb.teardown()


def _log_records(path: Path) -> list[bytes]:
    """The records of a W&B .wandb file: a 7-byte header, then LevelDB-log records in 32 KiB blocks."""
    data, position, records, pending = path.read_bytes(), 7, [], b""
    while position + 7 <= len(data):
        if 32768 - position % 32768 < 7:  # a block's tail too short for a record header is padding
            position += 32768 - position % 32768
            continue
        length, kind = int.from_bytes(data[position + 4:position + 6], "little"), data[position + 6]
        chunk, position = data[position + 7:position + 7 + length], position + 7 + length
        if kind == 1:  # a whole record
            records.append(chunk)
        elif kind in (2, 3):  # its first or middle part
            pending = (b"" if kind == 2 else pending) + chunk
        elif kind == 4:  # its last part
            records.append(pending + chunk)
    return records


def wandb_runs(folder: Path) -> list[tuple[str, dict, list[dict]]]:
    """Each offline run in `folder`, oldest first: its id, its config, and its history rows (with `_step`)."""
    import wandb
    from wandb.proto import wandb_internal_pb2

    # The file is written by wandb's service process, which may still hold records after run.finish() returns;
    # teardown (what the end of a training process does) waits for it to close the file.
    wandb.teardown()
    runs = []
    for path in sorted(folder.glob("wandb/offline-run-*/run-*.wandb")):
        run_id, config, history = path.stem.removeprefix("run-"), {}, []  # wandb names the file after the run
        for data in _log_records(path):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "run":  # wandb may write the run record again later, not always with its id
                assert record.run.run_id in ("", run_id), f"{path.name} holds run {record.run.run_id}"
                config.update({item.key: json.loads(item.value_json) for item in record.run.config.update})
            elif kind == "history":
                history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                for item in record.history.item})
        runs.append((run_id, config, history))
    return runs


@pytest.mark.slow
def test_wandb_run_gets_every_metrics_csv_column_each_step_loss_and_the_settings(tiny_data, tmp_path, wandb_offline):
    """One W&B run, its id in tracker.json: each metrics.csv column at its epoch's last step, equal to it, one
    train_loss_step per optimizer step, the settings as its config."""
    out = tmp_path / "run"
    assert train_one_thread(train_args(tiny_data, out, "wandb")) == 0
    [(run_id, config, history)] = wandb_runs(wandb_offline)
    assert json.loads((out / TRACKER_FILE).read_text())["wandb"]["run_id"] == run_id
    rows = read_metrics(out / "metrics.csv")
    columns = [column for column in rows[0] if column != "epoch"]
    assert "val_macro_f1" in columns
    for row in rows:
        [logged] = [point for point in history if point["_step"] == STEPS_PER_EPOCH * row["epoch"]]
        assert {column: logged[column] for column in columns} == pytest.approx({c: row[c] for c in columns})
    assert [point["_step"] for point in history if STEP_TAG in point] == list(range(1, 7))
    assert config["batch_size"] == 8 and config["logger"] == "wandb"


@pytest.mark.slow
def test_a_resumed_run_continues_the_same_wandb_run(tiny_data, tmp_path, wandb_offline):
    """Killed in epoch 2 (epoch 1 saved and logged), then resumed: the resumed process logs epoch 2 to the run the
    killed one started."""
    out = tmp_path / "run"
    _killed_before_saving_epoch_2(tiny_data, out)
    killed_id = json.loads((out / TRACKER_FILE).read_text())["wandb"]["run_id"]
    assert train_one_thread([*train_args(tiny_data, out, "wandb"), "--resume", str(out)]) == 0
    # offline, each process keeps its own file of the one run (the killed one's may be cut short)
    resumed_id, _, history = wandb_runs(wandb_offline)[-1]
    assert resumed_id == killed_id
    last = read_metrics(out / "metrics.csv")[-1]
    [logged] = [point for point in history if point["_step"] == 2 * STEPS_PER_EPOCH and "val_acc" in point]
    assert logged["val_acc"] == pytest.approx(last["val_acc"])
    assert [point["_step"] for point in history if STEP_TAG in point] == [4, 5, 6]  # epoch 2's steps, on one axis
