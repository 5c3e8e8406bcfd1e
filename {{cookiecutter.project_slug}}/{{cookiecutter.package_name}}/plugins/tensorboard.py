"""The tracker answer `tensorboard`: each epoch's metrics.csv row, every step's loss and the settings as TensorBoard
event files in the run folder (`tensorboard --logdir runs`). Installed by `pip install -e '.[tensorboard]'`.

The x-axis is the global optimizer step (epoch E, step s of S per epoch: (E - 1) * S + s); an epoch's scalars
sit at its last step. A resumed run writes on with `purge_step` = the first step it redoes, so the points an
interrupted run logged after its checkpoint are dropped, not doubled.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from ..outputs import scalars
from . import Plugin

STEP_TAG = "train_loss_step"
HPARAM_METRICS = ("val_acc", "val_loss")  # what the HPARAMS tab lists beside each run's settings


class TensorBoardPlugin(Plugin):
    """--logger tensorboard: event files beside the checkpoints."""

    name, optional, wants_step_losses = "tensorboard", True, True

    def __init__(self):
        self.writer = None

    def choices(self) -> dict[str, list[str]]:
        return {"logger": ["tensorboard"]}

    def unavailable(self, field: str, value: str, device) -> str | None:
        if importlib.util.find_spec("tensorboard") is None:
            return "--logger tensorboard needs the tensorboard package: pip install -e '.[tensorboard]'"
        return None

    def start(self, run, out: Path) -> None:
        if run.cfg.logger != "tensorboard" or not run.processes.is_main():
            return
        from torch.utils.tensorboard import SummaryWriter

        first = not any(Path(out).glob("events.out.tfevents.*"))  # a resumed run already has its settings
        purge = (run.start_epoch - 1) * run.steps_per_epoch + run.start_step + 1  # the first step this run logs
        self.writer = SummaryWriter(log_dir=str(out), purge_step=purge)
        if first:
            self._write_hparams({key: value if isinstance(value, (bool, int, float, str)) else str(value)
                                 for key, value in run.cfg.to_dict().items()})

    def _write_hparams(self, hparams: dict) -> None:
        """The settings, in the HPARAMS tab (linked to the val_* curves) and as JSON text."""
        from torch.utils.tensorboard.summary import hparams as hparams_summary

        for summary in hparams_summary(hparams, dict.fromkeys(HPARAM_METRICS, 0.0)):
            self.writer.file_writer.add_summary(summary, global_step=0)
        self.writer.add_text("config", f"```\n{json.dumps(hparams, indent=2, sort_keys=True)}\n```", global_step=0)

    def after_epoch(self, run, row: dict) -> None:
        if self.writer is None:
            return
        last_step = row["epoch"] * run.steps_per_epoch
        losses = [] if run.step_losses is None else run.step_losses.tolist()  # one host read for the epoch
        for offset, value in enumerate(losses):
            self.writer.add_scalar(STEP_TAG, value, last_step - len(losses) + 1 + offset)
        for tag, value in scalars(row).items():
            self.writer.add_scalar(tag, value, last_step)
        self.writer.flush()

    def close(self, run) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


PLUGIN = TensorBoardPlugin()
