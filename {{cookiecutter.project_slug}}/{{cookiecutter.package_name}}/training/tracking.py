"""Experiment tracking: what a run reports besides metrics.csv, behind one small interface.

`open_logger("none", ...)` is a `Logger` that does nothing; `open_logger("tensorboard", ...)`
writes TensorBoard event files into the run directory. TensorBoard is an optional dependency
group (`pip install -e '.[tensorboard]'`); `check_available` refuses a missing one with a
MissingDependencyError (one line, exit 2) before anything is built or written.

Every scalar is on one x-axis, the global optimizer step (epoch E, step s of S steps per epoch:
(E - 1) * S + s). The per-epoch scalars sit at their epoch's last step. One axis is what lets a
resumed run continue the same curves: its writer starts with `purge_step` = the first step it
will redo, and TensorBoard drops every point at or after it that the interrupted run left behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigError, MissingDependencyError

LOGGERS = ("none", "tensorboard")
EPOCH_TAGS = ("train_loss", "train_acc", "val_loss", "val_acc", "lr", "images_per_s")  # metrics.csv columns
STEP_TAG = "train_loss_step"
HPARAM_METRICS = ("val_acc", "val_loss")  # what TensorBoard's HPARAMS tab lists beside each run's settings


class Logger:
    """The interface train.py reports through; this base class records nothing."""

    wants_step_losses = False  # whether train.py should collect each step's loss for log_epoch

    def log_epoch(self, row: dict, step_losses: torch.Tensor | None, last_step: int) -> None:
        """One epoch: its metrics row at `last_step`, and its steps' losses, the last of them at `last_step`."""

    def close(self) -> None:
        """Flush and release whatever the logger holds."""


def check_available(kind: str) -> None:
    """Refuse an unknown logger, or one whose optional dependency is not installed."""
    if kind not in LOGGERS:
        raise ConfigError(f"--logger must be one of {', '.join(LOGGERS)}, got {kind!r}")
    if kind == "tensorboard":
        try:
            import torch.utils.tensorboard  # noqa: F401  (imports the tensorboard package)
        except ImportError:
            raise MissingDependencyError(
                "--logger tensorboard needs the tensorboard package: pip install -e '.[tensorboard]'") from None


def open_logger(kind: str, log_dir: Path, *, purge_step: int, hparams: dict[str, Any]) -> Logger:
    """The logger `kind` writing into `log_dir`; points at or after `purge_step` from earlier writers are dropped."""
    check_available(kind)
    if kind == "tensorboard":
        return TensorBoardLogger(log_dir, purge_step=purge_step, hparams=hparams)
    return Logger()


class TensorBoardLogger(Logger):
    """Scalars, per-step loss and the run's hyperparameters as TensorBoard event files in the run directory."""

    wants_step_losses = True

    def __init__(self, log_dir: Path, *, purge_step: int, hparams: dict[str, Any]):
        from torch.utils.tensorboard import SummaryWriter

        first = not any(Path(log_dir).glob("events.out.tfevents.*"))  # a resumed run already has its hparams
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)
        if first:
            self._write_hparams(hparams)

    def _write_hparams(self, hparams: dict[str, Any]) -> None:
        """The settings, in the HPARAMS tab (linked to the val_* curves) and as JSON text."""
        from torch.utils.tensorboard.summary import hparams as hparams_summary

        # The HPARAMS tab takes numbers, strings and booleans; None (a default deferred) becomes "None".
        values = {key: value if isinstance(value, (bool, int, float, str)) else str(value)
                  for key, value in hparams.items()}
        for summary in hparams_summary(values, dict.fromkeys(HPARAM_METRICS, 0.0)):
            self.writer.file_writer.add_summary(summary, global_step=0)
        self.writer.add_text("config", f"```\n{json.dumps(hparams, indent=2, sort_keys=True)}\n```", global_step=0)

    def log_epoch(self, row: dict, step_losses: torch.Tensor | None, last_step: int) -> None:
        if step_losses is not None:
            first_step = last_step - len(step_losses) + 1
            for offset, value in enumerate(step_losses.tolist()):  # one host sync for the whole epoch
                self.writer.add_scalar(STEP_TAG, value, first_step + offset)
        for tag in EPOCH_TAGS:
            self.writer.add_scalar(tag, row[tag], last_step)
        self.writer.flush()  # on disk before the epoch's checkpoint, so a resume purges rather than loses it

    def close(self) -> None:
        self.writer.close()
