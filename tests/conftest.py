"""Fixtures for the template's tests: a session-wide bake cache and an isolated cookiecutter config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import VERSION_TIMINGS, Bakery


def pytest_configure(config):
    """Register the marker for tests that run baked projects in subprocesses."""
    config.addinivalue_line("markers", "slow: runs a baked project's code in a subprocess")


def pytest_terminal_summary(terminalreporter, config):
    """What each entry of the version matrix cost (tests/test_versions.py), where any ran."""
    lines = config.stash.get(VERSION_TIMINGS, [])
    if lines:
        terminalreporter.section("version matrix: seconds to install, run the quick tier, run the export round trips")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def bakery(cookies_session) -> Bakery:
    """One shared cache of bakes for the whole session."""
    return Bakery(cookies_session)


@pytest.fixture
def cli_config(tmp_path: Path) -> Path:
    """A cookiecutter config file that keeps replays and clones inside the test's temp dir."""
    config = tmp_path / "cookiecutter-config.yaml"
    config.write_text(
        f"cookiecutters_dir: {json.dumps(str(tmp_path / 'cookiecutters'))}\n"
        f"replay_dir: {json.dumps(str(tmp_path / 'replay'))}\n",
        encoding="utf-8",
    )
    return config
