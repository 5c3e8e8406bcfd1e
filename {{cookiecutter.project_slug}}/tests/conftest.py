"""Shared fixtures: the devices to test on, tiny demo data written to disk, and a faked CUDA backend.

Also what the suite decides for itself, whatever machine runs it (see "The machine decides nothing" below).
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib
import importlib.metadata
import os
import shutil
import tempfile
from unittest import mock

import pytest
import torch
from packaging.version import Version
from paused_train import PAUSE_ENV_VAR  # where a crash test pauses a real train.py (tests/paused_train.py)
from PIL import Image
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from {{ cookiecutter.package_name }}.config import DEVICE_ENV_VAR, TrainConfig
from {{ cookiecutter.package_name }}.data.demo import DEMO_CLASSES, write_demo_dataset
from {{ cookiecutter.package_name }}.devkit.checkpoint import model_state, save_checkpoint
from {{ cookiecutter.package_name }}.model import build_model

# --- The machine decides nothing ---------------------------------------------------------------------------------
# A user's shell, caches and load must change no result. Pinned when pytest imports this file: before any test module,
# any fixture of any scope, and any process a test starts (they inherit os.environ). Left to the machine on purpose:
# CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER (which GPUs it has: every test passes with 0, 1 or 2), GLOO_SOCKET_IFNAME
# (how its ranks reach each other), XDG_CACHE_HOME (matplotlib's font cache; torch hub reads TORCH_HOME first).

# Runs compared bit for bit must use one thread count (it changes the order of CPU float sums), and train.py's default
# follows OMP_NUM_THREADS, else the machine's load: one thread in every process, whatever the caller's shell says.
# The tests of the default itself set or unset it (test_settings, test_resume).
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)  # this process read the variable when it imported torch, above
# The device: the generated default, which the tests' expectations assume (test_config sets the variable itself).
# A pause left set, or a shell inside a torchrun job, would pause or distribute runs that expect neither.
for _name in (DEVICE_ENV_VAR, PAUSE_ENV_VAR, "RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
              "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT"):
    os.environ.pop(_name, None)
# Trackers: no account or server of the user's is reached. The tests that log name their own places; the others
# train with the project's default --logger, which for W&B must then be offline (its files go to the run folder).
for _name in [name for name in os.environ if name.startswith(("MLFLOW_", "WANDB_"))]:
    os.environ.pop(_name)
os.environ["WANDB_MODE"] = "offline"
# Pretrained weights: an empty hub cache of the session's own (TORCH_HOME wins over XDG_CACHE_HOME and ~/.cache), so
# no fixture of any scope starts from weights the machine has cached; each test then gets its own (offline_weights).
SESSION_TORCH_HOME = tempfile.mkdtemp(prefix="pytest-torch-home-")
atexit.register(shutil.rmtree, SESSION_TORCH_HOME, ignore_errors=True)
os.environ["TORCH_HOME"] = SESSION_TORCH_HOME
# The same for timm's weights (the Hugging Face hub's cache), read offline: a test that wants weights writes them there.
os.environ["HF_HOME"] = os.path.join(SESSION_TORCH_HOME, "huggingface")
os.environ.pop("HF_HUB_CACHE", None)
os.environ["HF_HUB_OFFLINE"] = "1"
# This user's signing key (signing.py: export.py signs each .pt2, the compile cache its artifacts) lives in
# $XDG_DATA_HOME: the session's own, so no test signs with, or replaces, the key of whoever runs the suite.
SESSION_DATA_HOME = tempfile.mkdtemp(prefix="pytest-data-home-")
atexit.register(shutil.rmtree, SESSION_DATA_HOME, ignore_errors=True)
os.environ["XDG_DATA_HOME"] = SESSION_DATA_HOME

# How long a test waits on a child process before calling it hung. A hang guard, never a speed limit: generous, so
# a loaded machine makes the suite slower but not red (timings belong in benchmarks/). TEST_HANG_S changes it.
HANG_S = float(os.environ.get("TEST_HANG_S", "1800"))


def _timm_family(name: str, since: str):
    """One family's tiny timm test model as a test parameter, skipped without timm or where timm predates it."""
    try:
        installed = Version(importlib.metadata.version("timm"))
    except importlib.metadata.PackageNotFoundError:
        return pytest.param(name, marks=pytest.mark.skip(reason="needs the timm extra: pip install -e '.[timm]'"),
                            id=name.removeprefix("timm/"))
    too_old = pytest.mark.skipif(installed < Version(since), reason=f"timm {installed} has no {name}: timm>={since}")
    return pytest.param(name, marks=too_old, id=name.removeprefix("timm/"))


# The families a timm backbone is tested on: a CNN, a ViT and a convolution-attention hybrid (timm's own tiny models;
# the [timm] extra's floor, 1.0.22, has the first two).
TIMM_FAMILIES = [_timm_family("timm/test_resnet", "1.0.12"), _timm_family("timm/test_vit", "1.0.12"),
                 _timm_family("timm/test_coatnet", "1.0.31")]


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, which the [test] extra installs
def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (the README's quick tier): one worker a CPU this process may use, at most four (each imports torch
    and starts its tests' runs; more buys little on a laptop and costs memory on a large machine)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(4, usable))


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


@dataclasses.dataclass
class FakeGpu:
    """What torch.cuda.get_device_properties and mem_get_info report for one faked GPU."""

    name: str
    total_memory: int
    free: int
    uuid: str  # without 'GPU-', as torch's properties print it
    pci_bus_id: int
    major: int = 9
    minor: int = 0
    multi_processor_count: int = 132
    pci_domain_id: int = 0
    pci_device_id: int = 0


class FakeCuda:
    """torch.cuda answering as a machine with `gpus`: only the backend is faked, never the project's code.

    Device counts, the current device, properties and free memory are what the code under test asks
    torch.cuda; no tensor can be allocated (use FakeTensorMode for tensors on cuda:N).
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, gpus: list[FakeGpu]) -> None:
        self.gpus, self.current, self.set_device_calls = gpus, 0, []
        for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LOCAL_RANK"):
            monkeypatch.delenv(name, raising=False)
        fakes = {
            "is_available": lambda: True,
            "device_count": lambda: len(self.gpus),
            "current_device": lambda: self.current,
            "set_device": self._set_device,
            "get_device_properties": lambda device=None: self.gpus[self._index(device)],
            "get_device_name": lambda device=None: self.gpus[self._index(device)].name,
            "mem_get_info": lambda device=None: (self.gpus[self._index(device)].free,
                                                 self.gpus[self._index(device)].total_memory),
            "is_bf16_supported": lambda *args, **kwargs: True,
        }
        for name, fake in fakes.items():
            monkeypatch.setattr(torch.cuda, name, fake)
        if hasattr(torch, "accelerator"):  # torch 2.6+: the project asks it which accelerator and how many
            monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
            monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *args, **kwargs: torch.device("cuda"))
            monkeypatch.setattr(torch.accelerator, "device_count", lambda: len(self.gpus))

    def _index(self, device: int | str | torch.device | None) -> int:
        """The GPU a torch.cuda call means: an index, 'cuda:N', a torch.device, or None (the current one)."""
        if device is None:
            return self.current
        index = device if isinstance(device, int) else torch.device(device).index
        index = self.current if index is None else index
        if not 0 <= index < len(self.gpus):
            raise RuntimeError(f"fake CUDA: invalid device ordinal {index}")  # as CUDA would
        return index

    def _set_device(self, device: int | str | torch.device) -> None:
        self.current = self._index(device)
        self.set_device_calls.append(self.current)


GIB = 2**30


def _h100s(free_gib: list[float]) -> list[FakeGpu]:
    """One faked H100 per entry, with that many GiB free."""
    return [FakeGpu(name="NVIDIA H100 80GB HBM3", total_memory=80 * GIB, free=int(free * GIB),
                    uuid=f"{index:08x}-1111-2222-3333-44445555666{index}", pci_bus_id=0x19 + 0x20 * index)
            for index, free in enumerate(free_gib)]


@pytest.fixture
def fake_cuda(monkeypatch):
    """A factory: fake_cuda(free_gib=[10, 70]) makes torch.cuda report one H100 per entry, that much free."""
    def install(free_gib: list[float] = (10, 70)) -> FakeCuda:
        return FakeCuda(monkeypatch, _h100s(free_gib))
    return install


# Before torch 2.10 (seen on 2.4, 2.6, 2.8 and 2.9), a convolution on a fake cuda tensor calls the real CUDA runtime,
# which aborts the process on a machine without a GPU; there the forward passes are left to the cuda tests.
fake_forward = pytest.mark.skipif(torch.__version__ < (2, 10) and not torch.cuda.is_available(),
                                  reason="torch < 2.10 runs a fake cuda convolution through real CUDA")


@pytest.fixture
def fake_tensors(monkeypatch):
    """Tensors created inside are fake: any device, no memory; real CPU tensors may be mixed in.

    Where CUDA is available (real or faked), FakeTensorMode makes some constants real on their device
    (BatchNorm's num_batches_tracked, torch.tensor(targets)): on a one-GPU machine that is the absent
    cuda:1. Told to avoid device init, it keeps them fake on any machine. Fake tensors hold no values,
    so random fills are no-ops here: torch 2.4-2.8 run uniform_/normal_ on a fake cuda tensor through
    real CUDA (torch 2.11 does not), which fails on a machine without a GPU.
    """
    if not torch.backends.cuda.is_built():  # a CPU-only build aborts the process on any tensor on cuda:1, fake or not
        pytest.skip("this torch build has no CUDA support (e.g. the CPU wheels): fake cuda tensors need it")
    monkeypatch.setattr(FakeTensorMode, "avoid_device_init", property(lambda self: True))
    for fill in ("uniform_", "normal_"):  # every nn.init scheme and the layers' reset_parameters end in these
        monkeypatch.setattr(torch.Tensor, fill, lambda self, *args, **kwargs: self)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        yield mode


def hide_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.cuda (and torch.accelerator) answering as a machine without GPUs, whatever this machine has."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    if hasattr(torch, "accelerator"):
        monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
        monkeypatch.setattr(torch.accelerator, "device_count", lambda: 0)


@pytest.fixture
def no_gpus(monkeypatch):
    """This test sees a machine without GPUs (for behaviour that is defined by their absence)."""
    hide_cuda(monkeypatch)


@pytest.fixture(params=[0, 1, 2], ids=["0gpu", "1gpu", "2gpu"])
def any_gpu_count(request, monkeypatch) -> int:
    """torch.cuda reporting 0, 1 and 2 GPUs in turn: a CPU test under it must hold on every machine."""
    if request.param == 0:
        hide_cuda(monkeypatch)
    else:
        FakeCuda(monkeypatch, _h100s([70] * request.param))
    return request.param


def cpu_data_parallel(module: nn.Module) -> nn.DataParallel:
    """nn.DataParallel around a CPU module as a machine without GPUs builds it, on a machine with any number.

    With GPUs visible, DataParallel moves a CPU module to cuda:0 (one GPU) or refuses to run it (two):
    tests of what the wrapper does to names and checkpoints want the CPU wrapper everywhere.
    """
    # The module by its import path: on torch 2.4, torch.nn.parallel.data_parallel is the function of that name.
    module_file = importlib.import_module("torch.nn.parallel.data_parallel")
    with mock.patch.object(module_file, "_get_available_device_type", return_value=None):
        return nn.DataParallel(module)


def _no_network(*args, **kwargs):
    """Stand in for a machine without internet (downloading is not what any test checks)."""
    raise OSError("network is unreachable (tests run offline)")


@pytest.fixture(scope="session", autouse=True)
def offline():
    """No downloads in this process, from the first fixture of any scope on. torch hub is patched by its own name:
    it imported urlopen from urllib, so patching urllib's alone leaves it online."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("urllib.request.urlopen", _no_network)
        patch.setattr(torch.hub, "download_url_to_file", _no_network)
        yield


@pytest.fixture(autouse=True)
def offline_weights(tmp_path_factory, monkeypatch):
    """Each test its own empty hub cache (TORCH_HOME): the project's pretrained default trains from scratch, as it
    does offline, and a weights file a test writes there is seen by no other test."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path_factory.mktemp("torch-home")))


def train_one_thread(argv: list[str]) -> int:
    """train.main in this process on one thread, like the train.py subprocesses (OMP_NUM_THREADS=1).

    Thread counts change the order of CPU float sums, so runs that are compared bit for bit use one.
    """
    import train  # the project's CLI module, at the project root

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train.main(argv)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A real checkpoint of the project's default model for the demo classes at 32 px (untrained)."""
    torch.manual_seed(0)
    cfg = TrainConfig(device="cpu", pretrained=False)
    model = build_model(cfg.backbone, len(DEMO_CLASSES), pretrained=False, device=torch.device("cpu"))
    state = {"model": model_state(model), "config": cfg.to_dict(), "class_names": sorted(DEMO_CLASSES),
             "image_size": 32, "epoch": 1}
    return save_checkpoint(tmp_path_factory.mktemp("run") / "best.pt", state)


def nested_tensors(obj, prefix: str = ""):
    """(path, tensor) for every tensor nested in dicts, lists and tuples (a checkpoint compared bit for bit)."""
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from nested_tensors(value, f"{prefix}/{key}")
    elif isinstance(obj, (list, tuple)):
        for index, value in enumerate(obj):
            yield from nested_tensors(value, f"{prefix}/{index}")


class Tiny(nn.Module):
    """A linear classifier of 16-px images into 2 classes: a real model that exports in a moment."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3 * 16 * 16, 2)

    def forward(self, images):
        return self.linear(images.flatten(1))


@pytest.fixture
def image(tmp_path):
    """A 32-px red PNG: one image to predict."""
    path = tmp_path / "image.png"
    Image.new("RGB", (32, 32), "red").save(path)
    return path
