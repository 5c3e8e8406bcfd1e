"""train.py end to end through main(argv), and its refusals of bad input."""

import csv
import gc
import multiprocessing
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import HANG_S

import train
from {{ cookiecutter.package_name }} import settings
from {{ cookiecutter.package_name }}.outputs import METRICS_COLUMNS

PROJECT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def trained_run(tiny_data, tmp_path_factory):
    """One real two-epoch run on the tiny data, shared by the tests that inspect its outputs."""
    out = tmp_path_factory.mktemp("run")
    code = train.main(["--data", str(tiny_data), "--device", "cpu", "--epochs", "2", "--batch-size", "8",
                       "--image-size", "32", "--out", str(out), "--precision", "fp32", "--parallel", "none"])
    assert code == 0
    return out


def test_training_writes_checkpoints_metrics_config_and_curves(trained_run):
    """A run leaves last.pt, best.pt, metrics.csv (fixed columns, a row per epoch), config.json, curves.png."""
    for name in ("last.pt", "best.pt", "metrics.csv", "config.json", "curves.png"):
        assert (trained_run / name).stat().st_size > 0
    with open(trained_run / "metrics.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    assert tuple(reader.fieldnames[:len(METRICS_COLUMNS)]) == METRICS_COLUMNS  # a project's own metrics follow
    assert [row["epoch"] for row in rows] == ["1", "2"]


def test_a_finished_run_leaves_no_loader_worker_behind(tiny_data, tmp_path):
    """The loaders' persistent workers end with the run: left to the garbage collector, each would be
    waited for 5 s and then killed, whenever a collection came."""
    gc.disable()  # an automatic collection at the wrong moment would hide leftover workers
    try:
        code = train.main(["--data", str(tiny_data), "--device", "cpu", "--epochs", "1", "--batch-size", "8",
                           "--image-size", "32", "--workers", "1", "--out", str(tmp_path / "run"),
                           "--precision", "fp32", "--parallel", "none"])
        workers = multiprocessing.active_children()
    finally:
        gc.enable()
    assert code == 0 and workers == []


def test_checkpoint_loads_with_plain_torch_on_cpu(trained_run):
    """last.pt is plain data: weights_only loading on CPU, no wrapper prefixes, CPU tensors only."""
    state = torch.load(trained_run / "last.pt", map_location="cpu", weights_only=True)
    assert state["epoch"] == 2
    assert all(t.device.type == "cpu" for t in state["model"].values())
    assert not any(k.startswith(("module.", "_orig_mod.")) for k in state["model"])


def test_curves_png_and_config_json_describe_the_run(trained_run):
    """curves.png draws train and val loss and accuracy for each epoch run; config.json can rerun it."""
    import json

    import numpy as np
    from PIL import Image

    from {{ cookiecutter.package_name }}.outputs import read_metrics
    from {{ cookiecutter.package_name }}.plots import curves_figure

    figure = curves_figure(read_metrics(trained_run / "metrics.csv"))
    assert [len(axis.get_lines()) for axis in figure.axes] == [2, 2]
    assert all(list(line.get_xdata()) == [1, 2] for axis in figure.axes for line in axis.get_lines())
    with Image.open(trained_run / "curves.png") as image:
        assert np.asarray(image.convert("RGB")).std() > 10
    recorded = json.loads((trained_run / "config.json").read_text())
    assert recorded["epochs"] == 2 and recorded["resolved_device"] == "cpu"
    assert recorded["device_identity"] is None  # a GPU's name, UUID and PCI bus id; nothing to record for cpu
    assert recorded["environment"]["torch"] == torch.__version__


BAD_DEVICES = ["gpu", "tpu", "cuda:x", "cuda:-1", "cuda:99", "mps:3", "cpu:1", "cuda0", "", "cuda:1:2", "xla"]


@pytest.mark.parametrize("spec", BAD_DEVICES)
def test_bad_device_exits_2_with_one_line_and_writes_nothing(spec, tiny_data, tmp_path, capsys):
    """An unusable --device stops with exit 2, one line naming it and the available devices, no run dir."""
    out = tmp_path / "run"
    code = train.main(["--data", str(tiny_data), "--device", spec, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "available" in err[0] and "Traceback" not in err[0]
    assert not out.exists()


def test_bad_data_folder_exits_2_and_writes_nothing(tmp_path, capsys):
    """A data root without train/ and val/ is one line and exit 2."""
    (tmp_path / "data").mkdir()  # the --out beside it: an --out inside --data is refused before the data is read
    code = train.main(["--data", str(tmp_path / "data"), "--device", "cpu", "--out", str(tmp_path / "run")])
    assert code == 2 and "train" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # a subprocess: importing torch costs seconds
def test_cli_process_prints_no_traceback_on_bad_device(tmp_path):
    """Run as a real process, a bad device is exit 2 and a single stderr line."""
    result = subprocess.run([sys.executable, "train.py", "--device", "cuda:7", "--out", str(tmp_path / "r")],
                            cwd=PROJECT, capture_output=True, text=True, timeout=HANG_S)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "cuda:7" in result.stderr


def test_verbose_and_device_guard_flags_train_and_report(tiny_data, tmp_path, capsys):
    """--verbose prints the per-device report; --debug-devices guards a run that is placed correctly."""
    code = train.main(["--data", str(tiny_data), "--device", "cpu", "--epochs", "1", "--batch-size", "12",
                       "--image-size", "32", "--out", str(tmp_path / "run"), "--precision", "fp32",
                       "--parallel", "none", "--verbose", "--debug-devices"])
    out = capsys.readouterr().out
    assert code == 0
    param_rows = [line.split() for line in out.splitlines() if line.startswith("param")]
    assert param_rows and param_rows[0][1:3] == ["cpu", "float32"]


def test_an_abbreviated_flag_is_refused_not_read_as_the_flag_it_begins(tiny_data, tmp_path, capsys):
    """--verb is no --verbose: exit 2 naming it, nothing written. argparse would take it as --verbose for the run,
    while main(), which looks for --verbose before parsing, would keep a failure's traceback back."""
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as stopped:
        train.main(["--data", str(tiny_data), "--device", "cpu", "--epochs", "1", "--batch-size", "12",
                    "--image-size", "32", "--out", str(out), "--precision", "fp32", "--parallel", "none", "--verb"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and len(err) == 1 and "--verb" in err[0], err
    assert not out.exists()


def test_verbose_prints_the_traceback_of_an_unexpected_failure(monkeypatch, capsys):
    """A bug's one line tells the user to rerun with --verbose; with it, the traceback comes before that line."""
    def fails(*args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(train.startup, "settle", fails)  # the failure: anything settling and training may raise
    assert train.main(["--device", "cpu"]) == 1
    assert "Traceback" not in capsys.readouterr().err
    assert train.main(["--device", "cpu", "--verbose"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: a bug" in err.splitlines()[-1], err


def test_run_files_get_the_permissions_a_plain_open_would_give(trained_run, tmp_path):
    """Every file a run writes (checkpoints, metrics, config, plot) follows the umask, so teammates can read it."""
    probe = tmp_path / "probe"
    probe.write_text("x")  # open() under this process's umask
    expected = stat.S_IMODE(probe.stat().st_mode)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in trained_run.iterdir() if path.is_file()}
    assert {"last.pt", "best.pt", "metrics.csv", "config.json", "curves.png"} <= modes.keys()
    assert set(modes.values()) == {expected}, modes


def test_threads_reach_torch_once_the_settings_are_settled_and_before_the_run_is_built(monkeypatch, tmp_path):
    """--threads N reaches torch.set_num_threads before the data is read; unset, OMP_NUM_THREADS does (conftest: 1)."""
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    cores = settings.usable_cores()  # --threads is bounded by the cores this process may use
    (tmp_path / "data").mkdir()  # no train/ or val/: refused once the data is read, after the threads are set
    unreadable = ["--data", str(tmp_path / "data"), "--device", "cpu", "--out", str(tmp_path / "run")]
    assert train.main(["--threads", str(cores), *unreadable]) == 2
    assert train.main(unreadable) == 2
    assert calls == [cores, 1] and not (tmp_path / "run").exists()


def test_resume_reads_and_checks_the_checkpoint_once(trained_run, tmp_path, monkeypatch):
    """--resume: the checkpoint is read once (startup settles the run's own settings from it and the run is built
    from that same copy), however many places use it."""
    out = tmp_path / "resumed"
    shutil.copytree(trained_run, out)
    loaded, real_load = [], torch.load

    def counted_load(f, *args, **kwargs):
        loaded.append(str(f))
        return real_load(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counted_load)
    assert train.main(["--resume", str(out), "--epochs", "3", "--workers", "1", "--device", "cpu"]) == 0
    assert [path for path in loaded if path.endswith(".pt")] == [str(out / "last.pt")]
