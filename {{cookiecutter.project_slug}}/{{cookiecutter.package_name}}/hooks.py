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
    # A dataclass of the plugin's own settings (every field with a default): they join TrainConfig's, so config.json,
    # checkpoints, --config and --resume's rules treat them as the core's (config.config_class)
    settings: type | None = None

    def choices(self) -> dict[str, list[str]]:
        """Values this plugin adds to flags' choices (the flag's field name -> values)."""
        return {}

    def unavailable(self, field: str, value: str, device) -> str | None:
        """Why `value`, which this plugin added to `field`'s choices, cannot run on `device` here; None: it can."""
        return None

    def flags(self, parser) -> None:
        """Add the flags of this plugin's settings to train.py's parser (an argument group)."""

    def problems(self, cfg) -> list[str]:
        """What is wrong with this plugin's settings in `cfg`, one line each (checked before anything is built)."""
        return []

    def processes(self, cfg, device):
        """The processes training together when the run asks for this plugin's kind; None: not its own."""
        return None

    def build(self, run) -> None:
        """The model and the loss are built; before the optimizer and the loop are made from `run.parameter_groups`
        and `run.mix`, which this hook may set."""

    def state_dict(self) -> dict:
        """What this plugin keeps in a training checkpoint (plain values, CPU tensors); {}: nothing."""
        return {}

    def load_state_dict(self, run, state: dict, source: str) -> None:
        """Continue from what `state_dict` saved (CheckpointError naming `source` if it does not fit the run)."""

    def start(self, run, out) -> None:
        """The run is built and its folder claimed; before its first file is written."""

    def before_epoch(self, run, epoch: int) -> None:
        """Before epoch `epoch` trains (the rest of it, after a mid-epoch resume)."""

    def after_step(self, run, epoch: int, step: int) -> None:
        """After optimizer step `step` of `epoch`."""

    def validated(self, run, row: dict) -> None:
        """The epoch's metrics row after validation, before it is saved: add this plugin's columns. Other weights
        validated here are columns `<name>_val_acc` (and `<name>_val_loss`); best.pt keeps the best of them."""

    def weights(self, name: str) -> dict | None:
        """The state dict (CPU tensors) of the weights this plugin validated as `name`; None: not its own."""
        return None

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
