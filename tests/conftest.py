"""Fixtures for the template's tests: a session-wide bake cache and an isolated cookiecutter config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import Bakery
from plan import RUN_FIRST

_VERSION_TIMINGS: list[str] = []  # tests/test_versions.py's lines, gathered from every worker's reports


def pytest_configure(config):
    """Register the marker for tests that run baked projects in subprocesses."""
    config.addinivalue_line("markers", "slow: runs a baked project's code in a subprocess")


def pytest_collection_modifyitems(items):
    """The longest runs first (plan.RUN_FIRST), so that xdist's workers do not end on one of them alone."""
    def rank(item) -> int:
        return next((i for i, prefix in enumerate(RUN_FIRST) if item.nodeid.startswith(prefix)), len(RUN_FIRST))

    items.sort(key=rank)  # stable: the rest keep their order


def pytest_runtest_logreport(report):
    """Keep the version matrix's timings (a test property), which reach this process from any xdist worker."""
    if report.when == "call":
        _VERSION_TIMINGS.extend(value for name, value in report.user_properties if name == "version_timings")


def pytest_terminal_summary(terminalreporter):
    """What each entry of the version matrix cost (tests/test_versions.py), where any ran."""
    if _VERSION_TIMINGS:
        terminalreporter.section("version matrix: seconds to install, run the quick tier, run the export round trips")
        for line in sorted(_VERSION_TIMINGS):
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
