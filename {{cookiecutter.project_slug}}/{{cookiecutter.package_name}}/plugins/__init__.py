"""What the project's answers added to training: each module or folder here is a plugin that train.py installs.

The core of the project trains on one machine; what only several processes, a scheduler or a tracker need
arrives with the answer that chose it, as a plugin in this folder (the ddp answer's plugins/ddp, the
tracker answer's plugins/tensorboard.py, ...), and the core never imports one. A plugin is the object its
module calls `PLUGIN`, a `Plugin` whose hooks train.py calls; each hook does nothing unless overridden:

    settings                    a dataclass of its own settings: they join TrainConfig's fields
    flags(parser)               adds those settings' flags;  problems(cfg): what is wrong with their values
    choices()                   values it adds to flags' choices, e.g. {"parallel": ["ddp"]}
    unavailable(field, value, device)  why a value it added cannot run here (None: it can)
    processes(cfg, device)      the processes training together, for the run's --parallel (None: not its own)
    build(run)                  the model is built; may set run.parameter_groups and run.mix before the optimizer
    state_dict(), load_state_dict(run, state, source)  what it keeps in training checkpoints, and continuing it
    start(run, out)             the run is built and its folder claimed, before its first file is written
    before_epoch(run, epoch)    before each epoch trains
    after_step(run, epoch, step)  after each optimizer step, before the processes agree to stop or save
    validated(run, row)         the epoch's metrics row after validation: its own columns (other weights' accuracy)
    weights(name)               the weights it validated as `name`, for best.pt
    after_epoch(run, row)       after an epoch's checkpoint and metrics.csv row are written
    loaders(read_plan)          may change how the loaders read images, in place (device decode)
    close(run)                  training ended: done, stopped or failed

`load_plugins()` finds them; `train.main(argv, plugins=[...])` adds your own (a callback, a test's pause point).
"""

from __future__ import annotations

import importlib
import pkgutil

from ..hooks import Plugin

__all__ = ["Plugin", "load_plugins"]  # a plugin module subclasses it as `from . import Plugin`


def load_plugins() -> list[Plugin]:
    """The plugin of every module and package in this folder, by name (but `_helpers`)."""
    return [importlib.import_module(f"{__name__}.{info.name}").PLUGIN
            for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name)
            if not info.name.startswith("_")]  # _name: a helper that plugins share, not a plugin
