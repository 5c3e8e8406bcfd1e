"""Where a run writes, and what it continues from: one folder per run, never another run's results.

- No `--out`: a new folder `runs/<timestamp>`, and `runs/latest` (a symlink) points at it, so
  `evaluate.py runs/latest/best.pt` always means the newest run.
- `--out DIR` already holding a checkpoint: refused, unless `--resume`, `--resume auto` or
  `--overwrite` says what to do with it.
- `--resume auto`: continue from `OUT/last.pt` when it exists, else start fresh. A job restarted
  by `torchrun --max-restarts` or requeued by a scheduler re-runs the same command and continues.
- `--resume PATH` without `--out`: the run continues in PATH's folder.

Decisions only (`plan`); rank 0 makes them and train.py shares them with the other ranks.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from ..errors import ConfigError

RUNS_ROOT = Path("runs")
LATEST = "latest"
RUN_FILES = ("last.pt", "best.pt", "metrics.csv", "curves.png")  # what --overwrite removes


class RunDirError(ConfigError):
    """--out names another run's folder and no flag says whether to continue or replace it."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """The run folder, the checkpoint to continue from (None: a fresh start) and what to tell the user."""

    out: Path
    resume: str | None
    note: str | None = None
    link_latest: bool = False  # a new runs/<timestamp> folder: point runs/latest at it


def holds_checkpoint(folder: Path) -> bool:
    """Whether `folder` holds a training checkpoint of some run."""
    return any((folder / name).is_file() for name in ("last.pt", "best.pt"))


def new_run_name(root: Path = RUNS_ROOT) -> str:
    """A timestamp no folder under `root` uses yet (a suffix when two runs start in the same second)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name, count = stamp, 1
    while (root / name).exists():
        count += 1
        name = f"{stamp}-{count}"
    return name


def plan(out: str | None, resume: str | None, overwrite: bool) -> Plan:
    """Decide the run folder and the checkpoint to continue from; raise RunDirError/ConfigError when unsafe."""
    if resume is not None and overwrite:
        raise ConfigError("--overwrite starts afresh; it cannot be combined with --resume")
    if resume == "auto":
        if out is None:
            raise ConfigError("--resume auto needs --out DIR: the folder a restarted job continues in")
        folder = Path(out)
        if (folder / "last.pt").is_file():
            return Plan(folder, str(folder / "last.pt"), f"resume auto: continuing from {folder / 'last.pt'}")
        return Plan(folder, None, f"resume auto: no {folder / 'last.pt'} yet, starting fresh")
    if resume is not None:
        source = Path(resume)
        return Plan(Path(out) if out else (source if source.is_dir() else source.parent), resume)
    if out is None:
        return Plan(RUNS_ROOT / new_run_name(), None, link_latest=True)
    folder = Path(out)
    if holds_checkpoint(folder) and not overwrite:
        raise RunDirError(f"{folder} holds another run's checkpoints; continue it with --resume {folder} "
                          f"(or --resume auto), or replace it with --overwrite")
    return Plan(folder, None)


def clear_run_files(folder: Path) -> None:
    """--overwrite: remove the previous run's checkpoints, metrics and curves (nothing else in the folder)."""
    for name in RUN_FILES:
        (folder / name).unlink(missing_ok=True)


def link_latest(folder: Path) -> str | None:
    """Point `<parent>/latest` at `folder` (a relative symlink, replaced atomically); a note when it cannot."""
    latest = folder.parent / LATEST
    if latest.exists() and not latest.is_symlink():
        return f"note: {latest} is a real folder, not a link; left as it is (this run is {folder})"
    temporary = folder.parent / f".{LATEST}.{os.getpid()}.tmp"
    try:
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(folder.name, target_is_directory=True)
        os.replace(temporary, latest)
    except OSError as error:  # e.g. a filesystem without symlinks
        temporary.unlink(missing_ok=True)
        return f"note: could not point {latest} at {folder}: {error}"
    return None
