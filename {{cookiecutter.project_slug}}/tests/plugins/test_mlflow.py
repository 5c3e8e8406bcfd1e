"""--logger mlflow and --logger wandb, for real and offline: MLflow in an SQLite store under the test's folder,
W&B in offline mode with its files there too. Each gets every metrics.csv column, and a resumed run
continues the same tracker run."""

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
from {{ cookiecutter.package_name }}.training import tracking

PROJECT = Path(__file__).resolve().parents[2]
STEPS_PER_EPOCH = 3  # the tiny data: 24 training images in batches of 8
TIMINGS = ("epoch_time_s", "images_per_s")  # differ between runs of the same training


def train_args(data: Path, out: Path, logger: str, epochs: int = 2) -> list[str]:
    return ["--data", str(data), "--device", "cpu", "--epochs", str(epochs), "--batch-size", "8", "--image-size", "32",
            "--workers", "0", "--seed", "5", "--no-pretrained", "--precision", "fp32", "--parallel", "none",
            "--logger", logger, "--out", str(out)]


def _killed_after_logging_epoch_1(data: Path, out: Path, logger: str) -> None:
    """train.py in a subprocess, SIGKILLed once epoch 1 is logged but its last.pt not yet in place."""
    killed_at([sys.executable, "train.py", *train_args(data, out, logger)], out.parent / "killed.log", "save:last.pt:1")
    assert torch.load(out / "last.pt", map_location="cpu", weights_only=True)["epoch"] == 0


@pytest.mark.parametrize(("kind", "package"), [("mlflow", "mlflow"), ("wandb", "wandb")])
def test_a_tracker_that_is_not_installed_is_one_line_and_exit_2(tiny_data, tmp_path, monkeypatch, capsys, kind,
                                                                 package):
    """Without its package (the import fails as if absent): one line naming the extra; no run folder."""
    monkeypatch.setitem(sys.modules, package, None)
    out = tmp_path / "run"
    code = train.main(train_args(tiny_data, out, kind))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"error: --logger {kind} needs the {kind} package: pip install -e '.[{kind}]'"]
    assert not out.exists()


# --- MLflow ---------------------------------------------------------------------------------------------------


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch) -> str:
    """A local SQLite tracking store under the test's folder: no server, no network."""
    pytest.importorskip("mlflow", reason="needs the mlflow extra: pip install -e '.[mlflow]'")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "tests")
    return uri


def mlflow_points(uri: str, out: Path) -> tuple[object, dict[str, list[tuple[int, float]]]]:
    """The run tracker.json names, and each metric's (step, value) history as MLflow holds it."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    run = client.get_run(json.loads((out / tracking.TRACKER_FILE).read_text())["mlflow"]["run_id"])
    return run, {key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
                 for key in run.data.metrics}


@pytest.mark.slow
def test_mlflow_run_gets_every_metrics_csv_column_each_step_loss_and_the_settings(tiny_data, tmp_path, mlflow_store):
    out = tmp_path / "run"
    assert train_one_thread(train_args(tiny_data, out, "mlflow")) == 0
    run, points = mlflow_points(mlflow_store, out)
    rows = read_metrics(out / "metrics.csv")
    columns = [column for column in rows[0] if column != "epoch"]
    assert "val_macro_f1" in columns and set(points) == {*columns, tracking.STEP_TAG}
    for column in columns:
        assert points[column] == [(STEPS_PER_EPOCH * row["epoch"], pytest.approx(row[column])) for row in rows]
    assert [step for step, _ in points[tracking.STEP_TAG]] == list(range(1, 2 * STEPS_PER_EPOCH + 1))
    assert run.data.params["batch_size"] == "8" and run.data.params["logger"] == "mlflow"
    assert run.info.status == "FINISHED" and run.info.run_name == "run"


@pytest.mark.slow
def test_a_resumed_run_continues_the_same_mlflow_run_with_each_step_once(tiny_data, tmp_path, mlflow_store):
    """Killed after epoch 1 was logged but before its checkpoint, then resumed: one MLflow run, each step logged
    once, the same numbers as an uninterrupted run."""
    reference = tmp_path / "reference"
    assert train_one_thread(train_args(tiny_data, reference, "mlflow")) == 0
    out = tmp_path / "run"
    _killed_after_logging_epoch_1(tiny_data, out, "mlflow")
    killed_id = json.loads((out / tracking.TRACKER_FILE).read_text())["mlflow"]["run_id"]
    assert train_one_thread([*train_args(tiny_data, out, "mlflow"), "--resume", str(out)]) == 0
    run, resumed = mlflow_points(mlflow_store, out)
    _, expected = mlflow_points(mlflow_store, reference)
    assert run.info.run_id == killed_id and resumed.keys() == expected.keys()
    for key in expected:
        assert [step for step, _ in resumed[key]] == [step for step, _ in expected[key]], key  # each step once
        if key not in TIMINGS:
            assert [v for _, v in resumed[key]] == pytest.approx([v for _, v in expected[key]], rel=1e-5), key


# --- W&B ------------------------------------------------------------------------------------------------------


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
    out = tmp_path / "run"
    assert train_one_thread(train_args(tiny_data, out, "wandb")) == 0
    [(run_id, config, history)] = wandb_runs(wandb_offline)
    assert json.loads((out / tracking.TRACKER_FILE).read_text())["wandb"]["run_id"] == run_id
    rows = read_metrics(out / "metrics.csv")
    columns = [column for column in rows[0] if column != "epoch"]
    assert "val_macro_f1" in columns
    for row in rows:
        [logged] = [point for point in history if point["_step"] == STEPS_PER_EPOCH * row["epoch"]]
        assert {column: logged[column] for column in columns} == pytest.approx({c: row[c] for c in columns})
    assert [point["_step"] for point in history if tracking.STEP_TAG in point] == list(range(1, 7))
    assert config["batch_size"] == 8 and config["logger"] == "wandb"


@pytest.mark.slow
def test_a_resumed_run_continues_the_same_wandb_run(tiny_data, tmp_path, wandb_offline):
    """Killed after epoch 1 was logged, then resumed: the resumed process logs to the run the killed one started."""
    out = tmp_path / "run"
    _killed_after_logging_epoch_1(tiny_data, out, "wandb")
    killed_id = json.loads((out / tracking.TRACKER_FILE).read_text())["wandb"]["run_id"]
    assert train_one_thread([*train_args(tiny_data, out, "wandb"), "--resume", str(out)]) == 0
    # offline, each process keeps its own file of the one run (the killed one's may be cut short)
    resumed_id, _, history = wandb_runs(wandb_offline)[-1]
    assert resumed_id == killed_id
    last = read_metrics(out / "metrics.csv")[-1]
    [logged] = [point for point in history if point["_step"] == 2 * STEPS_PER_EPOCH and "val_acc" in point]
    assert logged["val_acc"] == pytest.approx(last["val_acc"])
