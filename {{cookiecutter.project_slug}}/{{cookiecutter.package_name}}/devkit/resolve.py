# devicelint: device-module -- naming devices is this file's job
"""Turning a user's device spec into a present, indexed torch.device: decided once, never downgraded.

    resolve_device("auto")          first of cuda, mps, xpu, cpu; under torchrun this process's GPU
    resolve_device("auto:free:8GiB") the GPU with the most free memory, at least 8 GiB
    resolve_device("cuda:1")        cuda:1, made the current device; DeviceError if absent
    resolve_device("GPU-5e3f")      the visible GPU with that UUID (as nvidia-smi -L names it)
"""

from __future__ import annotations

import operator
import os
import warnings

import torch

from .backends import (
    INDEXED,
    KINDS,
    DeviceError,
    accelerator_kind,
    available_devices,
    backend_count,
    backend_module,
    format_bytes,
    show,
)
from .gpus import free_memory, gpu_info, uuid_of
from .spelling import AUTO_FREE as _AUTO_FREE
from .spelling import UNITS as _UNITS
from .spelling import UUID as _UUID

_TABLE = f"python -m {__package__}"  # the device table, which lists the GPUs' UUIDs
_WHY: dict[torch.device, str] = {}  # why the last resolve_device call chose its device, for describe_device


def _parse(spec: object) -> torch.device:
    """Turn a spec into a torch.device without checking that this machine has it."""
    if isinstance(spec, torch.device):
        return spec
    if isinstance(spec, str):
        try:  # torch's own parser: it refuses 'cuda:01', 'cuda 1' and '' (a kind it knows but we do not: below)
            with warnings.catch_warnings():  # a kind torch deprecates ('mkldnn') is refused here, in one line
                warnings.simplefilter("ignore")
                return torch.device(spec.strip().lower())
        except RuntimeError:
            raise DeviceError(f"unknown device {show(spec)}") from None
    try:  # bool is an int to Python but never a device; numpy integers pass, floats do not
        if isinstance(spec, (bool, torch.Tensor)):
            raise TypeError
        index = operator.index(spec)
    except TypeError:
        wrong = f"{type(spec).__name__} {show(spec)}"
        raise DeviceError(f"a device is a str, an int or a torch.device, not {wrong}") from None
    if index < 0:
        raise DeviceError(f"device index {show(spec)} is negative")
    # Like torch, an int means an index of the machine's accelerator.
    return torch.device("xpu" if accelerator_kind() == "xpu" else "cuda", index)

def _check_present(device: torch.device, spec: object) -> torch.device:
    """`device` as tensors there report it (accelerators indexed), or DeviceError if absent."""
    kind = device.type
    if kind not in KINDS:
        raise DeviceError(f"unknown device {show(spec)}")
    count = backend_count(kind)
    if count == 0:
        raise DeviceError(f"device {show(spec)} is not available: no {kind.upper()} device found")
    index = device.index
    if index is None:  # bare 'cuda' means the current device, made explicit
        index = backend_module(kind).current_device() if backend_module(kind) else 0
    if index >= count:
        raise DeviceError(f"device {show(spec)} is not available: only {count} {kind} device(s)")
    return torch.device(kind, index) if kind in INDEXED else torch.device(kind)

def _auto() -> torch.device:
    """This machine's accelerator (accelerator_kind: cuda, mps or xpu), else cpu; under torchrun, this process's GPU."""
    kind, local_rank = accelerator_kind(), os.environ.get("LOCAL_RANK")
    if kind is None:
        return torch.device("cpu")
    if local_rank is None or kind == "mps":
        return _check_present(torch.device(kind), "auto")
    if not local_rank.strip().isdecimal():  # isdigit() passes "²", which int() refuses
        raise DeviceError(f"auto: LOCAL_RANK={local_rank!r} is not a device index")
    return _check_present(torch.device(kind, int(local_rank)), f"{kind}:{int(local_rank)}")

def _min_free(spec: str) -> int:
    """The minimum free bytes an 'auto:free[:SIZE]' spec asks for (0 without SIZE)."""
    match = _AUTO_FREE.match(spec.strip().lower())
    if not match or (match.group(1) and match.group(2) not in _UNITS):
        raise DeviceError(f"unknown device {show(spec)}: auto:free takes a minimum such as auto:free:8GiB")
    number, unit = match.groups()
    return int(float(number) * _UNITS[unit]) if number else 0

def _auto_free(min_free: int) -> tuple[torch.device, str | None]:
    """The CUDA device with the most free memory (at least `min_free`), and why; like auto without CUDA.

    Under torchrun, LOCAL_RANK decides as for auto: every rank must train on its own GPU.
    """
    count = backend_count("cuda")
    if count == 0:
        return _auto(), None  # no GPU to choose between: mps, xpu or cpu, as for auto
    torchrun = os.environ.get("LOCAL_RANK") is not None
    candidates = [_auto().index] if torchrun else list(range(count))
    free = {index: free_memory(index) for index in candidates}
    best = max(free, key=lambda index: (free[index], -index))  # ties go to the lower index
    listed = ", ".join(f"cuda:{index} {format_bytes(free[index])}" for index in free)
    if free[best] < min_free:
        raise DeviceError(f"auto:free: no CUDA device has {format_bytes(min_free)} free ({listed} free)")
    why = "LOCAL_RANK decides under torchrun" if torchrun else "most free memory"
    return torch.device("cuda", best), f"auto:free: {why} ({listed} free)"

def _by_uuid(spec: str) -> torch.device:
    """The visible GPU whose UUID is, or starts with, `spec` (as CUDA_VISIBLE_DEVICES matches them)."""
    wanted = spec.strip().lower()
    matches = [index for index in range(backend_count("cuda")) if uuid_of(index).lower().startswith(wanted)]
    if len(matches) != 1:
        problem = "matches several GPUs" if matches else "is not the UUID of a visible GPU"
        raise DeviceError(f"device {show(spec)} {problem} ({_TABLE} lists them)")
    return torch.device("cuda", matches[0])

def _choose(spec: object) -> tuple[torch.device, str | None]:
    """The device `spec` names on this machine, and why when it was a choice among several."""
    text = spec.strip().lower() if isinstance(spec, str) else ""  # any case, any surrounding space
    if spec is None or text == "auto":
        return _auto(), None
    if text.startswith("auto:free"):
        return _auto_free(_min_free(spec))
    if _UUID.match(text):
        return _by_uuid(spec), None
    return _check_present(_parse(spec), spec), None

def resolve_device(spec: str | int | torch.device | None = "auto") -> torch.device:
    """Turn a user's device spec into a present, indexed torch.device, or raise DeviceError.

    Accepts 'auto' or None, 'auto:free[:MIN]', 'cpu', 'cuda', 'cuda:N', a GPU UUID ('GPU-5e3f...'),
    'mps', 'xpu[:N]', 'meta' (for tests), a torch.device or an int (an accelerator index); case and
    surrounding spaces are ignored. 'auto:free' is auto, except that among several GPUs it picks
    the one with the most free memory (at least MIN, e.g. auto:free:8GiB); describe_device says why.
    An explicit request is never downgraded. For `cuda:N` the current CUDA device becomes N
    before any CUDA work, so no context, pinned-memory thread or cuDNN handle lands on cuda:0.
    """
    try:
        device, why = _choose(spec)
    except DeviceError as error:
        raise DeviceError(f"{error}; available: {', '.join(available_devices())}") from None
    backend = backend_module(device.type)
    if backend is not None and device.index is not None:  # bare-'cuda' work (no index given) lands there too
        backend.set_device(device.index)
    _WHY.clear()
    if why:
        _WHY[device] = why
    return device

def describe_device(device: torch.device) -> str:
    """One line naming the device; for a GPU its name, memory, UUID, PCI bus id and visible-devices entry.

    e.g. 'cuda:1 (NVIDIA H100 80GB HBM3, 79.1 GiB, 78.6 GiB free, GPU-5e3f..., PCI 00000000:65:00.0,
    CUDA_VISIBLE_DEVICES entry 3)', followed by why auto:free chose it when it did.
    """
    if device.type == "cuda" and device.index is not None:
        info = gpu_info(device.index)
        mapping = f", CUDA_VISIBLE_DEVICES entry {info.visible_as}" if info.visible_as is not None else ""
        text = (f"{device} ({info.name}, {format_bytes(info.total_memory)}, {format_bytes(info.free_memory)} free, "
                f"{info.uuid}, PCI {info.pci_bus_id}{mapping})")
    elif backend_module(device.type) is not None:
        text = f"{device} ({backend_module(device.type).get_device_name(device)})"
    else:
        text = str(device)
    return f"{text}; {_WHY[device]}" if device in _WHY else text
