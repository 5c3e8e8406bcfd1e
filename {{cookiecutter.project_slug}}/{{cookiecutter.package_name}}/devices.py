"""Device resolution and device-aware helpers, importing only torch and the standard library.

Copy this file into any project. The rule it serves: decide the device once, at the edge
(`resolve_device`), then pass it down; modules read their device from their own tensors.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterator

import torch
from torch import nn

__all__ = [
    "DeviceError",
    "available_devices",
    "resolve_device",
    "describe_device",
    "module_device",
    "DeviceAwareMixin",
    "move_to",
]

_SPEC = re.compile(r"(cpu|cuda|mps|xpu|meta)(?::(\d+))?\Z")


class DeviceError(ValueError):
    """A device was asked for that is malformed or not present on this machine."""


def _backend_count(kind: str) -> int:
    """How many devices of one backend this machine has (0 when the backend is absent)."""
    if kind == "cuda":
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    if kind == "mps":
        mps = getattr(torch.backends, "mps", None)
        return 1 if mps is not None and mps.is_available() else 0
    if kind == "xpu":
        xpu = getattr(torch, "xpu", None)
        return xpu.device_count() if xpu is not None and xpu.is_available() else 0
    return 1  # cpu and meta always exist


def available_devices() -> list[str]:
    """The devices this machine can run on, accelerators first, e.g. ['cuda:0', 'cuda:1', 'cpu']."""
    found = []
    for kind in ("cuda", "mps", "xpu"):
        count = _backend_count(kind)
        found += ["mps"] if kind == "mps" and count else [f"{kind}:{i}" for i in range(count)]
    return found + ["cpu"]


def _auto() -> torch.device:
    """The best present device; under torchrun, this process's own GPU."""
    local_rank = os.environ.get("LOCAL_RANK")
    if _backend_count("cuda"):
        index = int(local_rank) if local_rank is not None else torch.cuda.current_device()
        return torch.device("cuda", index)
    for kind in ("mps", "xpu"):
        if _backend_count(kind):
            return torch.device(kind, 0) if kind == "xpu" else torch.device(kind)
    return torch.device("cpu")


def _parse(spec: str | int | torch.device) -> torch.device:
    """Turn a spec into a torch.device without checking that it exists."""
    if isinstance(spec, torch.device):
        return spec
    if isinstance(spec, bool) or not isinstance(spec, (int, str)):
        raise DeviceError(f"device must be a string, an int or a torch.device, not {type(spec).__name__} {spec!r}")
    if isinstance(spec, int):
        if spec < 0:
            raise DeviceError(f"device index must be >= 0, got {spec}")
        return torch.device("cuda", spec)
    match = _SPEC.match(spec.strip().lower())
    if not match:
        raise DeviceError(f"unknown device {spec!r}")
    kind, index = match.groups()
    return torch.device(kind, int(index)) if index is not None else torch.device(kind)


def _check_present(device: torch.device, spec: object) -> torch.device:
    """Return `device` with an explicit index, or raise if this machine lacks it."""
    count = _backend_count(device.type)
    if device.type in ("cpu", "meta", "mps"):
        if count == 0 or (device.index or 0) > 0:
            raise DeviceError(f"device {spec!r} is not available")
        return device
    if count == 0:
        raise DeviceError(f"device {spec!r} is not available: no {device.type.upper()} device found")
    index = device.index
    if index is None:  # bare "cuda" means the current device, made explicit
        index = torch.cuda.current_device() if device.type == "cuda" else torch.xpu.current_device()
    if index >= count:
        raise DeviceError(f"device {spec!r} is not available: only {count} {device.type} device(s)")
    return torch.device(device.type, index)


def resolve_device(spec: str | int | torch.device | None = "auto") -> torch.device:
    """Turn a user's device spec into a present, indexed torch.device, or raise DeviceError.

    An explicit request is never downgraded. For `cuda:N` the current CUDA device becomes N
    before any CUDA work, so no context, pinned-memory thread or cuDNN handle lands on cuda:0.
    """
    if spec is None or (isinstance(spec, str) and spec.strip().lower() == "auto"):
        device = _auto()
    else:
        try:
            device = _check_present(_parse(spec), spec)
        except DeviceError as error:
            raise DeviceError(f"{error}; available: {', '.join(available_devices())}") from None
    if device.type == "cuda":
        torch.cuda.set_device(device)
    elif device.type == "xpu":
        torch.xpu.set_device(device)
    return device


def describe_device(device: torch.device) -> str:
    """A short human name, e.g. 'cuda:1 (NVIDIA H100 80GB HBM3)' or 'cpu'."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    if device.type == "xpu":
        return f"{device} ({torch.xpu.get_device_name(device)})"
    return str(device)


def _tensors(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Every parameter and buffer of a module with its dotted name."""
    yield from module.named_parameters()
    yield from ((name, buf) for name, buf in module.named_buffers() if buf is not None)


def module_device(module: nn.Module) -> torch.device:
    """The one device holding every parameter and buffer of `module`.

    Raises DeviceError naming a few tensors per device when they are split. A module with
    no tensors at all has no device of its own: that is answered with cpu, where PyTorch
    creates tensors by default.
    """
    by_device: dict[torch.device, list[str]] = {}
    for name, tensor in _tensors(module):
        by_device.setdefault(tensor.device, []).append(name)
    if not by_device:
        return torch.device("cpu")
    if len(by_device) > 1:
        parts = "; ".join(f"{dev}: {', '.join(names[:3])}" + (" ..." if len(names) > 3 else "")
                          for dev, names in by_device.items())
        raise DeviceError(f"{type(module).__name__} is split across devices ({parts})")
    return next(iter(by_device))


class DeviceAwareMixin:
    """Gives an nn.Module `.device` and `.dtype` read from its own tensors (no dummy parameter)."""

    @property
    def device(self) -> torch.device:
        """Where this module's tensors live."""
        return module_device(self)  # type: ignore[arg-type]

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of this module's floating-point parameters (float32 when it has none)."""
        for _, tensor in _tensors(self):  # type: ignore[arg-type]
            if tensor.is_floating_point():
                return tensor.dtype
        return torch.float32


def move_to(obj: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """Move every tensor inside nested dicts, lists, tuples and namedtuples to `device`."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, dict):
        return type(obj)((k, move_to(v, device, non_blocking)) for k, v in obj.items())
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(move_to(v, device, non_blocking) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(move_to(v, device, non_blocking) for v in obj)
    return obj
