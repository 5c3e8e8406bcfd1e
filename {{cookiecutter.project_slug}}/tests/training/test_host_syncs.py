"""The training path never waits for the device once per step: every host read is per epoch or per log interval.

On the CPU a counting wrapper stands in for the device: it counts the calls that read a tensor back
(`.item()`, `.tolist()`, `.cpu()`, `.numpy()`, `bool()`/`int()`/`float()` of a tensor) over an epoch
of the loop, and the count must not grow with the number of steps. The meta device has no data, so
an operation that needs to read the device (a data-dependent shape, a Python `if` on a tensor) fails
there: the pieces that must not read back run on it. With a GPU, torch's own sync detector counts.
"""

from __future__ import annotations

import types
import warnings

import pytest
import torch
from PIL import Image

from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.data.device_decode import CollateEncoded, use_device_decode
from {{ cookiecutter.package_name }}.data.folders import load_splits
from {{ cookiecutter.package_name }}.data.loaders import build_loader
from {{ cookiecutter.package_name }}.data.transforms import Preprocessing
from {{ cookiecutter.package_name }}.loss import WeightedCrossEntropy
from {{ cookiecutter.package_name }}.metrics import new_confusion, update_confusion
from {{ cookiecutter.package_name }}.model import build_model
from {{ cookiecutter.package_name }}.training import epochs, loop, recipe, stopping
from {{ cookiecutter.package_name }}.training.hardware import Hardware

CPU, META = torch.device("cpu"), torch.device("meta")
READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__")
CUDA_COUNT = torch.cuda.device_count() if torch.cuda.is_available() else 0


class _Reads:
    """Counts the calls to the tensor methods that read values back to the host (a sync on an accelerator)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.count = 0
        for name in READS:
            monkeypatch.setattr(torch.Tensor, name, self._counted(getattr(torch.Tensor, name)))

    def _counted(self, method):
        def counted(tensor, *args, **kwargs):
            self.count += 1
            return method(tensor, *args, **kwargs)
        return counted


def _stand_in_run(device: torch.device) -> types.SimpleNamespace:
    """What at_step_boundary reads of a Run, with no signal and no periodic save due."""
    return types.SimpleNamespace(stop=stopping.StopRequest(), save_clock=stopping.SaveClock(0), device=device)


def _epoch_of(tiny_data, device: torch.device, batch_size: int, reads: _Reads | None = None,
              decode_on_device: bool = False) -> int:
    """Host reads during one training epoch (with EMA and the step boundary) and one validation pass.

    `decode_on_device`: the loaders hand over JPEG bytes that Hardware.batch decodes (data/device_decode.py).
    """
    torch.manual_seed(0)
    train_set, val_set = load_splits(tiny_data, image_size=32)
    collate = {}
    if decode_on_device:
        train_set, val_set = (use_device_decode(dataset, Preprocessing(32), train)
                              for dataset, train in ((train_set, True), (val_set, False)))
        collate = {True: CollateEncoded(train_set.geometry), False: CollateEncoded(val_set.geometry)}
    model = build_model("{{ cookiecutter.backbone }}", 4, pretrained=False, device=device)
    cfg = TrainConfig(lr=1e-3, backbone_lr_scale=1.0, weight_decay=0.01)  # the real config
    optimizer, ema = recipe.make_optimizer(model, cfg), recipe.make_ema(model, 0.9)
    loss_fn = WeightedCrossEntropy(torch.ones(4)).to(device)
    hw = Hardware.create(device, mean=(0.5,) * 3, std=(0.25,) * 3)
    train_loader = build_loader(train_set, batch_size, device, train=True, collate_fn=collate.get(True))
    val_loader = build_loader(val_set, batch_size, device, train=False, collate_fn=collate.get(False))
    run = _stand_in_run(device)
    before = reads.count if reads else 0
    stats = loop.train_one_epoch(model, loss_fn, optimizer, train_loader, hw, epoch=1,
                                 recipe=loop.StepRecipe(ema=ema), progress=False, log_every=1000,
                                 after_step=lambda step, totals: epochs.at_step_boundary(run, None, 1, step, totals))
    loop.evaluate(ema.module, loss_fn, val_loader, hw, progress=False, confusion=new_confusion(4, device))
    assert stats.images == len(train_set) and len(train_loader) == -(-len(train_set) // batch_size)
    return (reads.count if reads else 0) - before


def test_an_epoch_reads_the_device_as_often_with_twelve_steps_as_with_three(tiny_data, monkeypatch):
    """Optimizer, EMA, step boundary and evaluation add no host read per step: 12 steps read as often as 3.

    (The reads that remain are per epoch: the non-finite check, the epoch's sums, the sampler's order,
    and per image in the CPU transforms, the same for both batch sizes.)"""
    reads = _Reads(monkeypatch)
    few, many = _epoch_of(tiny_data, CPU, 8, reads), _epoch_of(tiny_data, CPU, 2, reads)
    assert many == few, f"{many - few} more host reads for 9 more steps: a read per step crept in"


@pytest.fixture(scope="module")
def tiny_jpegs(tiny_data, tmp_path_factory):
    """tiny_data's images as JPEG files."""
    root = tmp_path_factory.mktemp("jpegs")
    for png in tiny_data.rglob("*.png"):
        target = root / png.relative_to(tiny_data).with_suffix(".jpg")
        target.parent.mkdir(parents=True, exist_ok=True)
        Image.open(png).convert("RGB").save(target)
    return root


def test_decoding_on_the_device_adds_no_read_per_step(tiny_jpegs, monkeypatch):
    """--decode device: decoding, resizing, cropping and flipping each batch on the device reads nothing back."""
    reads = _Reads(monkeypatch)
    few, many = (_epoch_of(tiny_jpegs, CPU, size, reads, decode_on_device=True) for size in (8, 2))
    assert many == few, f"{many - few} more host reads for 9 more steps: a read per step crept in"


def test_the_count_sees_a_read_added_to_every_step(tiny_data, monkeypatch):
    """The test above can fail: one .item() per step shows as a difference of 9."""
    reads = _Reads(monkeypatch)
    stepped = loop._optimizer_step

    def step_then_read(model, *args):
        stepped(model, *args)
        next(model.parameters()).sum().item()

    monkeypatch.setattr(loop, "_optimizer_step", step_then_read)
    assert _epoch_of(tiny_data, CPU, 2, reads) - _epoch_of(tiny_data, CPU, 8, reads) == 12 - 3


def test_the_ema_update_runs_on_the_meta_device_without_reading_its_counter():
    """The EMA's first-update copy is decided on the device: its update works where nothing can be read."""
    model = build_model("{{ cookiecutter.backbone }}", 4, pretrained=False, device=META)
    ema = recipe.make_ema(model, 0.9)
    ema.update_parameters(model)
    ema.update_parameters(model)
    assert ema.n_averaged.device == META


def test_the_ema_copies_first_then_follows_at_its_decay_for_every_buffer_too():
    """Same rule as torch's EMA: the first update copies weights and buffers, later ones move (1 - decay)."""
    torch.manual_seed(0)
    model = build_model("{{ cookiecutter.backbone }}", 4, pretrained=False, device=CPU)
    ema = recipe.make_ema(model, 0.75)
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            tensor.add_(1)
    ema.update_parameters(model)
    assert all(torch.equal(a, b) for a, b in zip(ema.module.state_dict().values(), model.state_dict().values()))
    before = ema.module.head.weight.detach().clone()
    with torch.no_grad():
        model.head.weight.add_(4.0)
    ema.update_parameters(model)
    torch.testing.assert_close(ema.module.head.weight, 0.75 * before + 0.25 * model.head.weight)
    assert int(ema.n_averaged) == 2


def test_the_confusion_matrix_is_counted_on_the_meta_device():
    """update_confusion has no data-dependent shape (bincount's waits for the device): it runs on meta."""
    matrix = new_confusion(3, META)
    update_confusion(matrix, torch.tensor([0, 2], device=META), torch.tensor([1, 2], device=META))
    assert matrix.shape == (3, 3) and matrix.device == META


def test_adamw_is_fused_where_the_device_has_the_kernel():
    """Fused AdamW on the CPU (and CUDA): one kernel, its step counts never read back; plain AdamW on meta."""
    cfg = TrainConfig(lr=1e-3, backbone_lr_scale=1.0, weight_decay=0.01)
    for device, fused in ((CPU, True), (META, None)):
        model = build_model("{{ cookiecutter.backbone }}", 4, pretrained=False, device=device)
        assert recipe.make_optimizer(model, cfg).defaults["fused"] is fused, device


@pytest.mark.cuda
@pytest.mark.skipif(CUDA_COUNT < 1, reason="needs a CUDA device")
def test_on_a_gpu_torch_sees_no_more_syncs_in_twelve_steps_than_in_three(tiny_data):
    """torch.cuda.set_sync_debug_mode counts every implicit sync: the count does not grow with the steps."""
    device = torch.device("cuda:0")

    def syncs(batch_size: int) -> int:
        _epoch_of(tiny_data, device, batch_size)  # warm-up: cuDNN autotuning, lazy CUDA initialisation
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                _epoch_of(tiny_data, device, batch_size)
            finally:
                torch.cuda.set_sync_debug_mode(0)
        return sum("synchroniz" in str(warning.message) for warning in caught)

    few, many = syncs(8), syncs(2)
    assert many == few, f"{many - few} more syncs for 9 more steps"
