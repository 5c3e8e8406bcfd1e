"""Wrapping for several devices, and unwrapping so that checkpoints never see the wrappers."""

from __future__ import annotations

import os

from torch import nn


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside DataParallel, DistributedDataParallel and torch.compile wrappers."""
    while True:
        if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
            model = model.module
        elif hasattr(model, "_orig_mod"):  # torch.compile's OptimizedModule
            model = model._orig_mod
        else:
            return model


def rank() -> int:
    """This process's global rank under torchrun (0 when not distributed)."""
    return int(os.environ.get("RANK", 0))


def is_main_process() -> bool:
    """Only rank 0 prints progress and writes files."""
    return rank() == 0
