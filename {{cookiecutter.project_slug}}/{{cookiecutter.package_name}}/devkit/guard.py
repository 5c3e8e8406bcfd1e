"""Debug aids: a per-device table of a model's tensors, and hooks that name a misplaced input's submodule."""

from __future__ import annotations

import functools

from torch import nn

from .backends import DeviceError, format_bytes, format_table
from .placement import named_tensors, one_device, tensors_in


def device_report(module: nn.Module) -> str:
    """An aligned table of tensor count, elements and bytes per (kind, device, dtype), with a total."""
    sums: dict[tuple[str, str, str], tuple[int, int, int]] = {}
    for kind, named in (("param", module.named_parameters()), ("buffer", module.named_buffers())):
        for _, tensor in named:
            key = (kind, str(tensor.device), str(tensor.dtype).removeprefix("torch."))
            n, numel, size = sums.get(key, (0, 0, 0))
            sums[key] = (n + 1, numel + tensor.numel(), size + tensor.numel() * tensor.element_size())
    total = [sum(row[i] for row in sums.values()) for i in range(3)]
    rows = [("kind", "device", "dtype", "tensors", "elements", "bytes")]
    rows += [(*key, str(n), str(numel), format_bytes(size)) for key, (n, numel, size) in sums.items()]
    rows.append(("total", "", "", str(total[0]), str(total[1]), format_bytes(total[2])))
    return format_table(rows, right=(3, 4, 5))

class DeviceGuard:
    """Forward pre-hooks that name the submodule and both devices when an input is misplaced.

    A debug aid, off by default: `with DeviceGuard(model): model(x)`, or `guard = DeviceGuard(model)`
    then `guard.remove()`. Instead of PyTorch's generic "Expected all tensors to be on the same
    device" it raises, before the forward runs, 'blocks.1 (Linear) holds its tensors on cuda:0 but
    input 0 is on cpu'. Only submodules holding tensors of their own are hooked, each checks only
    those (recurse=False), and submodules added after the guard was made are not watched.
    """

    def __init__(self, model: nn.Module) -> None:
        self._handles = [
            module.register_forward_pre_hook(functools.partial(self._check, path or "<root>"),
                                             with_kwargs=True)
            for path, module in model.named_modules()
            if next(named_tensors(module, recurse=False), None) is not None  # containers need no check
        ]

    @staticmethod
    def _check(path: str, module: nn.Module, args: tuple, kwargs: dict) -> None:
        """Raise DeviceError on the first tensor input that is not where the module's tensors are."""
        owner = f"{path} ({type(module).__name__})"
        # Read at every call, not cached: a .to() after the guard was made moves the module.
        expected = one_device(named_tensors(module, recurse=False), owner)
        named_inputs = [*enumerate(args), *((repr(key), value) for key, value in kwargs.items())]
        for where, value in named_inputs:
            for tensor in tensors_in(value):
                # PyTorch lets 0-dim CPU tensors mix with any device, so they are no mistake.
                scalar = tensor.dim() == 0 and tensor.device.type == "cpu"
                if expected is not None and tensor.device != expected and not scalar:
                    raise DeviceError(f"{owner} holds its tensors on {expected} but input {where} is on "
                                      f"{tensor.device}")

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
