# devicelint: device-module -- naming devices is this file's job
"""What this machine has: the accelerator backends, the devices they count, and the error for a bad device.

The base of the device kit: every other devkit module imports from here, and this module from
torch and the standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from .spelling import INDEXED, KINDS, DeviceError  # noqa: F401 -- the kit's modules import these from here too


def backend_module(kind: str) -> Any:
    """torch.cuda or torch.xpu: the backends with a 'current device'; None for the others."""
    return {"cuda": torch.cuda, "xpu": torch.xpu}.get(kind)

def _accelerator_api() -> Any:
    """torch.accelerator (torch 2.6+), which knows this build's accelerator; None on older torch."""
    api = getattr(torch, "accelerator", None)
    return api if api is not None and hasattr(api, "current_accelerator") else None

def _probed_count(kind: str) -> int:
    """How many devices of one accelerator kind, asking its own backend (torch before 2.6)."""
    if kind == "mps":
        return int(torch.backends.mps.is_available())
    backend = backend_module(kind)  # torch.cuda and torch.xpu are there from torch 2.4 on, in every build
    return backend.device_count() if backend.is_available() else 0

def accelerator_kind() -> str | None:
    """This machine's accelerator ('cuda', 'mps', 'xpu'), None without one: torch.accelerator's answer where
    torch has it, else the first backend that finds a device."""
    api = _accelerator_api()
    if api is not None:
        kind = api.current_accelerator().type if api.is_available() else None
        return kind if kind in INDEXED else None
    return next((kind for kind in ("cuda", "mps", "xpu") if _probed_count(kind)), None)

def backend_count(kind: str) -> int:
    """How many devices of one kind this machine has (0 when the backend is absent)."""
    if kind not in INDEXED:
        return 1  # cpu and meta always exist
    api = _accelerator_api()
    if api is None:
        return _probed_count(kind)
    if accelerator_kind() != kind:
        return 0
    return 1 if kind == "mps" else api.device_count()

def available_devices() -> list[str]:
    """The devices this machine can run on, accelerators first, e.g. ['cuda:0', 'cuda:1', 'cpu']."""
    found = []
    for kind in ("cuda", "mps", "xpu"):
        count = backend_count(kind)
        found += ["mps"] if kind == "mps" and count else [f"{kind}:{i}" for i in range(count)]
    return found + ["cpu"]

def pins_memory(device: torch.device) -> bool:
    """Whether batches for `device` should come from pinned host memory: for a CUDA or XPU device.

    DataLoader(pin_memory=True) pins for the current accelerator (no pin_memory_device needed);
    pinning is wasted work (and a warning) for the CPU, meta and MPS, which shares host memory.
    """
    return device.type in ("cuda", "xpu")

def show(spec: object) -> str:
    """The spec as it goes into a one-line error message."""
    text = repr(str(spec)) if isinstance(spec, torch.device) else repr(spec)
    text = " ".join(line.strip() for line in text.splitlines())  # some reprs (tensors) span lines
    return text if len(text) <= 60 else text[:57] + "..."

def format_bytes(count: float) -> str:
    """1536 -> '1.5 KiB'; exact below 1 KiB."""
    for unit in ("B", "KiB", "MiB"):
        if count < 1024:
            return f"{count} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"

def format_table(rows: list[tuple[str, ...]], right: Iterable[int] = ()) -> str:
    """Rows as aligned text; the columns numbered in `right` are right-aligned (numbers)."""
    right = set(right)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.rjust(width) if i in right else cell.ljust(width)
                               for i, (cell, width) in enumerate(zip(row, widths))).rstrip()
                     for row in rows)
