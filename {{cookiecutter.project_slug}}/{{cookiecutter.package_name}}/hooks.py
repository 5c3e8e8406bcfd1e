"""The one interface through which what an answer adds to training (plugins/) is handed in: `Plugin`'s hooks.

train.py calls them on every installed plugin; each does nothing unless a plugin overrides it. The core
never imports a plugin, only this interface (plugins/__init__.py says what each hook is for).
"""

from __future__ import annotations


class Plugin:
    """A part of training that an answer (or your own code) adds; every hook a no-op."""

    name = "plugin"
    optional = False  # True: a failure in after_epoch is a warning and the run goes on without it (a tracker)
    wants_step_losses = False  # True: the run keeps each optimizer step's loss for after_epoch (run.step_losses)

    def choices(self) -> dict[str, list[str]]:
        """Values this plugin adds to flags' choices (the flag's field name -> values)."""
        return {}

    def unavailable(self, field: str, value: str, device) -> str | None:
        """Why `value`, which this plugin added to `field`'s choices, cannot run on `device` here; None: it can."""
        return None

    def processes(self, cfg, device):
        """The processes training together when the run asks for this plugin's kind; None: not its own."""
        return None

    def start(self, run, out) -> None:
        """The run is built and its folder claimed; before its first file is written."""

    def after_step(self, run, epoch: int, step: int) -> None:
        """After optimizer step `step` of `epoch`."""

    def after_epoch(self, run, row: dict) -> None:
        """After the epoch's checkpoint and metrics.csv row are written (`row` is that row)."""

    def loaders(self, read_plan) -> None:
        """Change how the loaders read images (data.pipeline.ReadPlan), in place."""

    def close(self, run) -> None:
        """Training ended; release what the plugin holds."""


def choices(plugins: list[Plugin], field: str, core: tuple[str, ...]) -> tuple[str, ...]:
    """A flag's choices: the core's, then what the plugins add."""
    added = [value for plugin in plugins for value in plugin.choices().get(field, [])]
    return tuple(dict.fromkeys([*core, *added]))
