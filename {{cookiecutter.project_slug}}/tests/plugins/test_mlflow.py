"""The tracker answer `mlflow` (plugins/mlflow.py), train.py --logger mlflow, for real and offline: MLflow in an
SQLite store under the test's folder. It gets every metrics.csv column and each step's loss, and a resumed run
continues the same MLflow run, each step logged once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import train_one_thread
from run_helpers import killed_at

import train
from {{ cookiecutter.package_name }}.outputs import read_metrics
from {{ cookiecutter.package_name }}.plugins._tracker_run import TRACKER_FILE
from {{ cookiecutter.package_name }}.plugins.mlflow import STEP_TAG

STEPS_PER_EPOCH = 3  # the tiny data: 24 training images in batches of 8
TIMINGS = ("epoch_time_s", "images_per_s")  # differ between runs of the same training


def train_args(data: Path, out: Path, logger: str, epochs: int = 2) -> list[str]:
    return ["--data", str(data), "--device", "cpu", "--epochs", str(epochs), "--batch-size", "8", "--image-size", "32",
            "--workers", "0", "--seed", "5", "--no-pretrained", "--precision", "fp32", "--parallel", "none",
            "--logger", logger, "--out", str(out)]


def _killed_before_saving_epoch_2(data: Path, out: Path) -> None:
    """train.py in a subprocess, SIGKILLed after epoch 2's last step, before its checkpoint (epoch 1 saved, logged)."""
    killed_at([sys.executable, "train.py", *train_args(data, out, "mlflow")], out.parent / "killed.log", "validate:2")
    assert torch.load(out / "last.pt", map_location="cpu", weights_only=True)["epoch"] == 1


def test_mlflow_that_is_not_installed_is_one_line_and_exit_2(tiny_data, tmp_path, monkeypatch, capsys):
    """Without its package (the import fails as if absent): one line naming the extra; no run folder."""
    monkeypatch.setitem(sys.modules, "mlflow", None)
    out = tmp_path / "run"
    code = train.main(train_args(tiny_data, out, "mlflow"))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["error: --logger mlflow needs the mlflow package: pip install -e '.[mlflow]'"]
    assert not out.exists()


def test_without_mlflow_installed_a_run_that_does_not_ask_for_it_is_quiet(tiny_data, tmp_path, monkeypatch, capsys):
    """The mlflow answer's project, mlflow not installed, --logger csv: the run neither needs nor mentions it."""
    monkeypatch.setitem(sys.modules, "mlflow", None)
    out = tmp_path / "run"
    assert train.main(train_args(tiny_data, out, "csv")) == 0
    err = capsys.readouterr().err
    assert "mlflow" not in err and "warning" not in err, err
    assert torch.load(out / "last.pt", map_location="cpu", weights_only=True)["epoch"] == 2


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
    run = client.get_run(json.loads((out / TRACKER_FILE).read_text())["mlflow"]["run_id"])
    return run, {key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
                 for key in run.data.metrics}


@pytest.mark.slow
def test_mlflow_run_gets_every_metrics_csv_column_each_step_loss_and_the_settings(tiny_data, tmp_path, mlflow_store):
    """One MLflow run named after the run folder: each metrics.csv column at its epoch's last step, equal to it, one
    train_loss_step per optimizer step, the settings as params; FINISHED when training ends."""
    out = tmp_path / "run"
    assert train_one_thread(train_args(tiny_data, out, "mlflow")) == 0
    run, points = mlflow_points(mlflow_store, out)
    rows = read_metrics(out / "metrics.csv")
    columns = [column for column in rows[0] if column != "epoch"]
    assert "val_macro_f1" in columns and set(points) == {*columns, STEP_TAG}
    for column in columns:
        assert points[column] == [(STEPS_PER_EPOCH * row["epoch"], pytest.approx(row[column])) for row in rows]
    assert [step for step, _ in points[STEP_TAG]] == list(range(1, 2 * STEPS_PER_EPOCH + 1))
    assert run.data.params["batch_size"] == "8" and run.data.params["logger"] == "mlflow"
    assert run.info.status == "FINISHED" and run.info.run_name == "run"


def assert_same_points(uri: str, out: Path, reference: Path) -> None:
    """`out`'s MLflow run holds `reference`'s metrics, each step once, with its values (but the timings)."""
    _, resumed = mlflow_points(uri, out)
    _, expected = mlflow_points(uri, reference)
    assert resumed.keys() == expected.keys()
    for key in expected:
        assert [step for step, _ in resumed[key]] == [step for step, _ in expected[key]], key  # each step once
        if key not in TIMINGS:
            assert [v for _, v in resumed[key]] == pytest.approx([v for _, v in expected[key]], rel=1e-5), key


@pytest.mark.slow
def test_a_resumed_run_continues_the_same_mlflow_run_with_each_step_once(tiny_data, tmp_path, mlflow_store):
    """Killed in epoch 2, then resumed: one MLflow run with the numbers of an uninterrupted one. Resumed once more
    from a copy of epoch 1's checkpoint (an earlier last.pt kept aside): epoch 2 is not logged twice."""
    reference = tmp_path / "reference"
    assert train_one_thread(train_args(tiny_data, reference, "mlflow")) == 0
    out = tmp_path / "run"
    _killed_before_saving_epoch_2(tiny_data, out)
    killed_id = json.loads((out / TRACKER_FILE).read_text())["mlflow"]["run_id"]
    shutil.copy(out / "last.pt", out / "epoch-1.pt")
    assert train_one_thread([*train_args(tiny_data, out, "mlflow"), "--resume", str(out)]) == 0
    run, _ = mlflow_points(mlflow_store, out)
    assert run.info.run_id == killed_id and run.info.status == "FINISHED"
    assert_same_points(mlflow_store, out, reference)
    assert train_one_thread([*train_args(tiny_data, out, "mlflow"), "--resume", str(out / "epoch-1.pt")]) == 0
    assert_same_points(mlflow_store, out, reference)


@pytest.mark.slow
def test_a_store_that_cannot_be_opened_leaves_the_folder_free_for_the_next_try(tiny_data, tmp_path, monkeypatch,
                                                                              capsys):
    """A tracking URI MLflow cannot open (bogus://) is one line, exit 2, and no last.pt: the same --out then trains
    (finding 6 of the third round of careless use)."""
    pytest.importorskip("mlflow", reason="needs the mlflow extra: pip install -e '.[mlflow]'")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "bogus://nowhere")
    out = tmp_path / "run"
    assert train.main(train_args(tiny_data, out, "mlflow", epochs=1)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --logger mlflow: ")
    assert not (out / "last.pt").exists()
    assert train.main(train_args(tiny_data, out, "csv", epochs=1)) == 0


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes and /dev/zero are POSIX")
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_tracker_json_that_is_a_pipe_or_a_device_is_no_record_and_never_a_hang(tmp_path, kind):
    """A run folder from elsewhere may hold a pipe or a link to /dev/zero as tracker.json: no tracker run is
    continued (a new one starts) and recording one replaces it. In a process of its own, its address space capped:
    a regression hangs there, or fails fast reading /dev/zero."""
    os.mkfifo(tmp_path / TRACKER_FILE) if kind == "fifo" else (tmp_path / TRACKER_FILE).symlink_to("/dev/zero")
    script = ("import resource, sys; from pathlib import Path; resource.setrlimit(resource.RLIMIT_AS, (2**33, 2**33)); "
              "from {{ cookiecutter.package_name }}.plugins._tracker_run import save_tracker_run_id, tracker_run_id; "
              "folder = Path(sys.argv[1]); before = tracker_run_id(folder, 'mlflow'); "
              "save_tracker_run_id(folder, 'mlflow', 'abc'); print(before, tracker_run_id(folder, 'mlflow'))")
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["None", "abc"]
