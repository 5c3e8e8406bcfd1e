"""CPU-portable, atomic checkpoints that load with `weights_only=True`.

A checkpoint is a plain dict of CPU tensors and plain Python values: it loads on a machine
without a GPU, carries no pickled classes, and its model keys never hold the `module.` or
`_orig_mod.` hops of wrappers, around the model or any submodule (`model_state` removes them,
`load_model_state` loads into a wrapped or plain model alike). Saving copies tensors to the CPU,
never moves the model, and refuses up front, naming the key, a value that `weights_only`
loading would refuse later (an argparse Namespace, a NumPy number). Which keys a checkpoint holds is the
caller's business (in this project, training/run_state.py); this file knows nothing of them.

Every file is written atomically (atomic.py: a temp file in the same folder, fsynced, then
`os.replace`d), so a kill at any instant leaves the old file or the new one. Loading checks the zip's
CRC-32s (torch.load does not: flipped bits would load as weights), unpickles with
`weights_only=True` and no fallback, and turns every failure into a one-line CheckpointError.
This file imports only torch, the standard library and the kit's atomic.py, so the two can be copied
into another project as they are.
"""

from __future__ import annotations

import collections
import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import IO, Any

import torch
from torch import nn

from .atomic import CheckpointError, atomic_file

_WRAPPER_PREFIXES = re.compile(r"^(?:module\.|_orig_mod\.)+")  # DataParallel/DDP, torch.compile, around the model
_WRAPPER_HOP = re.compile(r"(?:^|(?<=\.))(?:module|_orig_mod)\.")  # 'features.module.0.weight': a wrapped submodule
_ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # terminal colours and bold in torch's messages
# What torch.load(weights_only=True) accepts besides tensors and the types in get_safe_globals(), and the
# containers it rebuilds. The rules grew: bytes and bytearray load from torch 2.5, complex and set from 2.6
# (torch 2.4 refuses all four, so a file saved with one would fail on resume).
_PLAIN = (type(None), bool, int, float, str, torch.device, torch.dtype, torch.Size)
_PLAIN += (bytes, bytearray) if torch.__version__ >= (2, 5) else ()
_PLAIN += (complex,) if torch.__version__ >= (2, 6) else ()
_SEQUENCES = (list, tuple, set) if torch.__version__ >= (2, 6) else (list, tuple)


def to_cpu(obj: Any) -> Any:
    """A copy of `obj` with every tensor copied to the CPU; the live tensors are never moved."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {key: to_cpu(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(value) for value in obj)
    return obj


def on_cpu(obj: Any) -> Any:
    """`obj` with every tensor that is not on the CPU copied there; CPU tensors kept as they are (no copy)."""
    if isinstance(obj, torch.Tensor):
        return obj if obj.device.type == "cpu" else obj.detach().to("cpu")
    if type(obj) in (dict, collections.OrderedDict):  # not a defaultdict or a dict subclass: the check refuses those
        return type(obj)((key, on_cpu(value)) for key, value in obj.items())
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):  # not a named tuple: its fields are typed
        return type(obj)(on_cpu(value) for value in obj)
    return obj


def strip_wrapper_prefixes(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Keys as a plain model names them, whatever wrappers (DP, DDP, compile) were around it."""
    return {_WRAPPER_PREFIXES.sub("", key): value for key, value in state_dict.items()}


def _inner_name(module: nn.Module) -> str | None:
    """Where a wrapper keeps the module it wraps: 'module' (DataParallel, DDP), '_orig_mod' (torch.compile)."""
    if isinstance(module, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        return "module"
    return "_orig_mod" if "_orig_mod" in module._modules else None


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside DataParallel, DistributedDataParallel and torch.compile wrappers."""
    while (inner := _inner_name(model)) is not None:
        model = model._modules[inner]
    return model


def plain_key(model: nn.Module, key: str) -> str:
    """A state_dict key of `model` without its hops through wrappers: 'features.module.0.weight' -> 'features.0.weight'.

    The model's own structure says where the wrappers are, so a submodule that happens to be named
    `module` keeps its name.
    """
    module: nn.Module | None = model
    kept = []
    for part in key.split("."):
        child = module._modules.get(part) if module is not None else None
        if child is None or part != _inner_name(module):
            kept.append(part)
        module = child
    return ".".join(kept)


def model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state_dict with plain keys (no wrapper hops, also inside submodules), copied to the CPU."""
    return to_cpu({plain_key(model, key): value for key, value in model.state_dict().items()})


def unsafe_value(obj: Any, where: str = "") -> str | None:
    """'config.args: argparse.Namespace' for the first value torch.load(weights_only=True) would refuse; else None."""
    allowed = {kind for kind in torch.serialization.get_safe_globals() if isinstance(kind, type)}
    if isinstance(obj, torch.Tensor) or type(obj) in _PLAIN or type(obj) in allowed:
        return None
    if type(obj) in (dict, collections.OrderedDict):
        for key, value in obj.items():
            inner = f"{where}.{key}" if where else str(key)
            found = unsafe_value(key, f"{inner} (the key)") or unsafe_value(value, inner)
            if found:
                return found
        return None
    if type(obj) in _SEQUENCES:
        return next((found for i, value in enumerate(obj) if (found := unsafe_value(value, f"{where}[{i}]"))), None)
    return f"{where or 'the state'}: {type(obj).__module__}.{type(obj).__qualname__}"


# The plain value to store in place of a refused one, by the refused class's qualified name.
_FIXES = (("pathlib.", "str(path)"), ("argparse.Namespace", "vars(args)"), ("numpy.", "value.item() or array.tolist()"),
          ("collections.", "dict(value) or list(value)"))


def _plain_fix(found: str) -> str:
    """The fix for what unsafe_value found ('where: module.Class'): str(path) for a Path, vars(args), ..."""
    kind = found.rsplit(": ", 1)[-1]
    return next((fix for prefix, fix in _FIXES if kind.startswith(prefix)),
                "plain values (str, int, float, bool, None, and lists and dicts of them)")


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> Path:
    """Write `state` (tensors and plain values) atomically with torch.save, every tensor on the CPU.

    A tensor on a GPU (model weights, optimizer moments, the scaler's scale, an RNG state) is copied to the
    CPU for the file: the file loads with plain `torch.load(path, weights_only=True)` on a machine without
    a GPU, and the live tensors stay where they are (CPU tensors are written as they are, not copied again).
    A value that weights_only loading would refuse raises TypeError before anything is written.
    """
    found = unsafe_value(state)
    if found:
        raise TypeError(f"cannot save {path}: {found} would be refused by torch.load(weights_only=True); "
                        f"store {_plain_fix(found)} instead")
    state = on_cpu(state)  # after the check: a refused state is not copied first
    with atomic_file(path, "wb") as handle:
        writer = _RecordingWriter(handle)
        try:
            torch.save(state, writer)
        except RuntimeError:
            # torch's zip writer turns a failed write (a full disk) into "[enforce fail at
            # inline_container.cc] unexpected pos": the OSError it swallowed says what happened.
            if writer.error is not None:
                raise writer.error from None
            raise
    return Path(path)


class _RecordingWriter:
    """A binary file that remembers the OSError a write raised (torch.save reports only a position mismatch)."""

    def __init__(self, handle: IO[bytes]):
        self.handle, self.error = handle, None

    def write(self, data) -> int:
        try:
            return self.handle.write(data)
        except OSError as error:
            self.error = error
            raise

    def flush(self) -> None:
        self.handle.flush()


def _first_line(error: BaseException) -> str:
    """The first line of an error's message, or its type when the message is empty."""
    lines = _ESCAPES.sub("", str(error)).strip().splitlines()
    line = lines[0] if lines else type(error).__name__
    # torch's zip reader appends sentences of advice ("This is an internal miniz error. If you ..."): the first says it
    return re.split(r"(?<=[a-z])\. (?=[A-Z])", line)[0] if len(line) > 150 else line


def _check_integrity(path: Path) -> None:
    """Compare every member of the zip container with its CRC-32: torch.load alone reads flipped bits as data."""
    if not zipfile.is_zipfile(path):
        return  # torch's legacy format has no checksums; torch.load judges it
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except Exception as error:  # any failure to read the container means it is damaged
        raise CheckpointError(f"{path} is truncated or corrupt ({_first_line(error)})") from None
    if bad is not None:
        raise CheckpointError(f"{path} is corrupt: {bad} fails its CRC-32 check")


def load_checkpoint(path: str | os.PathLike, map_location: torch.device | str = "cpu") -> dict[str, Any]:
    """Load a checkpoint safely (weights_only, no fallback) with its tensors on `map_location`."""
    path = Path(path)
    if path.is_dir():
        path = path / "last.pt"
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} {'is not a file' if path.exists() else 'does not exist'}")
    _check_integrity(path)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        # torch's message is paragraphs of advice in terminal bold; the class it blocked is what the user needs.
        text = _ESCAPES.sub("", str(error))
        blocked = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
        detail = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text)
        reason = (f"it holds {blocked.group(1)}, which weights_only loading refuses" if blocked else
                  f"weights_only loading refuses it ({detail.group(1) if detail else _first_line(error)})")
        raise CheckpointError(f"{path} is not a safe checkpoint: {reason}") from None
    except Exception as error:  # truncation and bit rot surface as many types (EOF, zip, unicode, key...)
        raise CheckpointError(f"{path} is truncated or corrupt ({_first_line(error)})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, not a checkpoint dict")
    return state


def _fitting(model: nn.Module, state_dict: dict[str, torch.Tensor]) -> tuple[dict[str, str], dict, str | None]:
    """(plain name -> the name in `model`, the saved weights under plain names, what does not fit or None)."""
    own = model.state_dict()
    actual = {plain_key(model, key): key for key in own}  # plain name -> the name in `model`
    target = {plain: own[key] for plain, key in actual.items()}
    state_dict = {_WRAPPER_HOP.sub("", key) if key not in target else key: value
                  for key, value in strip_wrapper_prefixes(state_dict).items()}
    missing = [k for k in target if k not in state_dict]
    unexpected = [k for k in state_dict if k not in target]
    mismatched = [f"{k} {tuple(state_dict[k].shape)} vs {tuple(v.shape)}"
                  for k, v in target.items() if k in state_dict and state_dict[k].shape != v.shape]
    details = "; ".join(part for part in (
        f"missing {', '.join(missing[:3])}" if missing else "",
        f"unexpected {', '.join(unexpected[:3])}" if unexpected else "",
        f"shape {', '.join(mismatched[:3])}" if mismatched else "",
    ) if part)
    return actual, state_dict, details or None


def state_dict_mismatch(model: nn.Module, state_dict: dict[str, torch.Tensor]) -> str | None:
    """What keeps `state_dict` from loading into `model` (missing, unexpected, other shapes), or None.

    Only shapes are compared, so `model` may live on the meta device: a check that allocates nothing.
    """
    return _fitting(model, state_dict)[2]


def load_model_state(model: nn.Module, state_dict: dict[str, torch.Tensor], source: str = "checkpoint") -> None:
    """Load weights into `model`, plain or wrapped (around it or a submodule), naming the first mismatches.

    The saved keys may carry wrapper hops too (a `model.state_dict()` saved as it was): they match.
    """
    actual, state_dict, details = _fitting(model, state_dict)
    if details:
        raise CheckpointError(f"{source} does not fit this model: {details}")
    model.load_state_dict({actual[key]: value for key, value in state_dict.items()})
