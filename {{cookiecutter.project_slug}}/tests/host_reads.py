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

from {{ cookiecutter.package_name }}.config import config_class
from {{ cookiecutter.package_name }}.data.folders import load_splits
from {{ cookiecutter.package_name }}.data.loaders import build_loader
from {{ cookiecutter.package_name }}.data.pipeline import read_plan
from {{ cookiecutter.package_name }}.data.transforms import Preprocessing
from {{ cookiecutter.package_name }}.data.unreadable import ReportingLoader
from {{ cookiecutter.package_name }}.model import build_model
from {{ cookiecutter.package_name }}.processes import Processes
from {{ cookiecutter.package_name }}.task import Metrics, WeightedCrossEntropy
from {{ cookiecutter.package_name }}.training import epochs, loop, optimization, stopping
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


def stand_in_run(device: torch.device, plugins=(), **parts) -> types.SimpleNamespace:
    """What at_step_boundary reads of a Run (one process, no signal and no periodic save due), with `plugins` and
    the `parts` of a Run that their hooks read (model, cfg, loaders, ...)."""
    return types.SimpleNamespace(stop=stopping.StopRequest(), save_clock=stopping.SaveClock(0), device=device,
                                 plugins=list(plugins), processes=Processes(), parameter_groups=None, mix=None,
                                 **parts)


def epoch_reads(data: Path, device: torch.device, batch_size: int, reads: HostReads | None = None, *,
                decode: str = "auto", plugins=(), **settings) -> int:
    """Host reads during one training epoch (with the step boundary) and one validation pass.

    The splits are read as a run reads them (data.pipeline.read_plan: uint8 out of the loader, made float on the
    device), with `plugins` changing that and the step as train.py's would (`decode`: the run's --decode;
    `settings`: the plugins' own, e.g. ema=0.9).
    """
    torch.manual_seed(0)
    cfg = config_class(plugins)(lr=1e-3, weight_decay=0.01, decode=decode, **settings)  # the real config
    train_set, val_set = load_splits(data, image_size=32)
    plan = read_plan(cfg, device, train_set, val_set, Preprocessing(32), plugins)
    assert plan.decode == ("device" if decode == "device" else "cpu")  # the path asked for is the one counted
    model = build_model("{{ cookiecutter.backbone }}", 4, pretrained=False, device=device)
    loss_fn = WeightedCrossEntropy(torch.ones(4)).to(device)
    hw = Hardware.create(device, mean=(0.5,) * 3, std=(0.25,) * 3)
    train_loader, val_loader = (
        ReportingLoader(build_loader(plan.datasets[train], batch_size, device, train=train,
                                     collate_fn=plan.collate.get(train)), lambda path, reason: None)
        for train in (True, False))
    run = stand_in_run(device, plugins, model=model, cfg=cfg, class_names=list("abcd"), loss_fn=loss_fn, hw=hw,
                       val_loader=val_loader)
    for plugin in plugins:
        plugin.build(run)
    optimizer = optimization.make_optimizer(model, cfg, run.parameter_groups)
    before = reads.count if reads else 0
    after_step = lambda step, totals: epochs.at_step_boundary(run, None, 1, step, totals)  # noqa: E731
    stats = loop.train_one_epoch(model, loss_fn, optimizer, train_loader, hw, recipe=loop.StepRecipe(mix=run.mix),
                                 epoch=loop.EpochPlan(1, after_step=after_step, log_every=1000), progress=False)
    loop.evaluate(model, loss_fn, val_loader, hw, progress=False, metrics=Metrics(4, device))
    for plugin in plugins:
        plugin.validated(run, {})  # other weights validated too (the fine_tuning answer's EMA)
    assert stats.images == len(train_set) and len(train_loader) == -(-len(train_set) // batch_size)
    return (reads.count if reads else 0) - before
