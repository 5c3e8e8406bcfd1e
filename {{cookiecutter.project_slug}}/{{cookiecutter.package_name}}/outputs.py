"""A run directory's files: config.json, metrics.csv and curves.png, each written atomically."""

from __future__ import annotations

import csv
import io
import json
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
    """Loss and accuracy per epoch, train and val, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed; must precede pyplot
    import matplotlib.pyplot as plt

    epochs = [row["epoch"] for row in rows]
    figure, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(9, 3.5))
    for split in ("train", "val"):
        loss_ax.plot(epochs, [row[f"{split}_loss"] for row in rows], marker="o", label=split)
        acc_ax.plot(epochs, [row[f"{split}_acc"] for row in rows], marker="o", label=split)
    for axis, title in ((loss_ax, "loss"), (acc_ax, "accuracy")):
        axis.set_title(title)
        axis.set_xlabel("epoch")
        axis.legend()
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    write_atomic(path, buffer.getvalue())
