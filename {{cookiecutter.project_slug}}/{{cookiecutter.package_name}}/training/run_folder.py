"""Where a run writes, and what it continues from: one folder per run, never another run's results.

- No `--out`: a new folder `runs/<timestamp>`, and `runs/latest` (a symlink) points at it, so
  `evaluate.py runs/latest/best.pt` always means the newest run.
- `--out DIR` already holding a checkpoint: refused, unless `--resume`, `--resume auto` or
  `--overwrite` says what to do with it.
- `--resume auto`: continue from `OUT/last.pt` when it exists, else start fresh. A job restarted
  by `torchrun --max-restarts` or requeued by a scheduler re-runs the same command and continues.
- `--resume PATH` without `--out`: the run continues in PATH's folder.

Decisions (`plan`) are made by rank 0 and shared with the other ranks. Before the first file is
written, rank 0 `claim`s the folder: it creates a new runs/<timestamp> exclusively (another run
that started in the same second gets a suffix) and takes an OS lock (`flock`) on `OUT/.lock`
for as long as the run lasts. The lock belongs to the open file, so the kernel releases it when
the process ends in any way, SIGKILL included: no stale lock is ever left to clear by hand. A
second run on a locked folder is refused (RunDirError, exit 2) before it writes anything. A folder
deleted while its run holds it is not recreated: the run's next save stops it (RunFolderLost, exit 1).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import ConfigError, RunFailure

RUNS_ROOT = Path("runs")
LATEST = "latest"
RUN_FILES = ("last.pt", "best.pt", "metrics.csv", "curves.png")  # what --overwrite removes
LOCK_FILE = ".lock"
NAME_MAX = 255  # bytes in one file or folder name: ext4, XFS, Btrfs, APFS, NTFS (in UTF-16 units)
_CLAIMED: dict[str, int] = {}  # the absolute path of each run folder this process locked -> its lock's descriptor


def _drop_locks_in_child() -> None:
    """After a fork (DataLoader workers): the child closes its copies of the lock descriptors.

    An flock belongs to the open file, which a forked child shares: a persistent worker that outlived
    the run would otherwise keep the folder locked after the run ended.
    """
    for fd in _CLAIMED.values():
        os.close(fd)
    _CLAIMED.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_locks_in_child)


class RunDirError(ConfigError):
    """--out names another run's folder and no flag says whether to continue or replace it."""


class RunFolderLost(RunFailure):
    """The run folder was deleted or replaced while the run held it: writing there would recreate it unlocked."""


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


def resume_source(out: str | None, resume: str | None) -> str | None:
    """The checkpoint a run with these --out and --resume continues (None: it starts afresh); reads nothing."""
    if resume == "auto":
        return str(Path(out) / "last.pt") if out is not None and (Path(out) / "last.pt").is_file() else None
    return resume


def _check_writable_place(folder: Path) -> None:
    """Refuse an --out that is a file, or inside one, or a name no file system takes (RunDirError)."""
    for part in folder.parts:  # before any folder of it is made; beyond it the kernel's answer is an OSError
        if len(os.fsencode(part)) > NAME_MAX:
            raise RunDirError(f"--out: the name {part[:40]}... is {len(os.fsencode(part))} bytes long; file systems "
                              f"take at most {NAME_MAX} bytes per folder name")
    for place in (folder, *folder.parents):
        if place.exists():
            if not place.is_dir():
                raise RunDirError(f"--out {folder}: {place} is a file, not a folder")
            return


def plan(out: str | None, resume: str | None, overwrite: bool) -> Plan:
    """Decide the run folder and the checkpoint to continue from; raise RunDirError/ConfigError when unsafe."""
    if resume is not None and overwrite:
        raise ConfigError("--overwrite starts afresh; it cannot be combined with --resume")
    if out is not None:
        _check_writable_place(Path(out))
    if resume == "auto":
        if out is None:
            raise ConfigError("--resume auto needs --out DIR: the folder a restarted job continues in")
        last = resume_source(out, resume)
        note = f"continuing from {last}" if last else f"no {Path(out) / 'last.pt'} yet, starting fresh"
        return Plan(Path(out), last, f"resume auto: {note}")
    if resume is not None:
        source = Path(resume)
        return Plan(Path(out) if out else (source if source.is_dir() else source.parent), resume)
    if out is None:
        return Plan(RUNS_ROOT / time.strftime("%Y%m%d-%H%M%S"), None, link_latest=True)  # claim makes it new
    folder = Path(out)
    if holds_checkpoint(folder) and not overwrite:
        raise RunDirError(f"{folder} holds another run's checkpoints; continue it with --resume {folder} "
                          f"(or --resume auto), or replace it with --overwrite")
    return Plan(folder, None)


def _create(plan: Plan) -> Path:
    """The plan's folder, made now: a new runs/<timestamp> exclusively (-2, -3, ... when taken), any other as needed."""
    if not plan.link_latest:
        plan.out.mkdir(parents=True, exist_ok=True)
        return plan.out
    plan.out.parent.mkdir(parents=True, exist_ok=True)
    for count in itertools.count(1):
        folder = plan.out.with_name(f"{plan.out.name}-{count}" if count > 1 else plan.out.name)
        with contextlib.suppress(FileExistsError):
            folder.mkdir()  # not exist_ok: two runs started in the same second must not share a folder
            return folder


def _lock(folder: Path):
    """An open OUT/.lock holding an exclusive flock (None where the OS has no flock); RunDirError when taken."""
    try:
        import fcntl
    except ImportError:  # Windows: no flock; the folder is not locked there
        return None
    handle = open(folder / LOCK_FILE, "a")  # never truncated: the file only carries the lock
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise RunDirError(f"{folder} is in use by another training run (it holds {folder / LOCK_FILE}); "
                          "wait for it to end, or choose another --out") from None
    _CLAIMED[os.path.abspath(folder)] = handle.fileno()
    return handle


@contextlib.contextmanager
def claim(plan: Plan, overwrite: bool = False) -> Iterator[Path]:
    """Create and lock the plan's folder for the duration of the block; yield the folder (RunDirError if not ours).

    A fresh start checks again, under the lock, that no other run has left a checkpoint there since `plan`.
    """
    try:
        folder = _create(plan)
        handle = _lock(folder)
    except OSError as error:  # a read-only file system, no permission, a file in the way, a full disk
        raise RunDirError(f"cannot write the run folder {plan.out}: {error.strerror or error}") from None
    try:
        if plan.resume is None and not overwrite and holds_checkpoint(folder):
            raise RunDirError(f"{folder} holds another run's checkpoints, written while this run was starting; "
                              f"continue it with --resume {folder}, or replace it with --overwrite")
        yield folder
    finally:
        if handle is not None:
            _CLAIMED.pop(os.path.abspath(folder), None)
            handle.close()  # releases the lock


def check_outside_data(out: Path, data: str | None) -> None:
    """Refuse a run folder inside --data (RunDirError): its checkpoints and curves.png would become data.

    In a folder of class folders the run folder would be listed as a class on the next run (or
    by evaluate.py), with the run's PNGs as its images.
    """
    if data is None:
        return
    folder, root = Path(os.path.abspath(out)), Path(os.path.abspath(data))
    if folder == root or root in folder.parents:
        raise RunDirError(f"--out {out} is inside --data {data}: the run's files would become part of the data; "
                          "choose an --out outside it")


def check_claimed(folder: str | os.PathLike) -> None:
    """Before writing into `folder`: when it is a run folder this process holds, it must still be the one locked.

    A folder deleted (or deleted and made again) while training has lost its lock and config.json; a
    save would recreate it unlocked, so a second run could start there. RunFolderLost says so instead.
    The lock file's identity (device, inode) against the descriptor held tells, with no extra file.
    """
    fd = _CLAIMED.get(os.path.abspath(folder))
    if fd is None:
        return
    held = os.fstat(fd)
    try:
        now = os.stat(Path(folder) / LOCK_FILE)
    except OSError:
        now = None
    if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
        raise RunFolderLost(f"the run folder {folder} was deleted or replaced while this run held it; "
                            "stopping without writing there (nothing was saved)")


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
