"""Calling the plugins' hooks so that a plugin's failure loses nothing the run had finished.

A hook that raises (a user's callback with a bug, a tracker whose service went away) is told to every
process and handled like a stop request at that point: the steps trained and the epoch validated are
saved as a signal would save them (epochs.py), then the run ends with `PluginFailed` (train.py: one
line, exit 1, and how to continue). A failure in `close`, when the run's files are written, is a warning.
"""

from __future__ import annotations

import sys

from ..errors import one_line


class PluginFailed(Exception):
    """A plugin's hook raised; last.pt holds `epoch` and `step` (step 0: every epoch before `epoch`)."""

    def __init__(self, failure: tuple[str, str, BaseException] | None, hook: str, epoch: int, step: int):
        name, hook, error = failure or ("of another process", hook, None)
        reason = f" ({type(error).__name__}: {one_line(error)[:200]})" if error else ""
        super().__init__(f"plugin {name} failed in {hook}{reason}")
        self.epoch, self.step = epoch, step


def tell(run, hook: str, *args) -> tuple[str, str, BaseException] | None:
    """Call `hook(run, *args)` on every plugin; the first to raise stops the others: (its name, hook, error)."""
    for plugin in run.plugins:
        try:
            getattr(plugin, hook)(run, *args)
        except Exception as error:
            return plugin.name, hook, error
    return None


def agreed(run, failure) -> bool:
    """Whether a plugin failed in any process (every process takes the same decision at the same point)."""
    return bool(run.processes.max([int(failure is not None)])[0])


def close_all(run) -> None:
    """Every plugin's `close`; one that raises is a warning (the run's files are already written)."""
    for plugin in run.plugins:
        try:
            plugin.close(run)
        except Exception as error:
            print(f"warning: plugin {plugin.name} failed in close ({type(error).__name__}: "
                  f"{one_line(error)[:200]}); the run's files are complete", file=sys.stderr, flush=True)
