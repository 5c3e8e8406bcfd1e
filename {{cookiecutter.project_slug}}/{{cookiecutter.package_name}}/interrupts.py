"""Stopping cleanly on SIGINT / SIGTERM, and test-only pause points for the crash tests.

The first SIGINT or SIGTERM only raises a flag. The training loop checks it after each
optimizer step (and between epochs), so no step, validation pass or checkpoint write is cut in
half; train.py then exits 130 (SIGINT) or 143 (SIGTERM). A second SIGINT (Ctrl-C again) raises
KeyboardInterrupt at once, for when the user really means it. A repeated SIGTERM changes
nothing: schedulers send it more than once (under SLURM every process of a job step gets one from
slurmstepd and another from torchrun, milliseconds apart, see docs/preemption.md), and it must not
cut the save it asked for.

What "save" means on interrupt: train.py writes `last.pt` at that step boundary, recording the
epoch in progress and the optimizer steps done in it (keys `epoch` and `step`, see
run_checkpoint.py); `--resume` continues from that very step. All randomness of an epoch is a
function of (seed, epoch, sample) (see reproducibility.py) and the checkpoint holds the RNG
states of the step boundary, so the resumed run ends bit-for-bit where an uninterrupted run
ends. `SaveClock` makes the same kind of checkpoint every `--save-every-minutes`, for the kills
no handler sees (SIGKILL, a lost node).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator

from . import config

# Test hook, never set in normal use: the crash tests set <PACKAGE>_TEST_PAUSE_AT to a point
# name (e.g. "step:2:1", "save:last.pt:2") so that train.py stops there and sleeps, and the test
# can SIGKILL it at a known instant; "NAME@R" pauses rank R only. Unset (the default), pause_point() does nothing.
# Under torchrun the hook pauses in the first attempt only, so a restarted job runs through.
PAUSE_ENV_VAR = f"{config.PACKAGE.upper()}_TEST_PAUSE_AT"


class TrainingInterrupted(Exception):
    """Training stopped on request after a completed optimizer step."""

    def __init__(self, signum: int, epoch: int, step: int):
        super().__init__(f"{signal.Signals(signum).name} at epoch {epoch} step {step}")
        self.signum, self.epoch, self.step = signum, epoch, step

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + signal number (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + self.signum


class StopRequest:
    """Callable flag: True once SIGINT/SIGTERM arrived; a later SIGINT (never SIGTERM) raises KeyboardInterrupt."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self) -> bool:
        return self.signum is not None

    def check(self, epoch: int, step: int) -> None:
        """After a completed step: raise TrainingInterrupted if a stop was requested."""
        pause_point(f"step:{epoch}:{step}", until=self)
        if self.signum is not None:
            raise TrainingInterrupted(self.signum, epoch, step)

    def _handle(self, signum: int, frame) -> None:
        if self.signum is not None:
            if signum == signal.SIGINT:  # a person pressing Ctrl-C again
                raise KeyboardInterrupt
            return  # SIGTERM again: the scheduler's copy of the same request (slurmstepd + torchrun)
        self.signum = signum
        print(f"{signal.Signals(signum).name}: stopping after this step (Ctrl-C again to abort now)",
              file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopRequest]:
        """Handle the signals inside the block (main thread only), restoring the old handlers after."""
        previous = {signum: signal.signal(signum, self._handle) for signum in self.SIGNALS}
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


class SaveClock:
    """`due()` once every `minutes` of wall time since the last `reset()`; never when `minutes` is 0."""

    def __init__(self, minutes: float):
        self.seconds, self.last = minutes * 60, time.monotonic()

    def due(self) -> bool:
        """Whether a periodic checkpoint is due."""
        return self.seconds > 0 and time.monotonic() - self.last >= self.seconds

    def reset(self) -> None:
        """A checkpoint was just written: count from now."""
        self.last = time.monotonic()


def ignore_sigint_in_worker(worker_id: int) -> None:
    """DataLoader worker_init_fn: a terminal's Ctrl-C reaches the workers too; only the main process acts on it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


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
