"""Where a module lives and moving things there: module_device, DeviceAwareMixin, move_to, same_device."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from .backends import DeviceError, backend_module

F = TypeVar("F", bound=Callable[..., Any])


def named_tensors(module: nn.Module, recurse: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """Every parameter, then every buffer, of a module with its dotted name (None buffers skipped)."""
    yield from module.named_parameters(recurse=recurse)
    yield from module.named_buffers(recurse=recurse)

def one_device(tensors: Iterable[tuple[str, torch.Tensor]], owner: str) -> torch.device | None:
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

    A module with no tensors at all (nn.ReLU, say) has no device of its own; the answer is where
    it would create tensors now: cpu unless changed by torch.set_default_device or `with torch.device(...)`.
    """
    device = one_device(named_tensors(module), type(module).__name__)
    # Not torch.get_default_device(): on torch 2.4-2.6 it misses a `with torch.device(...)` block (2.8 sees
    # it); an empty tensor is created where every version would put the module's next tensor.
    return device if device is not None else torch.empty(0).device

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
        tensors = named_tensors(self)  # type: ignore[arg-type]
        return next((tensor.dtype for _, tensor in tensors if tensor.is_floating_point()), torch.get_default_dtype())

def map_tensors(obj: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Rebuild `obj` with `fn` applied to each tensor in nested dicts, lists, tuples, dataclasses."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        out = copy.copy(obj)  # keeps the class and extras such as a defaultdict's factory
        for key, value in obj.items():
            out[key] = map_tensors(value, fn)
        return out
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple takes fields positionally
        return type(obj)(*(map_tensors(value, fn) for value in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_tensors(value, fn) for value in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = copy.copy(obj)  # not dataclasses.replace: that fails on init=False fields
        for field in dataclasses.fields(obj):
            object.__setattr__(out, field.name, map_tensors(getattr(obj, field.name), fn))  # frozen too
        return out
    return obj

def tensors_in(obj: Any) -> list[torch.Tensor]:
    """Every tensor inside `obj`, found by the same traversal as move_to."""
    found: list[torch.Tensor] = []
    map_tensors(obj, found.append)  # the rebuilt copy is thrown away
    return found

def move_to(obj: Any, device: torch.device | str, non_blocking: bool = False) -> Any:
    """A copy of `obj` with each tensor in nested dicts, lists, (named)tuples, dataclasses on `device`.

    Other values are passed through untouched. `non_blocking=True` only overlaps the copy with
    compute when the source is in pinned memory (DataLoader(pin_memory=True)).
    """
    return map_tensors(obj, lambda tensor: tensor.to(device, non_blocking=non_blocking))

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
    backend = backend_module(device.type)
    if backend is None or device.index is None:  # cpu, mps, meta, or bare 'cuda' (already current)
        yield device
        return
    previous = backend.current_device()
    backend.set_device(device.index)
    try:
        yield device
    finally:
        backend.set_device(previous)

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


# Factory functions that allocate a module's parameters and buffers; arange and tensor are left out
# because builders also use them for arithmetic whose values they read (RegNet's stage widths).
_ALLOCATORS = frozenset({torch.empty, torch.empty_strided, torch.zeros, torch.ones, torch.full,
                         torch.rand, torch.randn, torch.randint, torch.eye})


def _in_place(func) -> bool:
    """True for torch's in-place operations (`normal_`, `zero_`), not for dunders (`__get__`)."""
    name = getattr(func, "__name__", "")
    return name.endswith("_") and not name.endswith("__")


class _AllocateOnMeta(TorchFunctionMode):
    """Like `with torch.device("meta")`, but index arithmetic keeps its values on the CPU.

    In-place updates of meta tensors (the weight initialisers) are skipped: there are no values
    to update, and torch runs them through slow Python reference implementations.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _ALLOCATORS and kwargs.get("device") is None:
            kwargs["device"] = torch.device("meta")
        elif _in_place(func) and args and isinstance(args[0], torch.Tensor) and args[0].is_meta:
            return args[0]
        return func(*args, **kwargs)


@contextlib.contextmanager
def building_on(device: torch.device) -> Iterator[None]:
    """Create the parameters and buffers of modules built inside this block directly on `device`."""
    if device.type != "meta":
        with device:
            yield
        return
    with _AllocateOnMeta():
        yield


def data_parallel(module: nn.Module, device: torch.device) -> nn.Module:
    """nn.DataParallel over every visible GPU with `device` (a resolved cuda:N) first: it holds the master copy and
    gathers the outputs there, where the rest of the step runs. The module must already be on `device`."""
    if device.type != "cuda":
        raise DeviceError(f"DataParallel runs on CUDA devices, not {device}")
    others = [index for index in range(torch.cuda.device_count()) if index != device.index]
    return nn.DataParallel(module, device_ids=[device.index, *others], output_device=device.index)


def distributed_data_parallel(module: nn.Module, device: torch.device) -> nn.Module:
    """DistributedDataParallel for this process's resolved device (cuda:LOCAL_RANK under torchrun; CPU with gloo)."""
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(module, device_ids=[device.index] if device.type in ("cuda", "xpu") else None)
