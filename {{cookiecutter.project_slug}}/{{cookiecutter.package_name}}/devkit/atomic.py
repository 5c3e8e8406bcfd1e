"""Files written atomically: readers, and a process killed at any instant, see the old file or the new one.

Each write goes to a temporary file in the same folder (os.replace is atomic only within one file system),
is flushed and fsynced, then renamed onto its name, and the folder is fsynced so the rename survives a power
cut. A full disk is a DiskFullError naming the file, and the temporary file is removed. A checkpoint
(checkpoint.py), config.json, metrics.csv and the plots are all written through here. Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO

_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}  # a full disk, or a full quota


class DiskFullError(OSError):
    """A file could not be written for lack of space (or quota); the message names the file."""


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt, unsafe, or for another model (checkpoint.py's; defined here, with the
    standard library only, so a script can name it before torch loads and checkpoint.py still copies with this file
    alone)."""


def _fsync_directory(folder: Path) -> None:
    """Make a rename in `folder` durable across a power cut (POSIX; Windows cannot open folders)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _replacing(path: Path) -> Iterator[Path]:
    """A temp name beside `path` for the block to fill and fsync; then it is os.replace'd onto `path`.

    On any error the temp file is removed (a full disk is a DiskFullError); after the replace the
    folder is fsynced.
    """
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as error:
        tmp.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.errno in _NO_SPACE:
            full = DiskFullError(f"no space left on device: cannot write {path}")
            full.errno = error.errno
            raise full from None
        raise
    _fsync_directory(path.parent)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """Yield a temp file beside `path` (mode "wb" or "w"); on success fsync it and os.replace it onto `path`.

    Readers, and a process killed at any instant, see the old file or the new one, never half.
    The temp file lives in the same folder because os.replace is atomic only within one file
    system, and it is created with mode 0o666 so the umask decides the permissions, as for a
    plain open() (mkstemp's 0600 would hide a run from teammates).
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_file writes whole files: mode 'wb' or 'w', not {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _replacing(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": ""})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())


def atomic_link(source: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Give `path` the bytes of `source` (a file already on disk) atomically: a hard link, else an fsynced copy.

    Files written through atomic_file are only ever replaced, never changed in place, so two names
    for one inode stay correct when either is replaced later.
    """
    path = Path(path)
    with _replacing(path) as tmp:
        try:
            os.link(source, tmp)
        except OSError:  # a file system without hard links: copy the bytes instead
            shutil.copyfile(source, tmp)
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
    return path


def atomic_write(path: str | os.PathLike, data: bytes | str) -> Path:
    """Replace `path` with `data` (bytes, or text written as UTF-8) atomically."""
    with atomic_file(path, "wb" if isinstance(data, bytes) else "w") as handle:
        handle.write(data)
    return Path(path)


def remove_partial_writes(folder: str | os.PathLike) -> list[Path]:
    """Delete the temp files (`.NAME.*.tmp`) that processes killed inside atomic_file left in `folder`.

    Call it only while no other process writes there (train.py does so when resuming).
    """
    stale = sorted(Path(folder).glob(".*.tmp"))
    for path in stale:
        path.unlink(missing_ok=True)
    return stale
