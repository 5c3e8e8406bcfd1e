"""Experiment tracking: where a run reports besides metrics.csv, behind one small `Logger` interface.

`--logger` picks one (metrics.csv is written whatever it is):
    csv          metrics.csv only (`none` is the same)
    tensorboard  event files in the run folder                pip install -e '.[tensorboard]'
    mlflow       an MLflow run ($MLFLOW_TRACKING_URI, else    pip install -e '.[mlflow]'
                 sqlite:///<the run folder's parent>/mlflow.db; experiment $MLFLOW_EXPERIMENT_NAME, else
                 the project's name)
    wandb        a W&B run (project $WANDB_PROJECT, else the  pip install -e '.[wandb]'
                 project's name; files in $WANDB_DIR, else the run folder; WANDB_MODE=offline works offline)
`check_available` refuses an unknown one, or one whose dependency group is not installed, with a
one-line MissingDependencyError (exit 2) before anything is built or written.

Every logger gets each epoch's metrics.csv row whole (`log_epoch(row, ...)`): a column added to the
row reaches every tracker with no other change. Adding a tracker: subclass `Logger` (log_epoch,
close), add it to `LOGGERS` with the package it imports and the extra that installs it, and to
`_OPENERS`.

Every scalar is on one x-axis, the global optimizer step (epoch E, step s of S steps per epoch:
(E - 1) * S + s); the per-epoch scalars sit at their epoch's last step. A resumed run continues the
same tracker run: TensorBoard's writer starts with `purge_step` = the first step it will redo (its
points at or after it are dropped); MLflow and W&B runs are reopened by the id kept in the run
folder's tracker.json, and steps they already hold are not logged twice.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from .. import PROJECT_NAME
from ..errors import ConfigError, MissingDependencyError, UserError
from ..outputs import write_json

# name -> (the package it imports, the optional dependency group that installs it); None: nothing to install
LOGGERS: dict[str, tuple[str, str] | None] = {
    "csv": None, "none": None, "tensorboard": ("torch.utils.tensorboard", "tensorboard"),
    "mlflow": ("mlflow", "mlflow"), "wandb": ("wandb", "wandb"),
}
STEP_TAG = "train_loss_step"
HPARAM_METRICS = ("val_acc", "val_loss")  # what TensorBoard's HPARAMS tab lists beside each run's settings
TRACKER_FILE = "tracker.json"  # the run folder's record of its tracker runs' ids, so a resume continues them


class TrackerError(UserError):
    """The tracker could not start or reopen its run (not logged in, a tracking URI that does not answer)."""


class Logger:
    """The interface train.py reports through; this base class records nothing (metrics.csv is written anyway)."""

    wants_step_losses = False  # whether train.py should collect each step's loss for log_epoch

    def log_epoch(self, row: dict, step_losses: torch.Tensor | None, last_step: int) -> None:
        """One epoch: its whole metrics.csv row at `last_step`, and its steps' losses, the last at `last_step`."""

    def close(self) -> None:
        """Flush and release whatever the logger holds."""


def scalars(row: dict) -> dict[str, float]:
    """The row's numeric columns (every one but `epoch`, which the step axis already says)."""
    return {key: float(value) for key, value in row.items()
            if key != "epoch" and isinstance(value, (int, float)) and not isinstance(value, bool)}


def check_available(kind: str) -> None:
    """Refuse an unknown logger, or one whose optional dependency is not installed."""
    if kind not in LOGGERS:
        raise ConfigError(f"--logger must be one of {', '.join(LOGGERS)}, got {kind!r}")
    if LOGGERS[kind] is None:
        return
    package, extra = LOGGERS[kind]
    try:
        importlib.import_module(package)
    except ImportError:
        raise MissingDependencyError(
            f"--logger {kind} needs the {extra} package: pip install -e '.[{extra}]'") from None


def open_logger(kind: str, log_dir: Path, *, purge_step: int, hparams: dict[str, Any],
                resuming: bool = False) -> Logger:
    """The logger `kind` for the run in `log_dir`; a resumed run (`resuming`) continues its tracker run.

    `purge_step` is the first global step this process will log: earlier writers' points at or after it
    are dropped (TensorBoard) or not logged twice (MLflow, W&B).
    """
    check_available(kind)
    opener = _OPENERS.get(kind)
    if opener is None:
        return Logger()
    return opener(Path(log_dir), purge_step=purge_step, hparams=hparams, resuming=resuming)


def _flat_params(hparams: dict[str, Any]) -> dict[str, bool | int | float | str]:
    """Settings as the trackers' parameter tables take them: None (a deferred default) becomes "None"."""
    return {key: value if isinstance(value, (bool, int, float, str)) else str(value) for key, value in hparams.items()}


def _saved_run_id(log_dir: Path, kind: str) -> str | None:
    """The id of the `kind` tracker run this run folder reported to, if it did."""
    path = log_dir / TRACKER_FILE
    try:
        return json.loads(path.read_text()).get(kind, {}).get("run_id")
    except (OSError, ValueError, AttributeError):  # absent, or not ours: start a new tracker run
        return None


def _save_run_id(log_dir: Path, kind: str, run_id: str) -> None:
    """Record the tracker run's id in the run folder, beside the other kinds' (--logger may change on resume)."""
    path = log_dir / TRACKER_FILE
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        saved = {}
    write_json(path, {**(saved if isinstance(saved, dict) else {}), kind: {"run_id": run_id}})


class TensorBoardLogger(Logger):
    """Scalars, per-step loss and the run's hyperparameters as TensorBoard event files in the run directory."""

    wants_step_losses = True

    def __init__(self, log_dir: Path, *, purge_step: int, hparams: dict[str, Any], resuming: bool = False):
        from torch.utils.tensorboard import SummaryWriter

        first = not any(Path(log_dir).glob("events.out.tfevents.*"))  # a resumed run already has its hparams
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)
        if first:
            self._write_hparams(hparams)

    def _write_hparams(self, hparams: dict[str, Any]) -> None:
        """The settings, in the HPARAMS tab (linked to the val_* curves) and as JSON text."""
        from torch.utils.tensorboard.summary import hparams as hparams_summary

        for summary in hparams_summary(_flat_params(hparams), dict.fromkeys(HPARAM_METRICS, 0.0)):
            self.writer.file_writer.add_summary(summary, global_step=0)
        self.writer.add_text("config", f"```\n{json.dumps(hparams, indent=2, sort_keys=True)}\n```", global_step=0)

    def log_epoch(self, row: dict, step_losses: torch.Tensor | None, last_step: int) -> None:
        if step_losses is not None:
            first_step = last_step - len(step_losses) + 1
            for offset, value in enumerate(step_losses.tolist()):  # one host sync for the whole epoch
                self.writer.add_scalar(STEP_TAG, value, first_step + offset)
        for tag, value in scalars(row).items():
            self.writer.add_scalar(tag, value, last_step)
        self.writer.flush()  # on disk before the epoch's checkpoint, so a resume purges rather than loses it

    def close(self) -> None:
        self.writer.close()


def mlflow_tracking_uri(log_dir: Path) -> str:
    """$MLFLOW_TRACKING_URI, else an SQLite store beside the run folders (runs/mlflow.db): `mlflow ui` reads it."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(log_dir).resolve().parent / 'mlflow.db'}"


class MLflowLogger(Logger):
    """Each epoch's row and step losses as MLflow metrics, the settings as its params; a resume reopens the run."""

    wants_step_losses = True

    def __init__(self, log_dir: Path, *, purge_step: int, hparams: dict[str, Any], resuming: bool = False):
        # MLflow's HTTP client retries an unreachable server for minutes in silence; a few seconds say enough
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
        run_id = _saved_run_id(log_dir, "mlflow") if resuming else None
        for attempt in range(3):  # two runs creating a fresh runs/mlflow.db at once: the second retries
            try:
                self._open(log_dir, hparams, run_id)
                break
            except Exception as error:  # the store's own errors: an unreachable server, a bad URI, a missing driver
                if attempt == 2 or "locked" not in str(error) and "already exists" not in str(error):
                    raise TrackerError(f"--logger mlflow: {type(error).__name__}: "
                                       f"{(str(error).strip().splitlines() or [''])[0]}") from None
                time.sleep(1 + attempt)
        _save_run_id(log_dir, "mlflow", self.run_id)

    def _open(self, log_dir: Path, hparams: dict[str, Any], run_id: str | None) -> None:
        """Connect to the store and start (or reopen) the run; the store's own exceptions pass through."""
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(mlflow_tracking_uri(log_dir))
        self.run_id = run_id or self._new_run(log_dir, hparams)
        self.client.update_run(self.run_id, status="RUNNING")
        # a run killed between logging an epoch and saving it holds steps this process redoes: not twice
        history = self.client.get_metric_history(self.run_id, STEP_TAG) if run_id else []
        self.logged_until = max((point.step for point in history), default=0)

    def _new_run(self, log_dir: Path, hparams: dict[str, Any]) -> str:
        """A new MLflow run in the experiment, named after the run folder, with the settings as params."""
        from mlflow.entities import Param

        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or PROJECT_NAME
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(name)
        run_id = self.client.create_run(experiment_id, run_name=Path(log_dir).name).info.run_id
        params = [Param(key, str(value)) for key, value in sorted(_flat_params(hparams).items())]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(run_id, params=params[start:start + 100])
        return run_id

    def log_epoch(self, row: dict, step_losses: torch.Tensor | None, last_step: int) -> None:
        from mlflow.entities import Metric

        if last_step <= self.logged_until:
            return  # logged by the interrupted run before its checkpoint; exact resume redid the same numbers
        stamp = int(1000 * time.time())
        points = [Metric(key, value, stamp, last_step) for key, value in scalars(row).items()]
        if step_losses is not None:
            first_step = last_step - len(step_losses) + 1
            points += [Metric(STEP_TAG, value, stamp, first_step + offset)
                       for offset, value in enumerate(step_losses.tolist())]  # one host sync for the epoch
        for start in range(0, len(points), 1000):  # MLflow takes at most 1000 metrics per batch
            self.client.log_batch(self.run_id, metrics=points[start:start + 1000])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class WandbLogger(Logger):
    """Each epoch's row and step losses in a W&B run, the settings as its config; a resume reopens the run."""

    wants_step_losses = True

    def __init__(self, log_dir: Path, *, purge_step: int, hparams: dict[str, Any], resuming: bool = False):
        import wandb

        run_id = _saved_run_id(log_dir, "wandb") if resuming else None
        try:
            self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or PROJECT_NAME.lower().replace(" ", "-"),
                                  dir=os.environ.get("WANDB_DIR") or str(log_dir), name=Path(log_dir).name,
                                  id=run_id, resume="allow" if run_id else None, config=_flat_params(hparams),
                                  settings=wandb.Settings(console="off", save_code=False))
        except Exception as error:  # not logged in, no network in online mode
            raise TrackerError(f"--logger wandb: {type(error).__name__}: {(str(error).splitlines() or [''])[0]} "
                               "(wandb login, or WANDB_MODE=offline)") from None
        _save_run_id(log_dir, "wandb", self.run.id)

    def log_epoch(self, row: dict, step_losses: torch.Tensor | None, last_step: int) -> None:
        # W&B's own step is the optimizer step; a resumed run's steps below the run's last are ignored by W&B,
        # so what the interrupted run logged before its checkpoint is not logged twice.
        losses = [] if step_losses is None else step_losses.tolist()  # one host sync for the whole epoch
        first_step = last_step - len(losses) + 1
        for offset, value in enumerate(losses[:-1]):
            self.run.log({STEP_TAG: value}, step=first_step + offset)
        self.run.log({**scalars(row), **({STEP_TAG: losses[-1]} if losses else {})}, step=last_step)

    def close(self) -> None:
        self.run.finish()


_OPENERS = {"tensorboard": TensorBoardLogger, "mlflow": MLflowLogger, "wandb": WandbLogger}
