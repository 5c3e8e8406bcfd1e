"""Device handling for PyTorch in one file that imports only torch and the standard library.

Copy it into any project. The rule it serves: decide the device once, at the edge, pass it down,
and let modules read their device from their own tensors. Each common pattern has a stricter twin:

    pattern in the wild                                  what this file ships
    device = torch.device("cuda" if ... else "cpu")      resolve_device(spec): never downgrades,
                                                         knows mps / xpu / torchrun, checks cuda:N
    next(model.parameters()).device                      module_device(module): parameters and
                                                         buffers; names the tensors when split
    a dummy nn.Parameter(torch.empty(0)) for .device     DeviceAwareMixin: .device and .dtype
    assert a.device == b.device                          same_device(images=x, labels=y)
    a debug printer of parameter devices                 device_report(module)
    an auto_device decorator for flat tensor args        move_to(batch, device), on_device(device)
    a context manager around torch.cuda.set_device       use_device(device): no-op off CUDA / XPU
    "Expected all tensors to be on the same device"      DeviceGuard(model): names the submodule

`python -m <package>.devices [SPEC]` prints this machine's devices and what SPEC (default: auto)
resolves to; it exits 2 with one line when SPEC is bad.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
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
    "DeviceError", "available_devices", "resolve_device", "describe_device", "module_device",
    "DeviceAwareMixin", "move_to", "on_device", "use_device", "same_device", "device_report",
    "DeviceGuard", "main",
]

_KINDS = ("cpu", "cuda", "mps", "xpu", "meta")
_INDEXED = ("cuda", "mps", "xpu")  # tensors on these report an index: cuda:0, never bare cuda
# Indices without leading zeros: torch itself rejects 'cuda:01', so we must not accept it either.
_SPEC = re.compile(r"(cpu|cuda|mps|xpu|meta)(?::(0|[1-9][0-9]*))?\Z")

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


def _make_current(device: torch.device) -> None:
    """Make `device` its backend's current device, so that bare-'cuda' work lands there too."""
    backend = _backend(device.type)
    if backend is not None and device.index is not None:
        backend.set_device(device.index)


def resolve_device(spec: str | int | torch.device | None = "auto") -> torch.device:
    """Turn a user's device spec into a present, indexed torch.device, or raise DeviceError.

    Accepts 'auto' or None, 'cpu', 'cuda', 'cuda:N', 'mps', 'xpu[:N]', 'meta' (for tests), a
    torch.device or an int (an accelerator index); case and surrounding spaces are ignored.
    An explicit request is never downgraded. For `cuda:N` the current CUDA device becomes N
    before any CUDA work, so no context, pinned-memory thread or cuDNN handle lands on cuda:0.
    """
    try:
        device = _auto() if _is_auto(spec) else _check_present(_parse(spec), spec)
    except DeviceError as error:
        raise DeviceError(f"{error}; available: {', '.join(available_devices())}") from None
    _make_current(device)
    return device


def describe_device(device: torch.device) -> str:
    """A short human name, e.g. 'cuda:1 (NVIDIA H100 80GB HBM3)' or 'cpu'."""
    backend = _backend(device.type)
    if backend is not None:
        return f"{device} ({backend.get_device_name(device)})"
    return str(device)


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


def main(argv: list[str] | None = None) -> int:
    """Print the devices this machine has and what SPEC (default 'auto') resolves to."""
    parser = argparse.ArgumentParser(description="Show this machine's devices and resolve a spec.")
    parser.add_argument("spec", nargs="?", default="auto", help="e.g. cuda:1 (default: auto)")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}")
    rows = [("device", "name", "memory", "capability", "bf16")]
    print(_format_table(rows + [_device_row(name) for name in available_devices()], right=(2,)))
    try:
        device = resolve_device(args.spec)
    except DeviceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{args.spec} -> {describe_device(device)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
