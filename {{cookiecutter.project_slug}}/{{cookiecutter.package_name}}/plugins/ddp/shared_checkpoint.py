"""The checkpoint a resume starts from, the same bytes on every rank: rank 0's file, sent to the ranks that lack it.

Only rank 0 writes checkpoints, and rank 0 decides what a resume continues from. On a filesystem
every node mounts, every rank reads that same file; on node-local disks another node has no such
file, or an old copy of it. Each rank hashes what it finds at rank 0's path, and the ranks whose
digest differs get rank 0's bytes over the host-side (gloo) group, kept in a temporary file.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import socket
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

_CHUNK = 1 << 22


def checkpoint_file(path: str | os.PathLike) -> Path:
    """The file a --resume path means: itself, or a run folder's last.pt."""
    path = Path(path)
    return path / "last.pt" if path.is_dir() else path


def _digest(path: Path) -> str | None:
    """SHA-256 of the file at `path`, None when this rank cannot read one there."""
    try:
        with open(path, "rb") as handle:
            digest = hashlib.sha256()
            while block := handle.read(_CHUNK):
                digest.update(block)
            return digest.hexdigest()
    except OSError:
        return None


def _received_copy(data: torch.Tensor) -> str:
    """rank 0's bytes in a temporary file of this process (removed at exit); its path."""
    handle, name = tempfile.mkstemp(prefix="resume-", suffix=".pt")
    with os.fdopen(handle, "wb") as file:
        file.write(data.numpy().tobytes())
    atexit.register(lambda: Path(name).unlink(missing_ok=True))
    return name


def rank0_copy(processes, path: str) -> tuple[str, str | None]:
    """Where this rank reads rank 0's checkpoint `path`: the path itself, or a copy rank 0 sent; with rank 0's note.

    The note (rank 0 only, None when no rank lacked the file) names the ranks and nodes that got a copy.
    Call on every rank at once.
    """
    file = checkpoint_file(path)
    mine = (_digest(file), socket.gethostname())
    everyone = processes.gather(mine)
    wanting = [(rank, host) for rank, (digest, host) in enumerate(everyone) if digest != everyone[0][0]]
    if not wanting or everyone[0][0] is None:  # rank 0 without it: every rank reads (and refuses) alike
        return path, None
    size = processes.from_main(file.stat().st_size if processes.is_main() else 0)
    data = (torch.frombuffer(bytearray(file.read_bytes()), dtype=torch.uint8) if processes.is_main()
            else torch.empty(size, dtype=torch.uint8))
    dist.broadcast(data, src=0, group=processes.control)
    names = ", ".join(f"rank {rank} on {host}" for rank, host in wanting)
    note = (f"resume: {names} did not have {file} as rank 0 has it (node-local disk?); sent rank 0's copy "
            f"({size / 2**20:.1f} MiB)")
    if mine[0] == everyone[0][0]:
        return path, note if processes.is_main() else None
    return _received_copy(data), None
