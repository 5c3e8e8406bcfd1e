"""The README's quick tier, `python -m pytest -m "not slow" -n auto`: one pytest-xdist worker a usable core, at most
four (tests/conftest.py), so that a laptop's cores all work and a large machine is not flooded with processes that
each import torch."""

from __future__ import annotations

import os

import conftest
import pytest


@pytest.mark.parametrize(("cores", "workers"), [(1, 1), (2, 2), (4, 4), (64, 4)])
def test_auto_takes_a_worker_a_usable_core_and_at_most_four(monkeypatch, cores, workers):
    """`-n auto` asks the suite's hook: the cores this process may run on, capped at four."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert conftest.pytest_xdist_auto_num_workers(None) == workers
