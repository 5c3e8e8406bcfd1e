"""What the project's answers added to training: each module or folder here is a plugin that train.py installs.

The core of the project trains on one machine; what only several processes, a scheduler or a tracker need
arrives with the answer that chose it, as a plugin in this folder (the ddp answer's plugins/ddp, the
tracker answer's plugins/tensorboard.py, ...), and the core never imports one. A plugin is the object its
module calls `PLUGIN`, a `Plugin` whose hooks train.py calls; each hook does nothing unless overridden:

    choices()                   values it adds to flags' choices, e.g. {"parallel": ["ddp"]}
    unavailable(field, value, device)  why a value it added cannot run here (None: it can)
    processes(cfg, device)      the processes training together, for the run's --parallel (None: not its own)
    start(run, out)             the run is built and its folder claimed and written; before the first epoch
    after_step(run, epoch, step)  after each optimizer step, before the processes agree to stop or save
    after_epoch(run, row)       after an epoch's checkpoint and metrics.csv row are written
    loaders(run_data)           may change how the loaders read images (device decode); None: as they are
    close(run)                  training ended: done, stopped or failed

`load_plugins()` finds them; `train.main(argv, plugins=[...])` adds your own (a callback, a test's pause point).
"""

from __future__ import annotations

import importlib
import pkgutil


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
        """The run is built, its folder claimed and its first files written."""

    def after_step(self, run, epoch: int, step: int) -> None:
        """After optimizer step `step` of `epoch`."""

    def after_epoch(self, run, row: dict) -> None:
        """After the epoch's checkpoint and metrics.csv row are written (`row` is that row)."""

    def loaders(self, run_data):
        """A different way for the loaders to read images (data.pipeline.RunData), or None."""
        return None

    def close(self, run) -> None:
        """Training ended; release what the plugin holds."""


def load_plugins() -> list[Plugin]:
    """The plugin of every module and package in this folder, by name."""
    return [importlib.import_module(f"{__name__}.{info.name}").PLUGIN
            for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name)]


def choices(plugins: list[Plugin], field: str, core: tuple[str, ...]) -> tuple[str, ...]:
    """A flag's choices: the core's, then what the plugins add."""
    added = [value for plugin in plugins for value in plugin.choices().get(field, [])]
    return tuple(dict.fromkeys([*core, *added]))
