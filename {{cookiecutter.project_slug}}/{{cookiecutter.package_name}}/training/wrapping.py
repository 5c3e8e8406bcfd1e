"""The model the steps run through: DataParallel, or the processes' own wrapper (DDP), and/or torch.compile.

The modes `--parallel` chooses from:
- `none`: one process, one device.
- `dp`:   one process driving every visible GPU through `nn.DataParallel` (simple, slower).
- what a plugin adds: `ddp`, one process per device under torchrun (the ddp answer's plugins/ddp).
An explicit request that cannot run here stops with a ParallelError (exit 2); the template's
default mode, when it cannot apply on this machine, falls back to one device with a note.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

import torch
from torch import nn

from .. import hooks
from ..config import PARALLEL_MODES
from ..devkit.placement import data_parallel
from ..errors import UserError
from ..processes import Processes

MODES = PARALLEL_MODES  # what ddp adds is the plugin's (hooks.choices)


class ParallelError(UserError):
    """The requested parallel mode (or --compile) cannot run on this machine."""


def _launched_together() -> int:
    """How many processes a launcher (torchrun) started to train together; 1 when none did."""
    return int(os.environ.get("WORLD_SIZE", 1)) if "LOCAL_RANK" in os.environ else 1


def why_not(mode: str, device: torch.device, plugins=()) -> str | None:
    """Why `mode` cannot run on `device` in this process, or None when it can (a plugin judges its own modes)."""
    owner = next((plugin for plugin in plugins if mode in plugin.choices().get("parallel", ())), None)
    if owner is not None:
        return owner.unavailable("parallel", mode, device)
    if mode not in MODES:
        return f"unknown mode; choose one of {', '.join(hooks.choices(plugins, 'parallel', MODES))}"
    if _launched_together() > 1:
        return (f"torchrun started {_launched_together()} processes, which would train {_launched_together()} "
                "separate models; use --parallel ddp (a project generated with multi_gpu=ddp)")
    if mode == "dp" and torch.cuda.device_count() < 2:  # 0 without CUDA
        return f"dp needs 2+ CUDA devices, found {torch.cuda.device_count()}"
    if mode == "dp" and device.type != "cuda":
        return f"dp runs on CUDA devices, not {device}"
    return None


def resolve_parallel(requested: str | None, default: str, device: torch.device, plugins=()) -> tuple[str, str | None]:
    """The mode to run and a note for the user when the default fell back to one device.

    An explicit request is honoured or refused (ParallelError); a default that cannot apply falls back.
    """
    if requested is not None:
        reason = why_not(requested, device, plugins)
        if reason:
            raise ParallelError(f"--parallel {requested}: {reason}")
        return requested, None
    together = hooks.choices(plugins, "parallel", ())
    if _launched_together() > 1 and together:
        default = together[0]  # several processes were started to train together: the mode that joins them
    reason = why_not(default, device, plugins)
    if reason is None:
        return default, None
    return "none", f"parallel: {reason}; running on one device"


def check_combination(mode: str, compile: bool) -> None:
    """Refuse (ParallelError) --compile with dp: DataParallel runs the model in one thread per GPU, and
    torch.compile is not thread-safe."""
    if compile and mode == "dp":
        raise ParallelError("--compile cannot run under --parallel dp (DataParallel calls the model from one thread "
                            "per GPU; torch.compile is not thread-safe): use --parallel ddp, or leave out --compile")


def wrap_model(model: nn.Module, mode: str, device: torch.device, *, compile: bool = False,
               processes: Processes | None = None) -> nn.Module:
    """The module to train through: DataParallel, the processes' wrapper (DDP) and/or torch.compile around `model`."""
    check_combination(mode, compile)
    if compile:
        check_compile(device)
    if mode == "dp":  # the run's device first: it holds the master copy and gathers the outputs
        return data_parallel(model, device)
    model = (processes or Processes()).wrap(model, device)
    return torch.compile(model) if compile else model


def check_compile(device: torch.device) -> None:
    """Raise ParallelError with the reason when torch.compile cannot run on this machine."""
    try:
        from torch._dynamo import is_dynamo_supported
    except ImportError:  # private API moved: let torch.compile speak for itself
        return
    if not is_dynamo_supported():
        raise ParallelError("--compile: torch.compile does not support this Python/platform; run without --compile")
    if device.type == "cpu":
        search = _cpp_compiler_search()
        if search is None:  # private API moved: let torch.compile speak for itself
            return
        try:
            search()
        except Exception:  # InvalidCxxCompiler and friends
            raise ParallelError("--compile on cpu needs a C++ compiler (none found: install g++ or set CXX); "
                                "run without --compile") from None
    elif device.type in ("cuda", "xpu"):
        try:
            from torch.utils._triton import has_triton
        except ImportError:
            return
        if not has_triton():
            raise ParallelError(f"--compile on {device.type} needs triton (pip install triton); run without --compile")
        if not _triton_c_compiler():
            raise ParallelError(f"--compile on {device.type} needs a C compiler for triton (none found: install gcc "
                                "or set CC); run without --compile")


def _cpp_compiler_search() -> Callable[[], str] | None:
    """Inductor's own search for the C++ compiler it builds CPU kernels with; None where torch keeps it elsewhere."""
    try:
        from torch._inductor import cpp_builder
    except ImportError:
        return None
    # torch 2.5 made the search public as get_cpp_compiler; torch 2.4 has it as _get_cpp_compiler.
    return getattr(cpp_builder, "get_cpp_compiler", None) or getattr(cpp_builder, "_get_cpp_compiler", None)


def _triton_c_compiler() -> str | None:
    """The C compiler triton builds its kernel launchers with, found as triton finds it: $CC, else gcc or clang."""
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
