"""The single source of truth for the run's device, and the training configuration.

`DEVICE` is set once, at start-up, by `configure_device` (called by the CLIs only). Library
code takes the device as an argument. Read it as `config.DEVICE`, never
`from .config import DEVICE`: that copies the value at import time and goes stale.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import time
import types
import typing
from collections.abc import Mapping
from typing import Any

import torch

from .devkit import resolve_device
from .errors import ConfigError

PACKAGE = "{{ cookiecutter.package_name }}"
DEFAULT_DEVICE = "{{ cookiecutter.default_device }}"  # chosen when the project was generated
DEVICE_ENV_VAR = f"{PACKAGE.upper()}_DEVICE"

DEVICE: torch.device | None = None  # None until configure_device() runs

# Import paths (`package.module:Name`) that checkpoints and config.json files may name without --allow-import:
# list your own backbone or dataset here once, and resume, evaluate and predict need no flag for it.
TRUSTED_IMPORTS: tuple[str, ...] = ()
# The settings whose value may be an import path, and when it is one (the same tests backbones.py and
# data/folders.py apply before importing)
_IMPORTS_IN = {"backbone": re.compile(r":"), "data": re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")}


def device_spec(cli_value: str | None = None) -> str:
    """The device spec in force: the --device flag, else the environment variable, else the default."""
    if cli_value is not None:  # an explicit value, even an empty one, is never replaced
        return cli_value
    return os.environ.get(DEVICE_ENV_VAR) or DEFAULT_DEVICE


def configure_device(cli_value: str | None = None) -> torch.device:
    """Resolve the run's device once and record it in `config.DEVICE`."""
    global DEVICE
    DEVICE = resolve_device(device_spec(cli_value))
    return DEVICE


def trusted_imports(*named: str | None) -> frozenset[str]:
    """The import paths files may name in this process: those the user `named` (flags) and TRUSTED_IMPORTS."""
    return frozenset(name for name in named if name) | frozenset(TRUSTED_IMPORTS)


def check_imports(values: Mapping, trusted: frozenset[str], source: str,
                  keys: tuple[str, ...] = ("backbone", "data")) -> None:
    """Refuse a file's import path the user did not name: what a file says never decides what code runs.

    Checkpoints and config.json files come from elsewhere; an import path in them (under `keys`, the ones
    the caller would use) would run its module's code on load. ConfigError, one line, before any import.
    """
    for key in keys:
        pattern, value = _IMPORTS_IN[key], values.get(key)
        if isinstance(value, str) and pattern.search(value) and value not in trusted:
            raise ConfigError(f"{source}: {key} names the import path {value!r}; code a file names runs only if "
                              f"you name it too: add --allow-import {value} if you trust that module")


UNIONS = (typing.Union, types.UnionType)  # `Optional[X]` and `X | None`
# The JSON values each annotation (or its origin: list[str] -> list) takes; a float may be written 2, a tuple is a list
JSON_KINDS = {type(None): type(None), bool: bool, int: int, float: (int, float), str: str, list: list, tuple: list}


def value_fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a TrainConfig annotation (bool is not a number here, None only if optional)."""
    options = typing.get_args(hint) if typing.get_origin(hint) in UNIONS else (hint,)
    kinds = tuple(JSON_KINDS.get(typing.get_origin(option) or option, ()) for option in options)
    return isinstance(value, kinds) and (bool in options or not isinstance(value, bool))


def type_name(hint: Any) -> str:
    """`int`, `str | None`: an annotation as it is written."""
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and job schedulers narrow)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _local_ranks() -> int:
    """The ddp ranks sharing this node's cores (torchrun's LOCAL_WORLD_SIZE; 1 without torchrun)."""
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", 1)))


def default_workers() -> int:
    """Loader workers for one process: the cores it may use, shared by the ddp ranks on this node, one left
    for the process itself. Not capped: a JPEG costs a worker 10-15 ms (benchmarks/README.md), so a GPU that
    trains thousands of images a second needs every core a host has."""
    return max(0, usable_cores() // _local_ranks() - 1)


def default_threads() -> int:
    """torch's CPU threads for one process: OMP_NUM_THREADS where set (torchrun sets 1 for several ranks a node),
    else this rank's share of the cores idle now, at least 1. Takes a tenth of a second: called once, at start-up.

    A second thread makes an epoch faster on an idle machine but several times slower on a busy one, where
    torch's threads wait on each other for a core (benchmarks/README.md, "Wall time against torchvision's
    reference script, and the thread default").
    """
    cores = usable_cores()
    if os.environ.get("OMP_NUM_THREADS", "").strip().isdecimal():  # not isdigit(): int() refuses "²"
        return min(max(1, int(os.environ["OMP_NUM_THREADS"])), cores)
    idle = idle_fraction()
    if idle is None:  # no measure of the machine's load: the choice that is never slow
        return 1
    return max(1, min(cores // _local_ranks(), round(idle * cores)))


def idle_fraction(seconds: float = 0.1) -> float | None:
    """The share of the host's CPU time left idle over the next `seconds` (Linux's /proc/stat), this process
    sleeping meanwhile; None where the kernel does not say. Not the load average: a minute late, it would
    call a machine busy for a minute after a job ends."""
    def idle_and_total() -> tuple[int, int]:
        with open("/proc/stat") as stat:  # "cpu  user nice system idle iowait irq softirq steal ...", in ticks
            ticks = [int(value) for value in stat.readline().split()[1:9]]
        return ticks[3] + ticks[4], sum(ticks)

    try:
        idle_before, total_before = idle_and_total()
        time.sleep(seconds)
        idle_after, total_after = idle_and_total()
    except (OSError, ValueError, IndexError):
        return None
    return (idle_after - idle_before) / max(1, total_after - total_before)


@dataclasses.dataclass
class TrainConfig:
    """Everything a training run depends on; saved as config.json and inside checkpoints."""

    data: str | None = None  # class folders (train/ val/, or split by val_split), a labels .csv, or module:function
    # (data/folders.py); None means the demo data
    device: str = DEFAULT_DEVICE  # a spec for resolve_device: --device, else $<PACKAGE>_DEVICE, else this
    epochs: int = 3
    batch_size: int = 32
    lr: float = 2e-3
    weight_decay: float = 0.05
    label_smoothing: float = 0.0
    workers: int = dataclasses.field(default_factory=default_workers)  # loader processes; 0: decode in this one
    seed: int = 0
    image_size: int | None = None  # None: the demo's size, the weights' preprocessing, or the data's typical size
    augment: str = "none"  # training augmentation recipe: none | light | standard (data/transforms.py)
    threads: int | None = None  # torch CPU threads (set_num_threads); None: default_threads() at start-up
    backbone: str = "{{ cookiecutter.backbone }}"
    pretrained: bool = {{ "True" if cookiecutter.pretrained == "yes" else "False" }}
    pretrained_file: str | None = None  # a timm model's weights from this file instead of the hub (safetensors)
    precision: str = "{{ cookiecutter.default_precision }}"  # fp32 | fp16 | bf16
    parallel: str = "{{ cookiecutter.multi_gpu }}"  # none | dp | ddp
    channels_last: bool | None = None  # NHWC; None: on when autocasting on CUDA (training/hardware.py)
    decode: str = "auto"  # where JPEGs are decoded: auto | cpu (| device: the gpu_decode answer's plugin)
    cache_images: bool = False  # decode train/ and val/ once into memory (uint8, resized)
    cache_budget_mb: int = 2048  # --cache-images refuses a dataset that needs more memory
    compile: bool = False
    out: str | None = None  # None: a new runs/<timestamp>, with runs/latest pointing at it (training/run_folder.py)
    resume: str | None = None  # a checkpoint file, a run directory, or "auto" (OUT/last.pt if it exists)
    overwrite: bool = False  # let a fresh run replace the checkpoints in --out
    max_bad_fraction: float = 0.01  # unreadable images are skipped; more than this fraction of a split stops the run
    save_every_minutes: float = 0.0  # also write a mid-epoch last.pt this often; 0: at epoch ends and on signals
    progress: str = "auto"  # auto (a bar on a terminal, plain lines in a log file) | bar | lines | none
    logger: str = "{{ cookiecutter.tracker }}"  # csv (= none: metrics.csv only) | the tracker this project was made with
    # How a folder of class folders divides into train and val (data/splits.py)
    val_split: float = 0.2  # --data of class folders without train/ and val/: this fraction of each class validates
    resplit: bool = False  # with --resume: divide data that changed since the run's --val-split anew (data/splits.py)
    # The optimizer and the schedule by name (training/optimization.py); lr and weight_decay above are
    # AdamW's defaults: another --optimizer brings its own unless they are given.
    optimizer: str = "adamw"  # adamw | sgd
    momentum: float = 0.9  # sgd only
    nesterov: bool = False  # sgd only
    schedule: str = "cosine"  # cosine | step | constant, per optimizer step, after the warmup
    step_epochs: int = 10  # --schedule step: multiply the lr by step_gamma every this many epochs
    step_gamma: float = 0.1
    warmup_epochs: int = 0  # linear learning-rate warmup before the schedule
    accum_steps: int = 1  # batches whose gradients add up to one optimizer step
    clip_grad: float | None = None  # clip the gradients' total norm to this; None: no clipping
    patience: int | None = None  # stop when val_acc has not improved for this many epochs; None: never
    init_from: str | None = None  # a checkpoint whose weights start this run; a fresh head if the classes differ
    # Import paths a checkpoint or --config file may name (check_imports); this process's own, never a file's
    allow_import: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict:
        """Plain values only, so it fits in JSON and in a weights_only checkpoint."""
        return dataclasses.asdict(self)


def config_class(plugins=()) -> type[TrainConfig]:
    """TrainConfig with the fields of the plugins' own settings (`Plugin.settings`) beside the core's."""
    return _with_settings(tuple(plugin.settings for plugin in plugins if plugin.settings is not None))


@functools.cache  # one class per set of plugins: settling twice gives the same type
def _with_settings(settings: tuple[type, ...]) -> type[TrainConfig]:
    return dataclasses.make_dataclass("TrainConfig", [], bases=(TrainConfig, *settings)) if settings else TrainConfig
