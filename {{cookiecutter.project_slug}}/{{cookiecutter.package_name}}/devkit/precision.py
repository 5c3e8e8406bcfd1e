# devicelint: device-module -- naming devices is this file's job
"""Precision policy: which autocast dtype to use, whether a GradScaler is needed, half inference.

- fp32: no autocast.
- bf16: autocast to bfloat16; fp32's exponent range, so no loss scaling. A CPU runs it natively
  only with AVX512_BF16 or AMX (x86) or the bf16 extension (Arm); elsewhere torch emulates it,
  about 9x slower than fp32 (measured: 106 img/s fp32 vs 12 img/s bf16 on an AVX2-only EPYC).
- fp16: autocast to float16 with a GradScaler on CUDA, XPU and MPS, where small gradients would underflow.
- On Apple's MPS (the versions accelerate checks, huggingface/accelerate#3373): fp16 autocast needs torch 2.5,
  its GradScaler torch 2.8, bf16 autocast torch 2.6 and macOS 14; older ones are refused by name, or a
  default falls back, before anything runs (they would fail inside the first step).
The loss is always computed in float32 (the loss module upcasts the logits).
- fp16 on a CPU: autocast works, but without AVX512_FP16 or AMX-FP16 it is emulated, about 25x slower
  than fp32 (measured: a ResNet-18 step on 32 images of 64 px, one thread, on an EPYC with AVX512_BF16:
  12 img/s fp32, 0.5 img/s fp16, 28 img/s bf16).
An explicit request that cannot run stops with PrecisionError (exit 2); one the hardware only emulates
runs with a note of the cost. The template's default precision, when it cannot run on this device,
or only emulated, falls back (fp16 on MPS to bf16, otherwise to fp32) with a note.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import platform
import warnings

import torch
from torch import nn

from .spelling import PrecisionError

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
SCALED = ("cuda", "xpu", "mps")  # where fp16 trains with a GradScaler (MPS from torch 2.8: mps_rule)
_CPU_BF16_FLAGS = {"avx512_bf16", "amx_bf16", "bf16"}  # /proc/cpuinfo: x86 AVX512_BF16 / AMX, Arm's bf16
_CPU_FP16_FLAGS = {"avx512_fp16", "amx_fp16", "asimdhp"}  # x86 AVX512_FP16 / AMX-FP16, Arm's half-precision SIMD


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
        return self.name == "fp16" and self.device.type in SCALED

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


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them in /proc/cpuinfo; empty where the OS does not say."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            lines = [line for line in cpuinfo if line.startswith(("flags", "Features"))]
    except OSError:
        return frozenset()
    return frozenset(lines[0].split(":", 1)[1].split()) if lines else frozenset()


def cpu_bf16_native() -> bool | None:
    """Whether this CPU computes bf16 in hardware (AVX512_BF16, AMX or Arm's bf16); None when it cannot be told."""
    flags = cpu_flags()
    return bool(flags & _CPU_BF16_FLAGS) if flags else None


def cpu_fp16_native() -> bool | None:
    """Whether this CPU computes fp16 in hardware (AVX512_FP16, AMX-FP16 or Arm's fp16); None when it cannot be told."""
    flags = cpu_flags()
    return bool(flags & _CPU_FP16_FLAGS) if flags else None


def why_emulated(name: str, device: torch.device) -> str | None:
    """Why precision `name` runs only emulated (and slowly) on `device`, or None when it runs natively."""
    if name == "bf16" and device.type == "cpu" and cpu_bf16_native() is False:
        return "bf16 is emulated on this CPU (no AVX512_BF16 or AMX), about 9x slower than fp32"
    if name == "fp16" and device.type == "cpu" and not cpu_fp16_native():
        return "fp16 is emulated on this CPU (no AVX512_FP16 or AMX-FP16), about 25x slower than fp32"
    return None


def torch_release() -> tuple[int, int]:
    """This torch's (major, minor) release."""
    return tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])


def macos_release() -> tuple[int, int] | None:
    """This Mac's (major, minor) macOS release; None off macOS."""
    version = platform.mac_ver()[0]
    return tuple(int(part) for part in (version.split(".") + ["0"])[:2]) if version else None


def mps_rule(name: str) -> str | None:
    """Why `name` cannot train on MPS with this torch and macOS (fp16 needs autocast from 2.5 and the GradScaler
    from 2.8; bf16 needs 2.6 and macOS 14), or None when it can."""
    if name == "fp16" and torch_release() < (2, 8):
        return ("fp16 training (autocast from 2.5, its GradScaler from 2.8) on mps needs torch 2.8+, "
                f"this is {torch.__version__}")
    if name == "bf16" and torch_release() < (2, 6):
        return f"bf16 autocast on mps needs torch 2.6+, this is {torch.__version__}"
    macos = macos_release()
    if name == "bf16" and macos is not None and macos < (14, 0):
        return f"bf16 on mps needs macOS 14+, this Mac runs {'.'.join(map(str, macos))}"
    return None


def why_not(name: str, device: torch.device) -> str | None:
    """Why precision `name` cannot run on `device`, or None when it can."""
    if name not in DTYPES:
        return f"unknown precision {name!r}; choose one of {', '.join(DTYPES)}"
    if name == "fp32":
        return None
    # Before the autocast probe: CUDA autocast disables itself (with a warning) on such a card.
    if name == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return f"bf16 is not supported on {device} ({torch.cuda.get_device_name(device)})"
    if device.type == "mps" and mps_rule(name):
        return mps_rule(name)
    if not _autocast_works(device, DTYPES[name]):
        return f"{name} autocast is not supported on {device.type}"
    return None


def make_policy(name: str, device: torch.device) -> PrecisionPolicy:
    """Check that `name` can run on `device` and return its policy."""
    reason = why_not(name, device)
    if reason:  # naming the precisions that can run here instead
        others = [other for other in ("bf16", "fp16") if other != name and not why_not(other, device)]
        raise PrecisionError(f"{reason}; use {' or '.join([*others, 'fp32'])}")
    return PrecisionPolicy(name, device)


def resolve_precision(requested: str | None, default: str, device: torch.device) -> tuple[str, str | None]:
    """The precision to run and a note for the user: the default fell back, or the request runs emulated.

    An explicit request is honoured (with a note of the cost where it is only emulated) or refused
    (PrecisionError); a default that cannot run, or only emulated, falls back: fp16 on MPS to bf16, else fp32.
    """
    if requested is not None:
        make_policy(requested, device)  # raises PrecisionError with the reason
        emulated = why_emulated(requested, device)
        return requested, f"precision: {emulated}; --precision fp32 runs natively" if emulated else None
    reason = why_not(default, device) or why_emulated(default, device)
    if reason is None:
        return default, None
    # fp16 on MPS falls back to bf16 (a GPU's half precision); on a CPU to fp32, the precision it was written for
    native_bf16 = not (why_not("bf16", device) or why_emulated("bf16", device))
    fallback = "bf16" if default == "fp16" and device.type != "cpu" and native_bf16 else "fp32"
    return fallback, f"precision: {reason}; running in {fallback}"


def half_copy(model: nn.Module) -> nn.Module:
    """A float16 copy of `model` for inference; the caller's model is left in float32.

    Feed it inputs of its dtype: `images.to(device, dtype=torch.float16)`.
    """
    return copy.deepcopy(model).to(dtype=torch.float16)
