"""What the ddp tests share: torchrun's environment for a process that joins a group itself, and a free port."""

from __future__ import annotations

import socket

TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "TORCHELASTIC_RESTART_COUNT")


def free_port() -> int:
    """A TCP port nothing listens on right now (a process group's store, a rendezvous)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def torchrun_env(monkeypatch, rank: int = 0, world_size: int = 1) -> None:
    """The environment torchrun gives a worker (one that was never restarted), on a free port of this machine."""
    for name in TORCHRUN_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in {"RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": world_size, "LOCAL_WORLD_SIZE": world_size,
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": free_port()}.items():
        monkeypatch.setenv(name, str(value))
