"""This user's signing key: what this user's own commands wrote in a format whose loader runs code is signed, and
read back only when its signature matches.

torch.export.load (a `.pt2` export) and torch.compiler.load_cache_artifacts (the compile cache) unpickle what
they read, so a file copied from elsewhere must not reach them. export.py and the compile cache sign what they
write with HMAC-SHA256 under a key only this user can read; a file whose signature does not match was made by
someone else, or changed since.

The key is 32 random bytes in `key_file()`, made on first use. One that is anything but a regular file of 32
bytes, owned by this user, mode 0600 (empty, another user's, readable by others, a link, a FIFO) is not used:
a new key replaces it, with a note, and what the old one signed is no longer trusted.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

KEY_BYTES = 32
PRIVATE = 0o600  # the key's mode: read and written by its owner only
SIGNATURE_PREFIX = "hmac-sha256:"  # a signature's text, so the file says what it holds


def key_file() -> Path:
    """Where this user's key lives: $XDG_DATA_HOME (else ~/.local/share), a folder only this user reads."""
    root = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return root / "{{ cookiecutter.package_name }}" / "signing.key"


def _read(path: Path) -> tuple[bytes | None, str | None]:
    """The key at `path`, or None and why it must not be used; FileNotFoundError when there is none."""
    try:  # O_NOFOLLOW: a link is refused, not followed (ELOOP); O_NONBLOCK: a FIFO does not hang the open
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise
    except OSError as error:
        return None, "a link" if error.errno == errno.ELOOP else error.strerror or str(error)
    with os.fdopen(fd, "rb", buffering=0) as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, "not a regular file"
        if info.st_size != KEY_BYTES:
            return None, f"{info.st_size} bytes, not {KEY_BYTES}"
        if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
            return None, "owned by another user"
        if os.name == "posix" and stat.S_IMODE(info.st_mode) != PRIVATE:
            return None, f"mode {stat.S_IMODE(info.st_mode):o}, not {PRIVATE:o}"
        key = handle.read(KEY_BYTES + 1)
    return (key, None) if len(key) == KEY_BYTES else (None, "changed while it was read")


def _make(path: Path, replace: bool) -> bytes:
    """A new key at `path` (replacing what is there, when `replace`), readable by this user only."""
    key = secrets.token_bytes(KEY_BYTES)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = path.with_name(f".{path.name}.{secrets.token_hex(4)}") if replace else path
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE)
    try:
        if hasattr(os, "fchmod"):  # exactly 0600, whatever the umask took away or left
            os.fchmod(fd, PRIVATE)
        os.write(fd, key)
        os.fsync(fd)
    finally:
        os.close(fd)
    if replace:
        os.replace(target, path)  # a link or FIFO at `path` is replaced, not written through
    return key


def user_key(*, create: bool = True) -> tuple[bytes | None, str | None]:
    """This user's key, and a note when the one found could not be used (then a new one is made). Without
    `create`, nothing is made: (None, None) where there is no key, (None, the note) where it is unusable."""
    path = key_file()
    try:
        key, problem = _read(path)
    except FileNotFoundError:
        if not create:
            return None, None
        try:
            return _make(path, replace=False), None
        except FileExistsError:  # another process made it just now: use that one
            key, problem = _read(path)
    if key is not None:
        return key, None
    note = f"the signing key {path} was {problem}, so nothing signed with it is trusted"
    if not create:
        return None, note
    return _make(path, replace=True), f"{note}; a new key was made"


def sign(data: bytes, key: bytes) -> str:
    """The signature of `data` under `key`, as text."""
    return SIGNATURE_PREFIX + hmac.new(key, data, hashlib.sha256).hexdigest()


def matches(data: bytes, signature: str, key: bytes | None) -> bool:
    """Whether `signature` is `data`'s under `key` (compared in constant time); False without a key."""
    return key is not None and hmac.compare_digest(sign(data, key).encode(), str(signature).strip().encode())
