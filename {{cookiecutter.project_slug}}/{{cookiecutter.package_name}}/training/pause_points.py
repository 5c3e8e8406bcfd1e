"""Test-only pause points: the crash tests stop a real train.py at a named instant to signal or kill it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

from .. import config

PAUSE_ENV_VAR = f"{config.PACKAGE.upper()}_TEST_PAUSE_AT"


def pause_point(name: str, until: Callable[[], bool] | None = None) -> None:
    """Test hook: wait at `name` when <PACKAGE>_TEST_PAUSE_AT names it, so a test can signal or kill us there.

    The wait ends after 10 minutes, or as soon as `until()` is true (a stop request arrived).
    """
    rank = os.environ.get("RANK", "0")
    wanted = os.environ.get(PAUSE_ENV_VAR)
    if wanted not in (name, f"{name}@{rank}") or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return
    print(f"paused at {name} (rank {rank}, pid {os.getpid()})", file=sys.stderr, flush=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (until is not None and until()):
        time.sleep(0.02)
