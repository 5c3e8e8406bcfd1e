"""A run directory's files: config.json, metrics.csv and curves.png, each written atomically.

The pictures themselves are drawn in plots.py; this module only writes bytes and rows.
"""

from __future__ import annotations

import csv
import io
import json
import platform
import sys
from pathlib import Path

from .checkpoint import atomic_file

METRICS_COLUMNS = ("epoch", "train_loss", "train_acc", "val_loss", "val_acc", "lr", "epoch_time_s", "images_per_s")


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` atomically."""
    with atomic_file(path) as handle:
        handle.write(data)


def write_json(path: Path, obj: dict) -> None:
    """Write `obj` as indented JSON."""
    write_atomic(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def run_environment() -> dict:
    """What else a rerun needs besides the flags: the command line and the library versions."""
    import torch
    import torchvision

    return {"command": [Path(sys.argv[0]).name, *sys.argv[1:]], "python": platform.python_version(),
            "torch": torch.__version__, "torchvision": torchvision.__version__, "platform": platform.platform()}


def write_metrics(path: Path, rows: list[dict]) -> None:
    """Write every epoch's metrics as CSV with the fixed column order."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=METRICS_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(path, buffer.getvalue().encode())


def read_metrics(path: Path) -> list[dict]:
    """Rows of a metrics.csv, numbers parsed (used when resuming a run)."""
    if not path.is_file():
        return []
    with open(path, newline="") as handle:
        return [{key: (int(value) if key == "epoch" else float(value)) for key, value in row.items()}
                for row in csv.DictReader(handle)]


def plot_curves(path: Path, rows: list[dict]) -> None:
    """Loss and accuracy per epoch, train and val, as a PNG (see plots.curves_figure)."""
    from .plots import curves_figure, save_figure  # matplotlib loads only when a plot is drawn

    save_figure(curves_figure(rows), path)
