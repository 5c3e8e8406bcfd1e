"""The host side stays cheap: optional imports load when used, best.pt is not serialised twice, the loader's
worker defaults fit the machine, and cuDNN's autotuner, TF32 and channels_last are on for CUDA runs."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from conftest import HANG_S

from {{ cookiecutter.package_name }} import config, settings
from {{ cookiecutter.package_name }}.data.loaders import PREFETCH_BATCHES, build_loader
from {{ cookiecutter.package_name }}.processes import Processes
from {{ cookiecutter.package_name }}.training import epochs, hardware, run_state, stopping
from {{ cookiecutter.package_name }}.training.hardware import Hardware

PROJECT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


def test_importing_train_py_does_not_load_matplotlib():
    """Plots are drawn at an epoch's end: matplotlib is imported there, not when train.py starts."""
    code = "import sys, train; print(sorted(m for m in ('matplotlib', 'pandas') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, capture_output=True, text=True, timeout=HANG_S)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout + result.stderr[-2000:]


def _row(epoch: int, val_acc: float) -> dict:
    return {"epoch": epoch, "train_loss": 1.0, "train_acc": 0.5, "val_loss": 1.0, "val_acc": val_acc, "lr": 1e-3,
            "epoch_time_s": 1.0, "images_per_s": 10.0, "unreadable_images": 0}


@pytest.fixture
def stand_in_run():
    """What save_epoch reads of a Run: its rows, best score, save clock and a state per epoch."""
    def state(epoch: int, step: int = 0, totals=None, weights: str = "model") -> dict:
        return {"epoch": epoch, "weights": weights, "model": {"w": torch.full((4,), float(epoch))}}
    return types.SimpleNamespace(rows=[], best_acc=-1.0, save_clock=stopping.SaveClock(0), state=state,
                                 processes=Processes())


def test_an_improved_epoch_serialises_its_state_once_for_last_and_best(stand_in_run, tmp_path, monkeypatch):
    """best.pt and last.pt of an improved epoch are the same bytes from one serialisation (a link or a copy)."""
    saved = []
    write = run_state.save
    monkeypatch.setattr(run_state, "save", lambda path, state, **kw: saved.append(Path(path).name) or write(
        path, state, **kw))
    epochs.save_epoch(stand_in_run, _row(1, 0.5), tmp_path)
    assert saved == ["best.pt"]
    assert (tmp_path / "best.pt").read_bytes() == (tmp_path / "last.pt").read_bytes()
    assert not list(tmp_path.glob(".*.tmp"))


def test_best_pt_keeps_its_epoch_when_a_later_last_pt_replaces_the_shared_bytes(stand_in_run, tmp_path):
    """A worse epoch rewrites last.pt only; best.pt (possibly the same inode before) still holds the best epoch."""
    epochs.save_epoch(stand_in_run, _row(1, 0.5), tmp_path)
    epochs.save_epoch(stand_in_run, _row(2, 0.4), tmp_path)
    load = lambda name: torch.load(tmp_path / name, map_location="cpu", weights_only=True)  # noqa: E731
    assert load("best.pt")["epoch"] == 1 and load("last.pt")["epoch"] == 2
    epochs.save_epoch(stand_in_run, _row(3, 0.9), tmp_path)
    assert load("best.pt")["epoch"] == 3 and load("last.pt")["epoch"] == 3


@pytest.mark.parametrize(("cores", "local_ranks", "expected"),
                         [(2, None, 1), (1, None, 0), (16, "2", 7), (64, None, 63), (4, "8", 0)])
def test_the_default_worker_count_follows_the_cores_this_process_may_use(monkeypatch, cores, local_ranks, expected):
    """One core stays with the training process; the rest are shared by the ddp ranks on the node, uncapped."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    if local_ranks is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local_ranks)
    assert config.default_workers() == expected
    assert config.TrainConfig().workers == expected


def test_workers_flag_still_wins_over_the_default(monkeypatch):
    """--workers 0 decodes in the main process even on a machine with many cores."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)), raising=False)
    assert settings.settle(["--workers", "0"]).cfg.workers == 0
    assert settings.settle([]).cfg.workers == 31


def test_evaluate_and_predict_default_to_the_same_workers_as_training(monkeypatch):
    """Evaluation and prediction decode in workers too: the cores this process may use, less one."""
    import evaluate
    import predict

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(12)), raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert evaluate.get_args_parser().parse_args(["ckpt.pt"]).workers == 11
    assert predict.get_args_parser().parse_args(["ckpt.pt", "x.png"]).workers == 11


def test_loaders_with_workers_keep_them_and_prefetch_ahead(tiny_data):
    """Workers persist across epochs and each keeps two batches ready (more only costs pinned memory and /dev/shm)."""
    from {{ cookiecutter.package_name }}.data.folders import load_splits

    train_set, _ = load_splits(tiny_data, image_size=32)
    loader = build_loader(train_set, 4, torch.device("cpu"), train=True, workers=1)
    assert loader.persistent_workers and loader.prefetch_factor == PREFETCH_BATCHES == 2


def test_cuda_runs_turn_on_cudnn_autotuning_unless_determinism_was_asked_for(monkeypatch):
    """Fixed-size batches: each shape's fastest kernels are timed once; not under deterministic algorithms."""
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    Hardware.create(torch.device("cpu"))
    assert torch.backends.cudnn.benchmark is False
    Hardware.create(torch.device("cuda"))
    assert torch.backends.cudnn.benchmark is True
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: True)
    Hardware.create(torch.device("cuda"))
    assert torch.backends.cudnn.benchmark is False


def test_fp32_matmuls_use_tf32_on_cuda_unless_determinism_was_asked_for(monkeypatch):
    """TF32 tensor cores for fp32 matmuls on CUDA only, and not under torch.use_deterministic_algorithms."""
    before = torch.get_float32_matmul_precision()
    try:
        assert Hardware.create(torch.device("cuda")).tf32 is True
        assert torch.get_float32_matmul_precision() == "high"
        assert Hardware.create(CPU).tf32 is False
        assert torch.get_float32_matmul_precision() == "highest"
        monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: True)
        assert Hardware.create(torch.device("cuda")).tf32 is False
        assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.set_float32_matmul_precision(before)


def test_channels_last_is_the_default_when_autocasting_on_cuda():
    """NHWC by default under fp16/bf16 on CUDA; contiguous elsewhere; an explicit choice wins."""
    assert hardware.default_channels_last(torch.device("cuda"), "bf16")
    assert hardware.default_channels_last(torch.device("cuda:1"), "fp16")
    assert not hardware.default_channels_last(torch.device("cuda"), "fp32")
    assert not hardware.default_channels_last(CPU, "bf16")
    assert Hardware.create(torch.device("cuda"), "fp32", None).channels_last is False
    assert Hardware.create(CPU, "bf16", None).channels_last is False
    assert Hardware.create(CPU, "bf16", True).channels_last is True
    assert settings.settle([]).cfg.channels_last is None
    assert settings.settle(["--no-channels-last"]).cfg.channels_last is False
