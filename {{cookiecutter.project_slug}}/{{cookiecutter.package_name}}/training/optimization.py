"""The optimizer (--optimizer) and the learning-rate schedule (--schedule, with --warmup-epochs), by name.

Each is a registry: add an entry to OPTIMIZERS or SCHEDULES and it becomes a --optimizer or --schedule
choice, with its defaults in --help, saved in the checkpoint's config and refused as a change on
--resume (it changes what is trained). The schedule is a factor of each group's base learning rate,
counted in optimizer steps but defined in epochs (warmup epochs, a step every --step-epochs epochs,
cosine over the run's epochs), so it is rebuilt from the run as it now is: a resume with more epochs
or another number of ranks (other steps per epoch) continues at the same point of its epochs, and
the schedule spans the epochs the run now has. Only the position is carried over (`position`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch
from torch import nn
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

from ..config import OPTIMIZER_DEFAULTS
from ..devkit import module_device


@dataclasses.dataclass(frozen=True)
class OptimizerChoice:
    """One --optimizer: how to build it over the parameter groups, and its own default lr and weight decay."""

    build: Callable[[list[dict], object, bool | None], torch.optim.Optimizer]  # (groups, cfg, fused) -> optimizer
    lr: float
    weight_decay: float


def _adamw(groups: list[dict], cfg, fused: bool | None) -> torch.optim.Optimizer:
    return torch.optim.AdamW(groups, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused)


def _sgd(groups: list[dict], cfg, fused: bool | None) -> torch.optim.Optimizer:
    return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov,
                           weight_decay=cfg.weight_decay, fused=fused)


OPTIMIZERS = {  # their defaults in config.py, where --help reads them before torch loads
    "adamw": OptimizerChoice(_adamw, **OPTIMIZER_DEFAULTS["adamw"]),
    "sgd": OptimizerChoice(_sgd, **OPTIMIZER_DEFAULTS["sgd"]),  # with --momentum (0.9) and --nesterov
}


def make_optimizer(model: nn.Module, cfg, groups: list[dict] | None = None) -> torch.optim.Optimizer:
    """cfg.optimizer over `groups` (None: every parameter of `model` at cfg.lr), fused where the device has the
    kernel."""
    # Fused: one kernel for all parameters, its step counts stay on the device (the for-loop version reads
    # each back with .item()), and GradScaler hands it found_inf instead of reading it back every step.
    fused = module_device(model).type in _get_fused_kernels_supported_devices()
    return OPTIMIZERS[cfg.optimizer].build(groups or [{"params": list(model.parameters())}], cfg, fused or None)


def optimizer_steps_per_epoch(batches_per_epoch: int, accum_steps: int) -> int:
    """Optimizer steps in an epoch of `batches_per_epoch` batches grouped `accum_steps` at a time."""
    return math.ceil(batches_per_epoch / accum_steps)


def _cosine(factor: LrFactor, step: int) -> float:
    """Half a cosine from 1 after the warmup to 0 at the run's last step."""
    progress = (step - factor.warmup_steps) / max(factor.total_steps - factor.warmup_steps, 1)
    return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


def _step(factor: LrFactor, step: int) -> float:
    """Multiplied by --step-gamma every --step-epochs epochs, at epoch boundaries."""
    return factor.step_gamma ** (step // max(factor.step_epochs * factor.steps_per_epoch, 1))


def _constant(factor: LrFactor, step: int) -> float:
    """The base learning rate throughout (after the warmup)."""
    return 1.0


SCHEDULES: dict[str, Callable[[LrFactor, int], float]] = {"cosine": _cosine, "step": _step, "constant": _constant}


class LrFactor:
    """Learning-rate factor after `step` optimizer steps: linear warmup from 1/warmup to 1, then the schedule.

    A callable object of plain numbers rather than a closure, so LambdaLR's state_dict holds values a
    weights_only checkpoint can carry.
    """

    def __init__(self, cfg, steps_per_epoch: int):
        self.schedule, self.step_epochs, self.step_gamma = cfg.schedule, cfg.step_epochs, cfg.step_gamma
        self.steps_per_epoch, self.warmup_steps = steps_per_epoch, cfg.warmup_epochs * steps_per_epoch
        self.total_steps = max(cfg.epochs * steps_per_epoch, 1)

    def __call__(self, step: int) -> float:
        """The factor applied to each group's base learning rate after `step` optimizer steps."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        return SCHEDULES[self.schedule](self, step)


def make_scheduler(optimizer: torch.optim.Optimizer, cfg, steps_per_epoch: int) -> torch.optim.lr_scheduler.LambdaLR:
    """A per-step LambdaLR for cfg.schedule after --warmup-epochs, over cfg.epochs epochs of `steps_per_epoch`."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, LrFactor(cfg, steps_per_epoch))


def restore_position(scheduler: torch.optim.lr_scheduler.LambdaLR, saved: dict, steps_done: int) -> None:
    """Load a checkpoint's scheduler state but keep this run's schedule, and stand at `steps_done` steps of it.

    The saved factors describe the old run (its epochs, its steps per epoch): they are dropped, so the
    schedule is the one built for the run as it now is. The learning rates are what that schedule
    gives after `steps_done` optimizer steps, computed as LambdaLR.step computes them (bit-exact).
    """
    scheduler.load_state_dict({**saved, "lr_lambdas": [None] * len(scheduler.lr_lambdas)})
    scheduler.last_epoch = steps_done
    rates = [base_lr * factor(steps_done) for factor, base_lr in zip(scheduler.lr_lambdas, scheduler.base_lrs,
                                                                      strict=True)]
    for group, lr in zip(scheduler.optimizer.param_groups, rates, strict=True):
        group["lr"] = lr
    scheduler._last_lr = [group["lr"] for group in scheduler.optimizer.param_groups]
