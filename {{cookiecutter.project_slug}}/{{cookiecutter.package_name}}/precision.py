"""Precision policy: which autocast dtype to use, and whether a GradScaler is needed."""

from __future__ import annotations

import contextlib
import dataclasses

import torch

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class PrecisionError(ValueError):
    """The requested precision cannot run on the chosen device."""


@dataclasses.dataclass(frozen=True)
class PrecisionPolicy:
    """How a run computes: autocast dtype (None for fp32) and gradient scaling."""

    name: str
    device: torch.device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype autocast computes matmuls and convolutions in."""
        return DTYPES[self.name]

    @property
    def uses_scaler(self) -> bool:
        """fp16 gradients underflow without loss scaling; bf16 has fp32's range and needs none."""
        return self.name == "fp16" and self.device.type == "cuda"

    def autocast(self) -> contextlib.AbstractContextManager:
        """The autocast context for a forward pass (a no-op for fp32)."""
        if self.name == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """A GradScaler that is enabled only where it is needed."""
        return torch.amp.GradScaler(self.device.type, enabled=self.uses_scaler)


def make_policy(name: str, device: torch.device) -> PrecisionPolicy:
    """Check that `name` can run on `device` and return its policy."""
    if name not in DTYPES:
        raise PrecisionError(f"unknown precision {name!r}; choose one of {', '.join(DTYPES)}")
    if name == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise PrecisionError(f"bf16 is not supported on {device} ({torch.cuda.get_device_name(device)}); use fp16 or fp32")
    return PrecisionPolicy(name, device)
