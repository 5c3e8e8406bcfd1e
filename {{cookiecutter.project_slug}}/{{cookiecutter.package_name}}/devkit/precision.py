"""Precision policy: which autocast dtype to use, whether a GradScaler is needed, half inference.

- fp32: no autocast.
- bf16: autocast to bfloat16; fp32's exponent range, so no loss scaling. CPUs run it too.
- fp16: autocast to float16 with a GradScaler on CUDA, where small gradients would underflow.
The loss is always computed in float32 (the loss module upcasts the logits).
An explicit request that cannot run stops with PrecisionError (exit 2); the template's default
precision, when it cannot run on this device, falls back to fp32 with a note.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import warnings

import torch
from torch import nn

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class PrecisionError(ValueError):
    """The requested precision cannot run on the chosen device (a ValueError, so the kit stands alone)."""


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


def _autocast_works(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether autocast on this device type accepts `dtype` (torch warns and disables it if not)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.autocast(device_type=device.type, dtype=dtype):
                pass
        except RuntimeError:
            return False
    return not any("not supported" in str(w.message) or "disabl" in str(w.message).lower() for w in caught)


def why_not(name: str, device: torch.device) -> str | None:
    """Why precision `name` cannot run on `device`, or None when it can."""
    if name not in DTYPES:
        return f"unknown precision {name!r}; choose one of {', '.join(DTYPES)}"
    if name == "fp32":
        return None
    if not _autocast_works(device, DTYPES[name]):
        return f"{name} autocast is not supported on {device.type}"
    if name == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return f"bf16 is not supported on {device} ({torch.cuda.get_device_name(device)})"
    return None


def make_policy(name: str, device: torch.device) -> PrecisionPolicy:
    """Check that `name` can run on `device` and return its policy."""
    reason = why_not(name, device)
    if reason:
        raise PrecisionError(f"{reason}; use {'fp16 or fp32' if name == 'bf16' else 'fp32'}")
    return PrecisionPolicy(name, device)


def resolve_precision(requested: str | None, default: str, device: torch.device) -> tuple[str, str | None]:
    """The precision to run and a note for the user when the default fell back to fp32.

    An explicit request is honoured or refused (PrecisionError); a default that cannot run falls back.
    """
    if requested is not None:
        make_policy(requested, device)  # raises PrecisionError with the reason
        return requested, None
    reason = why_not(default, device)
    if reason is None:
        return default, None
    return "fp32", f"precision: {reason}; running in fp32"


def half_copy(model: nn.Module) -> nn.Module:
    """A float16 copy of `model` for inference; the caller's model is left in float32.

    Feed it inputs of its dtype: `images.to(device, dtype=torch.float16)`.
    """
    return copy.deepcopy(model).to(dtype=torch.float16)
