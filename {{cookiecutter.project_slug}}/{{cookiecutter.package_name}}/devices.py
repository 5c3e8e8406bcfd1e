"""Device handling for PyTorch in one file that imports only torch and the standard library.

Copy it into any project. The rule it serves: decide the device once, at the edge, pass it down,
and let modules read their device from their own tensors. Each common pattern has a stricter twin:

    pattern in the wild                                  what this file ships
    device = torch.device("cuda" if ... else "cpu")      resolve_device(spec): never downgrades,
                                                         knows mps / xpu / torchrun, checks cuda:N
    a loop over nvidia-smi to find an idle GPU           resolve_device("auto:free:8GiB"): the GPU
                                                         with the most free memory, and why
    "which card is cuda:1?"                              gpu_info(1): name, memory, UUID, PCI bus id,
                                                         its CUDA_VISIBLE_DEVICES entry; --device GPU-<uuid>
    next(model.parameters()).device                      module_device(module): parameters and
                                                         buffers; names the tensors when split
    a dummy nn.Parameter(torch.empty(0)) for .device     DeviceAwareMixin: .device and .dtype
    assert a.device == b.device                          same_device(images=x, labels=y)
    a debug printer of parameter devices                 device_report(module)
    an auto_device decorator for flat tensor args        move_to(batch, device), on_device(device)
    a context manager around torch.cuda.set_device       use_device(device): no-op off CUDA / XPU
    "Expected all tensors to be on the same device"      DeviceGuard(model): names the submodule

`python -m <package>.devices [SPEC]` prints this machine's devices (for GPUs also free memory, UUID,
PCI bus id and the CUDA_VISIBLE_DEVICES mapping) and what SPEC (default: auto) resolves to; it
exits 2 with one line when SPEC is bad.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import ctypes
import dataclasses
import functools
import operator
import os
import platform
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import torch
from torch import nn

__all__ = [
    "DeviceError", "available_devices", "resolve_device", "describe_device", "GpuInfo", "gpu_info",
    "device_identity", "index_order_warning", "module_device",
    "DeviceAwareMixin", "move_to", "on_device", "use_device", "same_device", "device_report",
    "DeviceGuard", "main",
]

_KINDS = ("cpu", "cuda", "mps", "xpu", "meta")
_INDEXED = ("cuda", "mps", "xpu")  # tensors on these report an index: cuda:0, never bare cuda
# Indices without leading zeros: torch itself rejects 'cuda:01', so we must not accept it either.
_SPEC = re.compile(r"(cpu|cuda|mps|xpu|meta)(?::(0|[1-9][0-9]*))?\Z")
_AUTO_FREE = re.compile(r"auto:free(?::([0-9]+(?:\.[0-9]+)?)([a-z]*))?\Z")  # auto:free, auto:free:8GiB
_UUID = re.compile(r"gpu-[0-9a-f-]+\Z")  # as nvidia-smi -L and CUDA_VISIBLE_DEVICES write it
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20, "g": 2**30, "gib": 2**30, "t": 2**40, "tib": 2**40}
_THIS = __spec__.name if __spec__ is not None else __name__  # 'pkg.devices' under python -m too
_WHY: dict[torch.device, str] = {}  # why the last resolve_device call chose its device, for describe_device

F = TypeVar("F", bound=Callable[..., Any])


class DeviceError(ValueError):
    """A device was asked for that is malformed or not present, or tensors disagree on devices."""


# --- Resolving a spec -----------------------------------------------------------------------------

def _backend(kind: str) -> Any:
    """torch.cuda or torch.xpu: the backends with a 'current device'; None for the others."""
    return {"cuda": torch.cuda, "xpu": getattr(torch, "xpu", None)}.get(kind)


def _backend_count(kind: str) -> int:
    """How many devices of one kind this machine has (0 when the backend is absent)."""
    if kind == "mps":
        mps = getattr(torch.backends, "mps", None)
        return 1 if mps is not None and mps.is_available() else 0
    backend = _backend(kind)
    if backend is not None:
        return backend.device_count() if backend.is_available() else 0
    return 1  # cpu and meta always exist


def available_devices() -> list[str]:
    """The devices this machine can run on, accelerators first, e.g. ['cuda:0', 'cuda:1', 'cpu']."""
    found = []
    for kind in ("cuda", "mps", "xpu"):
        count = _backend_count(kind)
        found += ["mps"] if kind == "mps" and count else [f"{kind}:{i}" for i in range(count)]
    return found + ["cpu"]


def _show(spec: object) -> str:
    """The spec as it goes into a one-line error message."""
    text = repr(str(spec)) if isinstance(spec, torch.device) else repr(spec)
    text = " ".join(line.strip() for line in text.splitlines())  # some reprs (tensors) span lines
    return text if len(text) <= 60 else text[:57] + "..."


def _parse(spec: object) -> torch.device:
    """Turn a spec into a torch.device without checking that this machine has it."""
    if isinstance(spec, torch.device):
        return spec
    if isinstance(spec, str):
        match = _SPEC.match(spec.strip().lower())
        if not match:
            raise DeviceError(f"unknown device {_show(spec)}")
        kind, index = match.groups()
        return torch.device(kind, int(index)) if index is not None else torch.device(kind)
    try:  # bool is an int to Python but never a device; numpy integers pass, floats do not
        if isinstance(spec, (bool, torch.Tensor)):
            raise TypeError
        index = operator.index(spec)
    except TypeError:
        wrong = f"{type(spec).__name__} {_show(spec)}"
        raise DeviceError(f"a device is a str, an int or a torch.device, not {wrong}") from None
    if index < 0:
        raise DeviceError(f"device index {_show(spec)} is negative")
    # Like torch, an int means an index of the machine's accelerator.
    return torch.device("xpu" if _backend_count("xpu") and not _backend_count("cuda") else "cuda", index)


def _check_present(device: torch.device, spec: object) -> torch.device:
    """`device` as tensors there report it (accelerators indexed), or DeviceError if absent."""
    kind = device.type
    if kind not in _KINDS:
        raise DeviceError(f"unknown device {_show(spec)}")
    count = _backend_count(kind)
    if count == 0:
        raise DeviceError(f"device {_show(spec)} is not available: no {kind.upper()} device found")
    index = device.index
    if index is None:  # bare 'cuda' means the current device, made explicit
        index = _backend(kind).current_device() if _backend(kind) else 0
    if index >= count:
        raise DeviceError(f"device {_show(spec)} is not available: only {count} {kind} device(s)")
    return torch.device(kind, index) if kind in _INDEXED else torch.device(kind)


def _auto() -> torch.device:
    """The first present of cuda, mps, xpu, cpu; under torchrun, this process's own GPU."""
    local_rank = os.environ.get("LOCAL_RANK")
    for kind in ("cuda", "mps", "xpu"):
        if not _backend_count(kind):
            continue
        if local_rank is None or kind == "mps":
            return _check_present(torch.device(kind), "auto")
        if not local_rank.strip().isdigit():
            raise DeviceError(f"auto: LOCAL_RANK={local_rank!r} is not a device index")
        return _check_present(torch.device(kind, int(local_rank)), f"{kind}:{int(local_rank)}")
    return torch.device("cpu")


def _is_auto(spec: object) -> bool:
    """None and 'auto' (any case, any surrounding space) both ask for the best present device."""
    return spec is None or (isinstance(spec, str) and spec.strip().lower() == "auto")


# --- Which physical GPU, and how much of it is free ------------------------------------------------

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


def _uuid(index: int) -> str:
    """The GPU's UUID in nvidia-smi's form; torch prints it without the 'GPU-' prefix."""
    return f"GPU-{torch.cuda.get_device_properties(index).uuid}"


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


def _free_memory(index: int) -> int:
    """Free bytes on cuda:index: NVML when present, else torch.cuda.mem_get_info (opens a context)."""
    from_nvml = _nvml_memory(_uuid(index))
    return from_nvml[0] if from_nvml else torch.cuda.mem_get_info(index)[0]


def gpu_info(index: int) -> GpuInfo:
    """Name, memory, UUID, PCI bus id and CUDA_VISIBLE_DEVICES entry of the visible GPU cuda:index."""
    props = torch.cuda.get_device_properties(index)
    visible = [entry.strip() for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    return GpuInfo(torch.device("cuda", index), props.name, props.total_memory, _free_memory(index),
                   f"GPU-{props.uuid}", _pci_bus_id(props),
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
    if _backend_count("cuda") < 2 or os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        return None
    return ("warning: CUDA_DEVICE_ORDER is not PCI_BUS_ID, so cuda:N may differ from nvidia-smi's GPU N; "
            "match them by UUID or PCI bus id, or export CUDA_DEVICE_ORDER=PCI_BUS_ID")


def _min_free(spec: object) -> int | None:
    """The minimum free bytes an 'auto:free[:SIZE]' spec asks for (0 without SIZE); None for other specs."""
    if not isinstance(spec, str) or not spec.strip().lower().startswith("auto:free"):
        return None
    match = _AUTO_FREE.match(spec.strip().lower())
    if not match or (match.group(1) and match.group(2) not in _UNITS):
        raise DeviceError(f"unknown device {_show(spec)}: auto:free takes a minimum such as auto:free:8GiB")
    number, unit = match.groups()
    return int(float(number) * _UNITS[unit]) if number else 0


def _auto_free(min_free: int) -> tuple[torch.device, str | None]:
    """The CUDA device with the most free memory (at least `min_free`), and why; like auto without CUDA.

    Under torchrun, LOCAL_RANK decides as for auto: every rank must train on its own GPU.
    """
    count = _backend_count("cuda")
    if count == 0:
        return _auto(), None  # no GPU to choose between: mps, xpu or cpu, as for auto
    torchrun = os.environ.get("LOCAL_RANK") is not None
    candidates = [_auto().index] if torchrun else list(range(count))
    free = {index: _free_memory(index) for index in candidates}
    best = max(free, key=lambda index: (free[index], -index))  # ties go to the lower index
    listed = ", ".join(f"cuda:{index} {_format_bytes(free[index])}" for index in free)
    if free[best] < min_free:
        raise DeviceError(f"auto:free: no CUDA device has {_format_bytes(min_free)} free ({listed} free)")
    if torchrun:
        return torch.device("cuda", best), f"auto:free: LOCAL_RANK decides under torchrun ({listed} free)"
    return torch.device("cuda", best), f"auto:free: most free memory ({listed} free)"


def _by_uuid(spec: str) -> torch.device:
    """The visible GPU whose UUID is, or starts with, `spec` (as CUDA_VISIBLE_DEVICES matches them)."""
    wanted = spec.strip().lower()
    matches = [index for index in range(_backend_count("cuda")) if _uuid(index).lower().startswith(wanted)]
    if len(matches) != 1:
        problem = "matches several GPUs" if matches else "is not the UUID of a visible GPU"
        raise DeviceError(f"device {_show(spec)} {problem} (python -m {_THIS} lists them)")
    return torch.device("cuda", matches[0])


def _choose(spec: object) -> tuple[torch.device, str | None]:
    """The device `spec` names on this machine, and why when it was a choice among several."""
    min_free = _min_free(spec)
    if min_free is not None:
        return _auto_free(min_free)
    if _is_auto(spec):
        return _auto(), None
    if isinstance(spec, str) and _UUID.match(spec.strip().lower()):
        return _by_uuid(spec), None
    return _check_present(_parse(spec), spec), None


def _make_current(device: torch.device) -> None:
    """Make `device` its backend's current device, so that bare-'cuda' work lands there too."""
    backend = _backend(device.type)
    if backend is not None and device.index is not None:
        backend.set_device(device.index)


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
    _make_current(device)
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
        text = (f"{device} ({info.name}, {_format_bytes(info.total_memory)}, {_format_bytes(info.free_memory)} free, "
                f"{info.uuid}, PCI {info.pci_bus_id}{mapping})")
    elif _backend(device.type) is not None:
        text = f"{device} ({_backend(device.type).get_device_name(device)})"
    else:
        text = str(device)
    return f"{text}; {_WHY[device]}" if device in _WHY else text


# --- Where a module lives ---------------------------------------------------------------------

def _tensors(module: nn.Module, recurse: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """Every parameter, then every buffer, of a module with its dotted name (None buffers skipped)."""
    yield from module.named_parameters(recurse=recurse)
    yield from module.named_buffers(recurse=recurse)


def _one_device(tensors: Iterable[tuple[str, torch.Tensor]], owner: str) -> torch.device | None:
    """The single device of the named tensors, None if there are none, DeviceError if several."""
    by_device: dict[torch.device, list[str]] = {}
    for name, tensor in tensors:
        by_device.setdefault(tensor.device, []).append(name)
    if len(by_device) > 1:
        parts = "; ".join(f"{device}: {', '.join(names[:3])}" + (" ..." if len(names) > 3 else "")
                          for device, names in by_device.items())
        raise DeviceError(f"{owner} is split across devices: {parts}")
    return next(iter(by_device), None)


def module_device(module: nn.Module) -> torch.device:
    """The one device holding every parameter and buffer of `module`, or DeviceError naming them.

    A module with no tensors at all (nn.ReLU, say) has no device of its own; the answer is
    torch.get_default_device(), where it would create tensors now: cpu unless changed.
    """
    device = _one_device(_tensors(module), type(module).__name__)
    return device if device is not None else torch.get_default_device()


class DeviceAwareMixin:
    """Gives an nn.Module `.device` and `.dtype` read from its own tensors (no dummy parameter).

    Use as `class Net(DeviceAwareMixin, nn.Module)`. Nothing is cached, so both stay right after
    .to(), .cuda(), .cpu(), .half() and .to_empty(); each read walks the module's tensors once.
    """

    @property
    def device(self) -> torch.device:
        """Where this module's parameters and buffers live (see module_device)."""
        return module_device(self)  # type: ignore[arg-type]

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the first floating-point parameter (then buffer); the default dtype if none."""
        for _, tensor in _tensors(self):  # type: ignore[arg-type]
            if tensor.is_floating_point():
                return tensor.dtype
        return torch.get_default_dtype()


# --- Moving batches ---------------------------------------------------------------------------

def _map_tensors(obj: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Rebuild `obj` with `fn` applied to each tensor in nested dicts, lists, tuples, dataclasses."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        out = copy.copy(obj)  # keeps the class and extras such as a defaultdict's factory
        for key, value in obj.items():
            out[key] = _map_tensors(value, fn)
        return out
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple takes fields positionally
        return type(obj)(*(_map_tensors(value, fn) for value in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_tensors(value, fn) for value in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = copy.copy(obj)  # not dataclasses.replace: that fails on init=False fields
        for field in dataclasses.fields(obj):
            object.__setattr__(out, field.name, _map_tensors(getattr(obj, field.name), fn))  # frozen too
        return out
    return obj


def _tensors_in(obj: Any) -> list[torch.Tensor]:
    """Every tensor inside `obj`, found by the same traversal as move_to."""
    found: list[torch.Tensor] = []
    _map_tensors(obj, found.append)  # the rebuilt copy is thrown away
    return found


def move_to(obj: Any, device: torch.device | str, non_blocking: bool = False) -> Any:
    """A copy of `obj` with each tensor in nested dicts, lists, (named)tuples, dataclasses on `device`.

    Other values are passed through untouched. `non_blocking=True` only overlaps the copy with
    compute when the source is in pinned memory (DataLoader(pin_memory=True)).
    """
    return _map_tensors(obj, lambda tensor: tensor.to(device, non_blocking=non_blocking))


def on_device(device: torch.device | str | Callable[[], torch.device],
              non_blocking: bool = False) -> Callable[[F], F]:
    """Decorator moving the tensors in a function's arguments, nested too, to `device` first.

    Pass a callable such as `lambda: config.DEVICE` to read the device at call time: decorators
    run at import time, before the CLI has resolved anything.
    """
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            target = device() if callable(device) else device
            args, kwargs = move_to((args, kwargs), target, non_blocking)
            return fn(*args, **kwargs)
        return wrapper  # type: ignore[return-value]
    return decorate


@contextlib.contextmanager
def use_device(device: torch.device | str) -> Iterator[torch.device]:
    """Make `device` the current CUDA / XPU device inside the block, then restore; a no-op elsewhere."""
    device = torch.device(device)
    backend = _backend(device.type)
    if backend is None or device.index is None:  # cpu, mps, meta, or bare 'cuda' (already current)
        yield device
        return
    previous = backend.current_device()
    backend.set_device(device.index)
    try:
        yield device
    finally:
        backend.set_device(previous)


# --- Checking and reporting -------------------------------------------------------------------

def same_device(**named: torch.Tensor | nn.Module) -> torch.device:
    """The one device of the named tensors or modules; DeviceError naming each one if they differ."""
    if not named:
        raise TypeError("same_device() needs at least one named tensor, e.g. same_device(x=x, y=y)")
    devices = {name: value.device if isinstance(value, torch.Tensor) else module_device(value)
               for name, value in named.items()}
    if len(set(devices.values())) > 1:
        listed = ", ".join(f"{name} on {device}" for name, device in devices.items())
        raise DeviceError(f"expected one device, got {listed}")
    return next(iter(devices.values()))


def _format_bytes(count: float) -> str:
    """1536 -> '1.5 KiB'; exact below 1 KiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def _format_table(rows: list[tuple[str, ...]], right: Iterable[int] = ()) -> str:
    """Rows as aligned text; the columns numbered in `right` are right-aligned (numbers)."""
    right = set(right)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.rjust(width) if i in right else cell.ljust(width)
                               for i, (cell, width) in enumerate(zip(row, widths))).rstrip()
                     for row in rows)


def device_report(module: nn.Module) -> str:
    """An aligned table of tensor count, elements and bytes per (kind, device, dtype), with a total."""
    sums: dict[tuple[str, str, str], list[int]] = {}
    for kind, named in (("param", module.named_parameters()), ("buffer", module.named_buffers())):
        for _, tensor in named:
            key = (kind, str(tensor.device), str(tensor.dtype).removeprefix("torch."))
            row = sums.setdefault(key, [0, 0, 0])
            numel = tensor.numel()
            row[0], row[1], row[2] = row[0] + 1, row[1] + numel, row[2] + numel * tensor.element_size()
    total = [sum(row[i] for row in sums.values()) for i in range(3)]
    rows = [("kind", "device", "dtype", "tensors", "elements", "bytes")]
    rows += [(*key, str(n), str(numel), _format_bytes(size)) for key, (n, numel, size) in sums.items()]
    rows.append(("total", "", "", str(total[0]), str(total[1]), _format_bytes(total[2])))
    return _format_table(rows, right=(3, 4, 5))


class DeviceGuard:
    """Forward pre-hooks that name the submodule and both devices when an input is misplaced.

    A debug aid, off by default: `with DeviceGuard(model): model(x)`, or `guard = DeviceGuard(model)`
    then `guard.remove()`. Instead of PyTorch's generic "Expected all tensors to be on the same
    device" it raises, before the forward runs, 'blocks.1 (Linear) holds its tensors on cuda:0 but
    input 0 is on cpu'. Only submodules holding tensors of their own are hooked, each checks only
    those (recurse=False), and submodules added after the guard was made are not watched.
    """

    def __init__(self, model: nn.Module) -> None:
        self._devices: dict[int, torch.device] = {}  # id(submodule) -> device its tensors were seen on
        self._handles = [
            module.register_forward_pre_hook(functools.partial(self._check, path or "<root>"),
                                             with_kwargs=True)
            for path, module in model.named_modules()
            if next(_tensors(module, recurse=False), None) is not None  # containers need no check
        ]

    def _device_of(self, module: nn.Module, path: str) -> torch.device | None:
        """Device of the module's own tensors; re-verified in full only after the first one moved."""
        first = next(_tensors(module, recurse=False), None)
        if first is None:
            return None
        # .to() and friends move all of a module's tensors together, so the first one's device
        # tells whether the cached answer still holds; a real move triggers a full recheck.
        if self._devices.get(id(module)) != first[1].device:
            owner = f"{path} ({type(module).__name__})"
            device = _one_device(_tensors(module, recurse=False), owner)
            self._devices[id(module)] = device  # type: ignore[assignment]
        return self._devices[id(module)]

    def _check(self, path: str, module: nn.Module, args: tuple, kwargs: dict) -> None:
        """Raise DeviceError on the first tensor input that is not where the module's tensors are."""
        expected = self._device_of(module, path)
        named_inputs = [*enumerate(args), *((repr(key), value) for key, value in kwargs.items())]
        for where, value in named_inputs:
            for tensor in _tensors_in(value):
                # PyTorch lets 0-dim CPU tensors mix with any device, so they are no mistake.
                scalar = tensor.dim() == 0 and tensor.device.type == "cpu"
                if expected is not None and tensor.device != expected and not scalar:
                    raise DeviceError(f"{path} ({type(module).__name__}) holds its tensors on "
                                      f"{expected} but input {where} is on {tensor.device}")

    def remove(self) -> None:
        """Take the hooks off the model again (safe to call twice)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def __enter__(self) -> DeviceGuard:
        """The guard itself; the hooks are already on."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Remove the hooks, whether or not the block raised."""
        self.remove()


# --- python -m <package>.devices ------------------------------------------------------------------

def _cpu_row() -> tuple[str, ...]:
    """The cpu's name, total memory where the OS tells it, and bf16 'yes' (CPU autocast supports it)."""
    name = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:  # Linux names the model here
        models = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
        name = models[0] if models else name
    try:
        memory = _format_bytes(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):  # no sysconf on Windows
        memory = "-"
    return ("cpu", f"{name} ({os.cpu_count()} cores)", memory, "-", "yes")


def _device_row(name: str) -> tuple[str, ...]:
    """One row of the device table: device, name, memory, compute capability, bf16 support."""
    device = torch.device(name)
    if device.type == "cpu":
        return _cpu_row()
    if device.type == "mps":
        recommended = getattr(torch.mps, "recommended_max_memory", None)
        return (name, "Apple GPU", _format_bytes(recommended()) if recommended else "-", "-", "yes")
    props = _backend(device.type).get_device_properties(device)
    if device.type == "cuda":  # bf16 runs natively from compute capability 8.0 (Ampere) on
        capability, bf16 = f"{props.major}.{props.minor}", props.major >= 8
    else:
        capability, bf16 = "-", torch.xpu.is_bf16_supported()
    return (name, props.name, _format_bytes(props.total_memory), capability, "yes" if bf16 else "no")


def _gpu_lines() -> list[str]:
    """Which physical card each cuda:N is: free memory, UUID, PCI bus id, CUDA_VISIBLE_DEVICES entry."""
    count = _backend_count("cuda")
    if not count:
        return []
    rows = [("gpu", "free", "uuid", "pci bus id", "CUDA_VISIBLE_DEVICES entry")]
    for info in (gpu_info(index) for index in range(count)):
        rows.append((str(info.device), _format_bytes(info.free_memory), info.uuid, info.pci_bus_id,
                     info.visible_as if info.visible_as is not None else "-"))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    mapping = (f"CUDA_VISIBLE_DEVICES={visible}: cuda:N is its N-th entry" if visible is not None
               else "CUDA_VISIBLE_DEVICES is unset: every GPU is visible")
    warning = index_order_warning()
    return [_format_table(rows, right=(1,)), mapping, *([warning] if warning else [])]


def main(argv: list[str] | None = None) -> int:
    """Print the devices this machine has, which physical GPU each cuda:N is, and what SPEC resolves to."""
    parser = argparse.ArgumentParser(description="Show this machine's devices and resolve a spec.")
    parser.add_argument("spec", nargs="?", default="auto",
                        help="e.g. cuda:1, auto:free, auto:free:8GiB, GPU-<uuid> (default: auto)")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}")
    rows = [("device", "name", "memory", "capability", "bf16")]
    print(_format_table(rows + [_device_row(name) for name in available_devices()], right=(2,)))
    for line in _gpu_lines():
        print(line)
    try:
        device = resolve_device(args.spec)
    except DeviceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{args.spec} -> {describe_device(device)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
