"""Classification metrics from a confusion matrix that is accumulated on the device.

`update_confusion` adds a batch with one `torch.bincount` on whatever device the logits are
on; nothing is read back until the caller asks for the final matrix (one host sync).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch


def new_confusion(num_classes: int, device: torch.device) -> torch.Tensor:
    """An all-zero (C, C) count matrix on `device`: rows are true classes, columns predictions."""
    return torch.zeros(num_classes, num_classes, dtype=torch.long, device=device)


def update_confusion(matrix: torch.Tensor, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Add one batch of predicted and true class indices (each (B,)) to `matrix`, in place."""
    num_classes = matrix.shape[0]
    # Each (true, predicted) pair becomes one flat cell index; bincount counts them all at once.
    cells = targets.to(matrix.device) * num_classes + predictions.to(matrix.device)  # (B,)
    matrix += torch.bincount(cells, minlength=num_classes * num_classes).view(num_classes, num_classes)
    return matrix


@dataclasses.dataclass
class ClassReport:
    """Accuracy over all images and precision, recall and support per class."""

    accuracy: float
    precision: list[float]
    recall: list[float]
    support: list[int]


def class_report(matrix: torch.Tensor) -> ClassReport:
    """Per-class precision (of the predictions of a class) and recall (of its true images)."""
    counts = matrix.detach().double().cpu()  # the one host sync
    correct = counts.diagonal()
    predicted, actual = counts.sum(dim=0), counts.sum(dim=1)
    # A class never predicted (or absent) has no precision (recall): report 0 rather than NaN.
    precision = torch.where(predicted > 0, correct / predicted.clamp(min=1), torch.zeros_like(correct))
    recall = torch.where(actual > 0, correct / actual.clamp(min=1), torch.zeros_like(correct))
    accuracy = (correct.sum() / counts.sum().clamp(min=1)).item()
    return ClassReport(accuracy, precision.tolist(), recall.tolist(), [int(n) for n in actual.tolist()])


def format_report(report: ClassReport, class_names: Sequence[str]) -> str:
    """An aligned text table: class, precision, recall, support."""
    width = max(len("class"), *(len(name) for name in class_names))
    lines = [f"{'class':<{width}}  precision  recall  support"]
    for name, p, r, n in zip(class_names, report.precision, report.recall, report.support):
        lines.append(f"{name:<{width}}  {p:>9.3f}  {r:>6.3f}  {n:>7d}")
    return "\n".join(lines)
