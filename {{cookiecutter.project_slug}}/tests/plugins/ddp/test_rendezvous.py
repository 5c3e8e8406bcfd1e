"""How ranks meet: one attempt name for every rank despite an earlier attempt's keys, and the loopback warning."""

from __future__ import annotations

import concurrent.futures
from datetime import timedelta

import pytest
import torch.distributed as dist
from conftest import HANG_S

from {{ cookiecutter.package_name }}.plugins.ddp import rendezvous


def _agree(store: dist.Store, world_size: int) -> list[str]:
    """Every rank's agreed_attempt, each in its own thread (as each rank is its own process)."""
    with concurrent.futures.ThreadPoolExecutor(world_size) as pool:
        return list(pool.map(lambda rank: rendezvous.agreed_attempt(store, rank, world_size), range(world_size)))


@pytest.fixture
def store():
    """A real TCPStore (torchrun's kind of store), served in this process on a free port."""
    return dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=60), wait_for_workers=False)


def test_every_rank_of_an_attempt_gets_the_same_name_and_the_next_attempt_another(store):
    """Three attempts in one store (an elastic restart reuses it): one name per attempt, never an earlier one."""
    names = [_agree(store, 4) for _ in range(3)]
    assert all(len(set(attempt)) == 1 for attempt in names), names
    assert len({attempt[0] for attempt in names}) == 3, names


def test_ranks_that_restarted_a_different_number_of_times_still_meet(store):
    """Rank 1 finds the previous attempt's record (with its predecessor's hello) and waits for this attempt's."""
    first = _agree(store, 2)[0]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        follower = pool.submit(rendezvous.agreed_attempt, store, 1, 2)  # starts alone, among stale keys
        leader = pool.submit(rendezvous.agreed_attempt, store, 0, 2)
        assert follower.result(timeout=HANG_S) == leader.result(timeout=HANG_S) != first


@pytest.fixture
def two_nodes(monkeypatch):
    """The environment torchrun gives a worker of a two-node job whose rendezvous host is another machine."""
    for name, value in {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "192.0.2.10"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)


def test_a_host_name_on_loopback_in_a_multi_node_run_gets_one_line_naming_the_fix(two_nodes):
    """`localhost` stands for a node whose /etc/hosts maps its name to 127.0.1.1: the line names both variables."""
    note = rendezvous.loopback_host_note("localhost")
    assert note is not None and "\n" not in note
    assert "GLOO_SOCKET_IFNAME" in note and "NCCL_SOCKET_IFNAME" in note and "loopback" in note


@pytest.mark.parametrize("change", ["one node", "interface chosen", "rendezvous on this host", "name elsewhere"])
def test_no_loopback_line_where_loopback_works_or_the_interface_is_set(two_nodes, monkeypatch, change):
    """One node, GLOO_SOCKET_IFNAME set, every agent on this machine, or a routable name: nothing to say."""
    if change == "name elsewhere":
        assert rendezvous.loopback_host_note("192.0.2.11") is None
        return
    if change == "one node":
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    elif change == "interface chosen":
        monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth0")
    else:
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert rendezvous.loopback_host_note("localhost") is None
