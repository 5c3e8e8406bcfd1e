"""How torchrun's processes meet: a key prefix every rank of an attempt agrees on, and the loopback check.

torchrun's workers join their process group through the store of the rank-0 agent, and that store
outlives an elastic restart with the previous attempt's keys (peer addresses) still in it. Each
attempt therefore joins under a prefix of its own. `TORCHELASTIC_RESTART_COUNT` cannot be that
prefix on several nodes: it counts per agent (the node whose worker failed counts 1, the node
restarting because that one rejoined counts 0), so the ranks would wait under different prefixes
until gloo's timeout. Rank 0 names the attempt instead, and every other rank proves the name is
this attempt's by finding its own fresh nonce beside it.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import time
import uuid

import torch.distributed as dist

from ... import config

_KEYS = f"{config.PACKAGE}/attempt/"  # beside torch's own keys in the agent's store
_POLL_S = 0.05


def agreed_attempt(store: dist.Store, rank: int, world_size: int) -> str:
    """A name for this attempt that every rank of it returns, whatever each node's agent counted."""
    deadline = time.monotonic() + store.timeout.total_seconds()
    nonce = uuid.uuid4().hex  # new in every process: nothing an earlier attempt left can equal it
    if rank == 0:
        return _lead(store, world_size, nonce, deadline)
    return _follow(store, rank, nonce, deadline)


def _lead(store: dist.Store, world_size: int, attempt: str, deadline: float) -> str:
    # A follower's hello may still be the previous attempt's until it writes its own, so the record is
    # published again until every follower acknowledged `attempt` (new in this process, so never stale).
    followers = range(1, world_size)
    while True:
        hellos = {str(rank): _read(store, f"hello/{rank}") for rank in followers}
        store.set(_KEYS + "record", json.dumps({"attempt": attempt, "hellos": hellos}))
        if all(_read(store, f"ack/{rank}") == attempt for rank in followers):
            return attempt
        _wait(deadline, "every rank to acknowledge rank 0's attempt")


def _follow(store: dist.Store, rank: int, nonce: str, deadline: float) -> str:
    store.set(_KEYS + f"hello/{rank}", nonce)
    while True:
        record = json.loads(_read(store, "record") or "{}")
        if record.get("hellos", {}).get(str(rank)) == nonce:  # rank 0 of this attempt saw this process
            store.set(_KEYS + f"ack/{rank}", record["attempt"])
            return record["attempt"]
        _wait(deadline, "rank 0 to name the attempt")


def _read(store: dist.Store, key: str) -> str | None:
    return store.get(_KEYS + key).decode() if store.check([_KEYS + key]) else None


def _wait(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise RuntimeError(f"rendezvous: timed out waiting for {what}")
    time.sleep(_POLL_S)


def _resolves_to_loopback(name: str) -> str | None:
    """The loopback address `name` resolves to here (None if it resolves elsewhere, or not at all)."""
    try:
        addresses = [info[4][0] for info in socket.getaddrinfo(name, None)]
    except OSError:
        return None
    loopback = [address for address in addresses if ipaddress.ip_address(address.split("%")[0]).is_loopback]
    return loopback[0] if loopback and len(loopback) == len(addresses) else None


def loopback_host_note(hostname: str | None = None) -> str | None:
    """One line naming the fix when this node's name resolves to a loopback address but its peers are elsewhere.

    gloo (which every ddp run uses for its per-step agreement) and nccl advertise the address the
    host name resolves to; Debian and Ubuntu map it to 127.0.1.1, which no other node can reach.
    """
    if int(os.environ.get("WORLD_SIZE", 1)) <= int(os.environ.get("LOCAL_WORLD_SIZE", 1)):
        return None  # one node: its peers are on loopback too
    if os.environ.get("GLOO_SOCKET_IFNAME"):
        return None
    name = hostname or socket.gethostname()
    address = _resolves_to_loopback(name)
    master = os.environ.get("MASTER_ADDR", "")
    if address is None or not master or _resolves_to_loopback(master):
        return None  # the rendezvous host is this one too: agents sharing one machine reach each other there
    return (f"warning: this node's name {name} resolves to {address}, a loopback address the other nodes cannot "
            f"reach (a '127.0.1.1 {name}' line in /etc/hosts?); set GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME on "
            f"GPUs) to the network interface the nodes share, e.g. GLOO_SOCKET_IFNAME=eth0")
