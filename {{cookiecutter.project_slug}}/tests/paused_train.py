"""train.py with the crash tests' pause points: a test stops a real training process at a named instant.

    TEST_PAUSE_AT=step:2:1 python tests/paused_train.py ARGS...      (ARGS as for train.py)

Points: `step:E:S` (after epoch E's optimizer step S, before its mid-epoch save; the wait ends when a stop
signal arrives), `validate:E` (after epoch E's last step, before its save and validation), `save:NAME:E[:S]`
(NAME's new bytes written to their temporary file but not yet renamed into place), `saved:NAME:E[:S]` (just
renamed into place). `@R` after a point (`step:1:2@1`) pauses rank R only; a process torchrun restarted never
pauses. It prints `paused at POINT` on stderr and waits (at most 10 minutes) for the test's signal or kill.

It reaches train.py only through public seams: a plugin handed to `train.main(argv, plugins=...)` and
the rename every checkpoint write ends with (os.replace). Nothing in the project knows of it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project root: train.py and the package

import torch  # noqa: E402

import train  # noqa: E402
from {{ cookiecutter.package_name }}.plugins import Plugin  # noqa: E402

PAUSE_ENV_VAR = "TEST_PAUSE_AT"


def wanted(point: str) -> bool:
    """Whether this process should pause at `point`."""
    rank = os.environ.get("RANK", "0")
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return False
    return os.environ.get(PAUSE_ENV_VAR) in (point, f"{point}@{rank}")


def pause(point: str, until=None) -> None:
    """Say where, then wait until `until()` is true, the process is killed, or 10 minutes pass."""
    print(f"paused at {point} (rank {os.environ.get('RANK', '0')}, pid {os.getpid()})", file=sys.stderr, flush=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (until is not None and until()):
        time.sleep(0.02)


class PausePoints(Plugin):
    """Pauses after an optimizer step (until a stop request) or before an epoch's validation."""

    name = "pause points"

    def after_step(self, run, epoch: int, step: int) -> None:
        if wanted(f"step:{epoch}:{step}"):
            pause(f"step:{epoch}:{step}", until=run.stop)
        if step == run.steps_per_epoch and wanted(f"validate:{epoch}"):
            pause(f"validate:{epoch}")


def pausing_replace(replace):
    """os.replace that pauses at `save:NAME:E[:S]` before a checkpoint of that epoch and step is put in place, and
    at `saved:NAME:E[:S]` after."""
    def patched(source, target):
        name = Path(target).name
        if name not in ("last.pt", "best.pt") or not os.environ.get(PAUSE_ENV_VAR, "").startswith(("save:", "saved:")):
            return replace(source, target)
        state = torch.load(source, map_location="cpu", weights_only=True)
        where = f"{name}:{state['epoch']}" + (f":{state['step']}" if state.get("step") else "")
        if wanted(f"save:{where}"):
            pause(f"save:{where}")
        replace(source, target)
        if wanted(f"saved:{where}"):
            pause(f"saved:{where}")
    return patched


if __name__ == "__main__":
    os.replace = pausing_replace(os.replace)
    sys.exit(train.main(sys.argv[1:], plugins=[PausePoints()]))
