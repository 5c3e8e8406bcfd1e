"""Counting the training path's reads of the device: the helpers of tests/training/test_host_syncs.py, shared with
the plugins' tests (a plugin that changes how the loaders read images must not add a read per step either).

On the CPU a counting wrapper stands in for the device: it counts the calls that read a tensor back
(`.item()`, `.tolist()`, `.cpu()`, `.numpy()`, `bool()`/`int()`/`float()` of a tensor).
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch

from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.data.folders import load_splits
from {{ cookiecutter.package_name }}.data.loaders import build_loader
from {{ cookiecutter.package_name }}.data.pipeline import read_plan
from {{ cookiecutter.package_name }}.data.transforms import Preprocessing
from {{ cookiecutter.package_name }}.data.unreadable import ReportingLoader
from {{ cookiecutter.package_name }}.loss import WeightedCrossEntropy
from {{ cookiecutter.package_name }}.metrics import new_confusion
from {{ cookiecutter.package_name }}.model import build_model
from {{ cookiecutter.package_name }}.processes import Processes
from {{ cookiecutter.package_name }}.training import epochs, loop, recipe, stopping
from {{ cookiecutter.package_name }}.training.hardware import Hardware

READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__")


class HostReads:
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


def stand_in_run(device: torch.device) -> types.SimpleNamespace:
    """What at_step_boundary reads of a Run: one process, no plugin, no signal and no periodic save due."""
    return types.SimpleNamespace(stop=stopping.StopRequest(), save_clock=stopping.SaveClock(0), device=device,
                                 plugins=[], processes=Processes())


def epoch_reads(data: Path, device: torch.device, batch_size: int, reads: HostReads | None = None, *,
                decode: str = "auto", plugins=()) -> int:
    """Host reads during one training epoch (with EMA and the step boundary) and one validation pass.

    The splits are read as a run reads them (data.pipeline.read_plan: uint8 out of the loader, made float on the
    device), with `plugins` changing that as train.py's would (`decode`: the run's --decode).
    """
    torch.manual_seed(0)
    cfg = TrainConfig(lr=1e-3, backbone_lr_scale=1.0, weight_decay=0.01, decode=decode)  # the real config
    train_set, val_set = load_splits(data, image_size=32)
    plan = read_plan(cfg, device, train_set, val_set, Preprocessing(32), plugins)
    assert plan.decode == ("device" if decode == "device" else "cpu")  # the path asked for is the one counted
    model = build_model("{{ cookiecutter.backbone }}", 4, pretrained=False, device=device)
    optimizer, ema = recipe.make_optimizer(model, cfg), recipe.make_ema(model, 0.9)
    loss_fn = WeightedCrossEntropy(torch.ones(4)).to(device)
    hw = Hardware.create(device, mean=(0.5,) * 3, std=(0.25,) * 3)
    train_loader, val_loader = (
        ReportingLoader(build_loader(plan.datasets[train], batch_size, device, train=train,
                                     collate_fn=plan.collate.get(train)), lambda path, reason: None)
        for train in (True, False))
    run = stand_in_run(device)
    before = reads.count if reads else 0
    after_step = lambda step, totals: epochs.at_step_boundary(run, None, 1, step, totals)  # noqa: E731
    stats = loop.train_one_epoch(model, loss_fn, optimizer, train_loader, hw, recipe=loop.StepRecipe(ema=ema),
                                 epoch=loop.EpochPlan(1, after_step=after_step, log_every=1000), progress=False)
    loop.evaluate(ema.module, loss_fn, val_loader, hw, progress=False, confusion=new_confusion(4, device))
    assert stats.images == len(train_set) and len(train_loader) == -(-len(train_set) // batch_size)
    return (reads.count if reads else 0) - before
