"""The tracker answer `wandb`: each epoch's metrics.csv row and every step's loss in a Weights & Biases run, the
settings as its config. Installed by `pip install -e '.[wandb]'`.

The project is $WANDB_PROJECT, else the project's name; files go to $WANDB_DIR, else the run folder;
WANDB_MODE=offline works without an account or a network. A resumed run reopens its W&B run (the id in the
run folder's tracker.json); W&B ignores steps below the run's last, so nothing is logged twice.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from .. import PROJECT_NAME
from ..errors import UserError
from ..outputs import scalars
from . import Plugin
from ._tracker_run import save_tracker_run_id, tracker_run_id

STEP_TAG = "train_loss_step"


class TrackerError(UserError):
    """The tracker could not start or reopen its run (not logged in, no network in online mode)."""


class WandbPlugin(Plugin):
    """--logger wandb: a W&B run per training run, reopened on resume."""

    name, optional, wants_step_losses = "wandb", True, True

    def __init__(self):
        self.run = None

    def choices(self) -> dict[str, list[str]]:
        return {"logger": ["wandb"]}

    def unavailable(self, field: str, value: str, device) -> str | None:
        if importlib.util.find_spec("wandb") is None:
            return "--logger wandb needs the wandb package: pip install -e '.[wandb]'"
        return None

    def start(self, run, out: Path) -> None:
        if run.cfg.logger != "wandb" or not run.processes.is_main():
            return
        import wandb

        run_id = tracker_run_id(out, "wandb") if run.cfg.resume else None
        settings = {key: value if isinstance(value, (bool, int, float, str)) else str(value)
                    for key, value in run.cfg.to_dict().items()}
        try:
            self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or PROJECT_NAME.lower().replace(" ", "-"),
                                  dir=os.environ.get("WANDB_DIR") or str(out), name=Path(out).name, id=run_id,
                                  resume="allow" if run_id else None, config=settings,
                                  settings=wandb.Settings(console="off", save_code=False))
        except Exception as error:  # not logged in, no network in online mode
            raise TrackerError(f"--logger wandb: {type(error).__name__}: {(str(error).splitlines() or [''])[0]} "
                               "(wandb login, or WANDB_MODE=offline)") from None
        save_tracker_run_id(out, "wandb", self.run.id)

    def after_epoch(self, run, row: dict) -> None:
        if self.run is None:
            return
        # W&B's own step is the optimizer step: a resumed run's steps below the run's last are ignored by W&B
        last_step = row["epoch"] * run.steps_per_epoch
        losses = [] if run.step_losses is None else run.step_losses.tolist()  # one host read for the epoch
        for offset, value in enumerate(losses[:-1]):
            self.run.log({STEP_TAG: value}, step=last_step - len(losses) + 1 + offset)
        self.run.log({**scalars(row), **({STEP_TAG: losses[-1]} if losses else {})}, step=last_step)

    def close(self, run) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


PLUGIN = WandbPlugin()
