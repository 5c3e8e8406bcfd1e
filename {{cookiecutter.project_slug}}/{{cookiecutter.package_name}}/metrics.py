"""Classification metrics from a confusion matrix that is accumulated on the device.

`update_confusion` adds a batch with one `index_put_` on whatever device the logits are on (not
`bincount`, whose output size depends on the data and so waits for the device); nothing is read back
until the caller asks for the final matrix (one host sync per pass). Under ddp, training.loop.evaluate
adds every rank's matrix together (one all-reduce), so the figures cover the whole split.

`class_report` turns a matrix into accuracy, per-class precision, recall and F1, and macro-F1; the
validation's macro-F1 is metrics.csv's `val_macro_f1` column. Another figure from the matrix: add a
field to ClassReport, and a column to the row in training/epochs.py `_metrics_row` (every logger gets it).
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
    # Each (true, predicted) pair becomes one flat cell index; accumulating index_put_ counts them all at once.
    cells = targets.to(matrix.device) * matrix.shape[0] + predictions.to(matrix.device)  # (B,)
    matrix.view(-1).index_put_((cells,), torch.ones_like(cells, dtype=matrix.dtype), accumulate=True)
    return matrix


@dataclasses.dataclass
class ClassReport:
    """Accuracy over all images; precision, recall, F1 and support per class; macro-F1 (their plain mean)."""

    accuracy: float
    precision: list[float]
    recall: list[float]
    support: list[int]
    f1: list[float]
    macro_f1: float


def class_report(matrix: torch.Tensor) -> ClassReport:
    """Per-class precision (of the predictions of a class) and recall (of its true images)."""
    counts = matrix.detach().double().cpu()  # the one host sync
    correct = counts.diagonal()
    predicted, actual = counts.sum(dim=0), counts.sum(dim=1)
    # A class never predicted (or absent) has no correct images either: 0 / 1 reports 0 rather than NaN.
    precision, recall = correct / predicted.clamp(min=1), correct / actual.clamp(min=1)
    accuracy = (correct.sum() / counts.sum().clamp(min=1)).item()
    # F1 = 2TP / (2TP + FP + FN); a class neither present nor predicted scores 0 and still counts in the mean
    f1 = 2 * correct / (predicted + actual).clamp(min=1)
    return ClassReport(accuracy, precision.tolist(), recall.tolist(), [int(n) for n in actual.tolist()],
                       f1.tolist(), f1.mean().item() if len(f1) else 0.0)


def format_report(report: ClassReport, class_names: Sequence[str]) -> str:
    """An aligned text table: class, precision, recall, F1, support; then macro-F1."""
    width = max(len("class"), *(len(name) for name in class_names))
    lines = [f"{'class':<{width}}  precision  recall     f1  support"]
    for name, p, r, f, n in zip(class_names, report.precision, report.recall, report.f1, report.support):
        lines.append(f"{name:<{width}}  {p:>9.3f}  {r:>6.3f}  {f:>5.3f}  {n:>7d}")
    lines.append(f"{'macro-F1':<{width}}  {report.macro_f1:.6f}")
    return "\n".join(lines)


class ConfidentMistakes:
    """The `count` wrong predictions made with the highest probability, kept on the device as batches pass.

    Call it with each batch's (images, targets, logits) (engine.evaluate's `on_batch`). Correct
    predictions get confidence -1 instead of being filtered out, so the shapes never depend on
    the data and nothing is read back before `result()` (one host sync).
    """

    def __init__(self, count: int = 16):
        self.count, self.kept = count, ()  # (images, targets, predictions, confidences) once a batch has passed

    def __call__(self, images: torch.Tensor, targets: torch.Tensor, logits: torch.Tensor) -> None:
        confidences, predictions = logits.float().softmax(dim=1).max(dim=1)  # (B,) each
        batch = (images, targets, predictions, torch.where(predictions == targets, -1.0, confidences))
        if self.kept:  # the best so far compete with the new batch
            batch = tuple(torch.cat([old, new.to(old.dtype)]) for old, new in zip(self.kept, batch))
        top = batch[3].topk(min(self.count, len(batch[3]))).indices
        self.kept = tuple(tensor[top] for tensor in batch)

    def result(self) -> tuple[torch.Tensor, list[int], list[int], list[float]]:
        """(images (N, 3, H, W) on the CPU, true classes, predicted classes, probabilities), most confident first."""
        if not self.kept:
            return torch.empty(0, 3, 1, 1), [], [], []
        images, targets, predictions, confidences = self.kept
        wrong = confidences >= 0
        return (images[wrong].float().cpu(), targets[wrong].tolist(), predictions[wrong].tolist(),
                confidences[wrong].tolist())
