"""Stopping cleanly on SIGINT / SIGTERM / SIGHUP, and the clock of periodic saves.

The first SIGINT, SIGTERM or SIGHUP (a closed terminal or ssh session) only raises a flag. The
training loop checks it after each optimizer step (and between epochs), so no step, validation
pass or checkpoint write is cut in half; train.py then exits 130 (SIGINT), 143 (SIGTERM) or 129
(SIGHUP). The loader workers ignore all three (data/loaders.py), so a signal sent to the whole
process group (SLURM, systemd, GNU timeout, a terminal) reaches the main process alone in effect,
and the main process ends its workers itself when the run closes. A second SIGINT (Ctrl-C again)
raises KeyboardInterrupt at once, for when the user really means it. A repeated SIGTERM or SIGHUP
changes nothing: schedulers send it more than once (under SLURM every process of a job step gets one from
slurmstepd and another from torchrun, milliseconds apart, see docs/preemption.md), and it must not
cut the save it asked for.

What "save" means on interrupt: train.py writes `last.pt` at that step boundary, recording the
epoch in progress and the optimizer steps done in it (keys `epoch` and `step`, see
run_state.py); `--resume` continues from that very step. All randomness of an epoch is a
function of (seed, epoch, sample) (see data/sampling.py) and the checkpoint holds the RNG
states of the step boundary, so the resumed run ends bit-for-bit where an uninterrupted run
ends. `SaveClock` makes the same kind of checkpoint every `--save-every-minutes`, for the kills
no handler sees (SIGKILL, a lost node).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Iterator

from ..data.loaders import STOP_SIGNALS


class TrainingInterrupted(Exception):
    """Training stopped on request after a completed optimizer step."""

    def __init__(self, signum: int, epoch: int, step: int):
        super().__init__(f"{signal.Signals(signum).name} at epoch {epoch} step {step}")
        self.signum, self.epoch, self.step = signum, epoch, step

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + signal number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP)."""
        return 128 + self.signum


class StopRequest:
    """Callable flag: True once SIGINT/SIGTERM/SIGHUP arrived; a later SIGINT (only) raises KeyboardInterrupt."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame) -> None:
        if self.signum is not None:
            if signum == signal.SIGINT:  # a person pressing Ctrl-C again
                raise KeyboardInterrupt
            return  # SIGTERM/SIGHUP again: the scheduler's copy of the same request (slurmstepd + torchrun)
        self.signum = signum
        print(f"{signal.Signals(signum).name}: stopping after this step (Ctrl-C again to abort now)",
              file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopRequest]:
        """Handle the signals inside the block (main thread only), restoring the old handlers after."""
        previous = {signum: signal.signal(signum, self._handle) for signum in STOP_SIGNALS}
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
