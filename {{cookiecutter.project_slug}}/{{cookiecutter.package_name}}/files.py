"""Files from elsewhere, read with bounds: a regular file, inside the folder it came in, no larger than its kind.

A model folder, a run folder or a data folder may come from a tar, a git clone or a share, which keep what a
file system holds: its config.json may be a FIFO (reading waits forever), a link to /dev/zero (reading never
ends) or a link to a file outside the folder. `read_bounded` opens without waiting, checks what it opened (on
the open file, so a swap in between changes nothing), and reads at most `limit` bytes. Anything else is
FileRefused: a UserError, so one line and exit 2. A missing file is FileNotFoundError, for callers to whom
absence means something ("no cache", "no record").
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import UserError

MiB, GiB = 2**20, 2**30
JSON_LIMIT = 16 * MiB  # a config.json or metadata: settings and class names (21,843 ImageNet names take 0.4 MB)
_KINDS = {stat.S_IFIFO: "a named pipe (FIFO)", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}


class FileRefused(UserError):
    """A file from elsewhere that is not a regular file inside its folder, or larger than its kind can be."""


def read_bounded(path: str | os.PathLike, limit: int, *, within: str | os.PathLike | None = None) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes (inside the folder `within`, links resolved)."""
    path = Path(path)
    if within is not None and not path.resolve().is_relative_to(Path(within).resolve()):
        raise FileRefused(f"{path} links to {path.resolve()}, outside {within}; refused (copy the file in instead)")
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer that never comes
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise FileRefused(f"cannot read {path}: {error.strerror or error}") from None
    with os.fdopen(fd, "rb", buffering=0) as handle:
        mode, size = os.fstat(fd).st_mode, os.fstat(fd).st_size
        if not stat.S_ISREG(mode):
            kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
            raise FileRefused(f"{path} is {kind}, not a regular file; refused")
        if size > limit:
            raise FileRefused(f"{path} is {size:,} bytes, more than such a file can be (at most {limit:,}); refused")
        chunks, total = [], 0
        while total <= size:  # one read below 2 GiB (the kernel's largest); a file that grew: one byte more
            chunk = handle.read(size + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    if total > size:
        raise FileRefused(f"{path} grew while it was read; refused")
    return b"".join(chunks)  # one chunk: the same bytes object, not a copy


def read_text(path: str | os.PathLike, limit: int, *, within: str | os.PathLike | None = None) -> str:
    """`read_bounded`, decoded as UTF-8 (a byte-order mark dropped); FileRefused when it is not text."""
    try:
        return read_bounded(path, limit, within=within).decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise FileRefused(f"{path} is not UTF-8 text ({error.reason} at byte {error.start})") from None
