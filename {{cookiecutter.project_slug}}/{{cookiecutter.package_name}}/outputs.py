"""A run directory's text files: config.json and metrics.csv, each written atomically.

The pictures are drawn and saved by plots.py; both write through devkit/atomic.py.
"""

from __future__ import annotations

import csv
import io
import json
import platform
import sys
from pathlib import Path

from .devkit.atomic import atomic_file, atomic_write
from .files import MiB, read_text

METRICS_LIMIT = 64 * MiB  # a metrics.csv row is about 200 bytes: some 300,000 epochs

METRICS_COLUMNS = ("epoch", "train_loss", "train_acc", "val_loss", "val_acc", "lr", "epoch_time_s", "images_per_s",
                   "unreadable_images",  # files skipped so far (data/unreadable.py)
                   "val_macro_f1")  # the mean of the classes' F1 on validation (task.Metrics)


def write_json(path: Path, obj: dict) -> None:
    """Write `obj` as indented JSON."""
    atomic_write(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def run_environment() -> dict:
    """What else a rerun needs besides the flags: the command line and the library versions."""
    import torch
    import torchvision

    return {"command": [Path(sys.argv[0]).name, *sys.argv[1:]], "python": platform.python_version(),
            "torch": torch.__version__, "torchvision": torchvision.__version__, "platform": platform.platform()}


def write_metrics(path: Path, rows: list[dict]) -> None:
    """Write every epoch's metrics as CSV with the fixed column order (options' own columns after them)."""
    # plugins' own columns (e.g. the EMA's), from every row: a resumed run's rows may have more than older ones
    extra = list(dict.fromkeys(key for row in rows for key in row if key not in METRICS_COLUMNS))
    with atomic_file(path, "w") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*METRICS_COLUMNS, *extra], lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def read_metrics(path: Path) -> list[dict]:
    """Rows of a metrics.csv, numbers parsed (used when resuming a run); none when the run wrote none yet."""
    try:  # bounded: a run folder from elsewhere may hold a FIFO or a link to /dev/zero by that name
        text = read_text(path, METRICS_LIMIT, within=path.parent)
    except FileNotFoundError:
        return []
    # An empty cell is a column the row's run did not record (e.g. rows written before it existed).
    return [{key: (int(value) if key == "epoch" else float(value)) for key, value in row.items() if value != ""}
            for row in csv.DictReader(io.StringIO(text, newline=""))]



def scalars(row: dict) -> dict[str, float]:
    """A metrics.csv row's numeric columns (every one but `epoch`, which a tracker's step axis already says)."""
    return {key: float(value) for key, value in row.items()
            if key != "epoch" and isinstance(value, (int, float)) and not isinstance(value, bool)}
