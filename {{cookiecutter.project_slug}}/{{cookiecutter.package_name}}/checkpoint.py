"""CPU-portable, atomic checkpoints that load with `weights_only=True`.

A checkpoint is a plain dict of CPU tensors and plain Python values: it loads on a machine
without a GPU, carries no pickled classes, and its model keys never hold the `module.` or
`_orig_mod.` prefixes of wrappers. This file imports only torch and the standard library,
so it can be copied into another project as it is.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import tempfile
import zipfile
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import torch
from torch import nn


WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DataParallel/DDP, torch.compile

class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt, unsafe, or for another model."""


def to_cpu(obj: Any) -> Any:
    """A copy of `obj` with every tensor copied to the CPU; the live tensors are never moved."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {key: to_cpu(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(value) for value in obj)
    return obj


def strip_wrapper_prefixes(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Keys as a plain model names them, whatever wrappers (DP, DDP, compile) were around it."""
    stripped = {}
    for key, value in state_dict.items():
        while key.startswith(WRAPPER_PREFIXES):
            key = key.split(".", 1)[1]
        stripped[key] = value
    return stripped


def model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state_dict with plain keys, copied to the CPU."""
    return to_cpu(strip_wrapper_prefixes(model.state_dict()))


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Yield a temp file beside `path`; on success fsync it and os.replace it onto `path`.

    Readers, and a process killed at any instant, see the old file or the new one, never half.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> Path:
    """Write `state` atomically with torch.save."""
    with atomic_file(path) as handle:
        torch.save(state, handle)
    return Path(path)


def load_checkpoint(path: str | os.PathLike, map_location: torch.device | str = "cpu") -> dict[str, Any]:
    """Load a checkpoint safely (weights_only, no fallback) with its tensors on `map_location`."""
    path = Path(path)
    if path.is_dir():
        path = path / "last.pt"
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        first = str(error).strip().splitlines()[0]
        raise CheckpointError(f"{path} is not a safe checkpoint (refused to unpickle: {first})") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as error:
        raise CheckpointError(f"{path} is truncated or corrupt ({str(error).strip().splitlines()[0]})") from None
    if not isinstance(state, dict) or "model" not in state:
        raise CheckpointError(f"{path} is not a checkpoint of this project (no 'model' entry)")
    return state


def load_model_state(model: nn.Module, state_dict: dict[str, torch.Tensor], source: str) -> None:
    """Load weights into a plain (unwrapped) model, naming the first mismatches when they differ."""
    state_dict = strip_wrapper_prefixes(state_dict)
    target = model.state_dict()
    missing = [k for k in target if k not in state_dict]
    unexpected = [k for k in state_dict if k not in target]
    mismatched = [f"{k} {tuple(state_dict[k].shape)} vs {tuple(v.shape)}"
                  for k, v in target.items() if k in state_dict and state_dict[k].shape != v.shape]
    if missing or unexpected or mismatched:
        details = "; ".join(part for part in (
            f"missing {', '.join(missing[:3])}" if missing else "",
            f"unexpected {', '.join(unexpected[:3])}" if unexpected else "",
            f"shape {', '.join(mismatched[:3])}" if mismatched else "",
        ) if part)
        raise CheckpointError(f"{source} does not fit this model: {details}")
    model.load_state_dict(state_dict)
