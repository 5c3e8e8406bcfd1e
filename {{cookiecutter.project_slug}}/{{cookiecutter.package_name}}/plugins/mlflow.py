"""The tracker answer `mlflow`: each epoch's metrics.csv row and every step's loss as MLflow metrics, the settings
as its params. Installed by `pip install -e '.[mlflow]'`.

The store is $MLFLOW_TRACKING_URI, else an SQLite file beside the run folders (runs/mlflow.db, which
`mlflow ui --backend-store-uri sqlite:///runs/mlflow.db` reads; the full `mlflow` package has the UI); the
experiment is $MLFLOW_EXPERIMENT_NAME, else the project's name. A resumed run reopens its MLflow run (the id
in the run folder's tracker.json) and logs no step twice. MLflow's HTTP client would retry an unreachable
server for minutes in silence; here it tries for about 15 seconds, then the run stops with one line.
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

from .. import PROJECT_NAME
from ..errors import UserError
from ..outputs import scalars
from . import Plugin
from ._tracker_run import save_tracker_run_id, tracker_run_id

STEP_TAG = "train_loss_step"


class TrackerError(UserError):
    """The tracker could not start or reopen its run (a store that cannot be opened, a server that does not answer)."""


def tracking_uri(out: Path) -> str:
    """$MLFLOW_TRACKING_URI, else an SQLite store beside the run folders (runs/mlflow.db)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(out).resolve().parent / 'mlflow.db'}"


class MLflowPlugin(Plugin):
    """--logger mlflow: an MLflow run per training run, reopened on resume."""

    name, optional, wants_step_losses = "mlflow", True, True

    def __init__(self):
        self.client, self.run_id, self.logged_until, self.note = None, None, 0, None

    def choices(self) -> dict[str, list[str]]:
        return {"logger": ["mlflow"]}

    def unavailable(self, field: str, value: str, device) -> str | None:
        if importlib.util.find_spec("mlflow") is None:
            return "--logger mlflow needs the mlflow package: pip install -e '.[mlflow]'"
        return None

    def start(self, run, out: Path) -> None:
        if run.cfg.logger != "mlflow" or not run.processes.is_main():
            return
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
        run_id = tracker_run_id(out, "mlflow") if run.cfg.resume else None
        for attempt in range(3):  # two runs creating a fresh runs/mlflow.db at once: the second retries
            try:
                self._open(out, run.cfg.to_dict(), run_id)
                break
            except Exception as error:  # the store's own errors: a bad URI, no answer, a missing driver
                if attempt == 2 or ("locked" not in str(error) and "already exists" not in str(error)):
                    raise TrackerError(f"--logger mlflow: {type(error).__name__}: "
                                       f"{(str(error).strip().splitlines() or [''])[0]}") from None
                time.sleep(1 + attempt)
        save_tracker_run_id(out, "mlflow", self.run_id)
        if self.note:
            run.processes.print(self.note)

    def _open(self, out: Path, settings: dict, run_id: str | None) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri(out))
        if run_id is not None and not self._has_run(run_id):  # a run folder copied or moved away from its store
            self.note = (f"note: --logger mlflow: run {run_id} (tracker.json) is not in {tracking_uri(out)}; "
                         "this resume logs to a new MLflow run")
            run_id = None
        if run_id is None:
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or PROJECT_NAME
            experiment = self.client.get_experiment_by_name(name)
            experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(name)
            run_id = self.client.create_run(experiment_id, run_name=Path(out).name).info.run_id
            params = [Param(key, str(value)) for key, value in sorted(settings.items())]
            for start in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
                self.client.log_batch(run_id, params=params[start:start + 100])
        self.run_id = run_id
        self.client.update_run(run_id, status="RUNNING")
        # a run killed between logging an epoch and saving the next checkpoint holds steps this process redoes
        history = self.client.get_metric_history(run_id, STEP_TAG)
        self.logged_until = max((point.step for point in history), default=0)

    def _has_run(self, run_id: str) -> bool:
        """Whether this store holds the run `run_id`."""
        from mlflow.exceptions import MlflowException

        try:
            self.client.get_run(run_id)
        except MlflowException as error:
            if error.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            return False
        return True

    def after_epoch(self, run, row: dict) -> None:
        last_step = row["epoch"] * run.steps_per_epoch
        if self.client is None or last_step <= self.logged_until:
            return  # not ours (mlflow may not even be installed), or logged before the interruption (exact resume)
        from mlflow.entities import Metric

        stamp = int(1000 * time.time())
        points = [Metric(key, value, stamp, last_step) for key, value in scalars(row).items()]
        losses = [] if run.step_losses is None else run.step_losses.tolist()  # one host read for the epoch
        points += [Metric(STEP_TAG, value, stamp, last_step - len(losses) + 1 + offset)
                   for offset, value in enumerate(losses)]
        for start in range(0, len(points), 1000):  # MLflow takes at most 1000 metrics per batch
            self.client.log_batch(self.run_id, metrics=points[start:start + 1000])

    def close(self, run) -> None:
        if self.client is not None:
            self.client.set_terminated(self.run_id)
            self.client = None


PLUGIN = MLflowPlugin()
