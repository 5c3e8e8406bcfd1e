"""Shared fixtures: the devices to test on, and tiny demo data written to disk."""

from __future__ import annotations

import pytest
import torch

from {{ cookiecutter.package_name }}.data import write_demo_dataset


def _device_params() -> list:
    """cpu and meta always; cuda and cuda:1 as marked params that skip cleanly when absent."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    no_cuda = pytest.mark.skipif(count < 1, reason="needs a CUDA device")
    no_second = pytest.mark.skipif(count < 2, reason="needs two CUDA devices")
    return [
        "cpu",
        "meta",
        pytest.param("cuda:0", marks=[pytest.mark.cuda, no_cuda]),
        pytest.param("cuda:1", marks=[pytest.mark.cuda, pytest.mark.multi_gpu, no_second]),
    ]


DEVICES = _device_params()


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """Each device the suite checks placement on."""
    return torch.device(request.param)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """A real ImageFolder tree (train/ and val/) of a few 32-px PNGs per class."""
    root = tmp_path_factory.mktemp("data") / "demo"
    write_demo_dataset(root, train_per_class=6, val_per_class=3, image_size=32, seed=0)
    return root


@pytest.fixture(autouse=True)
def offline_weights(tmp_path_factory, monkeypatch):
    """Tests run as on a machine without internet: an empty hub cache (TORCH_HOME) and no downloads, so
    the project's pretrained default falls back to training from scratch, as it does offline."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path_factory.mktemp("torch-home")))
    monkeypatch.setattr("urllib.request.urlopen", _no_network)


def _no_network(*args, **kwargs):
    """Stand in for a machine without internet (downloading is not what any test checks)."""
    raise OSError("network is unreachable (tests run offline)")
