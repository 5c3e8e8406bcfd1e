# devicelint: device-module -- naming devices is this file's job
"""Which physical GPU each cuda:N is (name, memory, UUID, PCI bus id), read without squatting on it."""

from __future__ import annotations

import ctypes
import dataclasses
import os
from typing import Any

import torch

from .backends import backend_count


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    """What identifies one visible CUDA device, as nvidia-smi shows it, and its memory in bytes."""

    device: torch.device
    name: str
    total_memory: int
    free_memory: int
    uuid: str  # 'GPU-5e3f...', as nvidia-smi -L prints it
    pci_bus_id: str  # '00000000:65:00.0', as nvidia-smi prints it; '-' when torch cannot tell
    visible_as: str | None  # this index's entry in CUDA_VISIBLE_DEVICES; None when that is unset

def uuid_of(index: int) -> str:
    """The GPU's UUID in nvidia-smi's form ('-' where torch does not report it: torch 2.4)."""
    return _uuid(torch.cuda.get_device_properties(index))

def _uuid(props: Any) -> str:
    """nvidia-smi's 'GPU-...' from the device properties; torch prints it without the 'GPU-' prefix."""
    uuid = getattr(props, "uuid", None)  # torch 2.4's properties have none: the start must not crash there
    return "-" if uuid is None else f"GPU-{uuid}"

def _pci_bus_id(props: Any) -> str:
    """nvidia-smi's 'domain:bus:device.function' from the device properties ('-' on older torch)."""
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    return "-" if None in parts else "{:08X}:{:02X}:{:02X}.0".format(*parts)

def _nvml_memory(uuid: str) -> tuple[int, int] | None:
    """(free, total) bytes from NVML, which opens no CUDA context; None where NVML is missing or fails.

    torch.cuda.mem_get_info needs a CUDA context on the device it asks about, a few hundred MiB held
    for the life of the process: asking every GPU that way would squat on each of them.
    """
    try:
        nvml = ctypes.CDLL("nvml.dll" if os.name == "nt" else "libnvidia-ml.so.1")
    except OSError:
        return None

    class Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    handle, memory = ctypes.c_void_p(), Memory()
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        found = nvml.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(handle)) == 0
        if not found or nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != 0:
            return None
        return memory.free, memory.total
    finally:
        nvml.nvmlShutdown()

def free_memory(index: int) -> int:
    """Free bytes on cuda:index: NVML when present, else torch.cuda.mem_get_info (opens a context)."""
    uuid = uuid_of(index)
    from_nvml = _nvml_memory(uuid) if uuid != "-" else None
    return from_nvml[0] if from_nvml else torch.cuda.mem_get_info(index)[0]

def gpu_info(index: int) -> GpuInfo:
    """Name, memory, UUID, PCI bus id and CUDA_VISIBLE_DEVICES entry of the visible GPU cuda:index."""
    props = torch.cuda.get_device_properties(index)
    visible = [entry.strip() for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    return GpuInfo(torch.device("cuda", index), props.name, props.total_memory, free_memory(index),
                   _uuid(props), _pci_bus_id(props),
                   visible[index] if "CUDA_VISIBLE_DEVICES" in os.environ and index < len(visible) else None)

def device_identity(device: torch.device) -> dict[str, Any] | None:
    """What config.json records of a CUDA device: name, total memory, UUID, PCI bus id; None elsewhere."""
    if device.type != "cuda" or device.index is None:
        return None
    info = dataclasses.asdict(gpu_info(device.index))
    del info["free_memory"]  # a moment's value, not an identity
    return {**info, "device": str(device)}

def index_order_warning() -> str | None:
    """One line when cuda:N may not be nvidia-smi's GPU N (several GPUs, CUDA_DEVICE_ORDER not PCI_BUS_ID)."""
    if backend_count("cuda") < 2 or os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        return None
    return ("warning: CUDA_DEVICE_ORDER is not PCI_BUS_ID, so cuda:N may differ from nvidia-smi's GPU N; "
            "match them by UUID or PCI bus id, or export CUDA_DEVICE_ORDER=PCI_BUS_ID")
