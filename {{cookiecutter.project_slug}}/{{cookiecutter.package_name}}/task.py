"""The task, defined once: the loss that training minimises and the figures that validation reports.

Training (training/run.py builds `build_loss` and `Metrics` for its run), evaluate.py and every rebuild from a
checkpoint (training/run_state.py `loss_from_state`) use this module and nothing else, so evaluate.py on a
checkpoint prints the val_loss and metrics that metrics.csv recorded for its epoch.

- The loss: `build_loss(class_counts, label_smoothing, device)`; replace its body (or the class it builds) to
  train with another loss. It is rebuilt from what every checkpoint records (the class counts, the config).
- The metrics: `Metrics.update` counts what each validation batch adds, on the device (no host read);
  `Metrics.compute` sums the counts over the processes (one all-reduce each under ddp) and returns the figures,
  which become metrics.csv's `val_<name>` columns (every tracker gets them) and evaluate.py's `<split>_<name>`.
  Another metric: a count in `__init__`, its update, its figure in `compute`; a top-k accuracy: `TOP_K`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

TOP_K = (5,)  # top-k accuracies to report, each where there are more than k classes (top-1 is `acc`)


def balanced_class_weights(counts: torch.Tensor) -> torch.Tensor:
    """Weights inversely proportional to class frequency, averaging 1 over the samples."""
    counts = counts.float().clamp(min=1)
    return counts.sum() / (len(counts) * counts)


class WeightedCrossEntropy(nn.Module):
    """Cross entropy with per-class weights held as a buffer (so they follow `.to()`), computed in float32.

    A plain tensor attribute (`self.weight = torch.tensor(...)`) would stay on the CPU when the loss is moved
    and fail with "Expected all tensors to be on the same device" on a GPU.
    """

    def __init__(self, class_weights: torch.Tensor, label_smoothing: float = 0.0):
        super().__init__()
        self.register_buffer("class_weights", class_weights.float())
        self.label_smoothing = label_smoothing

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean loss for logits (B, C) and integer targets (B,) or class probabilities (B, C) (MixUp/CutMix)."""
        # float32 even under autocast: fp16 log-softmax loses the small probabilities.
        return F.cross_entropy(logits.float(), targets, weight=self.class_weights,
                               label_smoothing=self.label_smoothing)


def build_loss(class_counts: Sequence[int] | torch.Tensor, label_smoothing: float, device: torch.device) -> nn.Module:
    """The loss of a run whose training split has `class_counts` images per class, on `device`."""
    counts = torch.as_tensor(class_counts)
    return WeightedCrossEntropy(balanced_class_weights(counts), label_smoothing).to(device)


def hits(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """How many of a batch's top-1 predictions are right, on the device: the running `train_acc` and `val_acc`."""
    return (logits.argmax(dim=1) == targets).sum()


class Metrics:
    """The validation's counts, kept on the device as batches pass; `compute` turns them into figures.

    `counts` holds every running count by name: `compute` sums each over the processes before reading it.
    """

    def __init__(self, num_classes: int, device: torch.device):
        self.num_classes = num_classes
        self.top_k = [k for k in TOP_K if num_classes > k]
        self.counts = {"confusion": new_confusion(num_classes, device),  # rows: true classes, columns: predicted
                       **{f"top{k}": torch.zeros((), dtype=torch.long, device=device) for k in self.top_k}}

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        """Count one batch: logits (B, C), integer targets (B,), both on the counts' device."""
        update_confusion(self.counts["confusion"], logits.argmax(dim=1), targets)
        if self.top_k:
            ranked = logits.topk(max(self.top_k), dim=1).indices  # (B, k) classes, most probable first
            for k in self.top_k:
                self.counts[f"top{k}"] += (ranked[:, :k] == targets[:, None]).any(dim=1).sum()

    def compute(self, total: Callable[[torch.Tensor], torch.Tensor] = lambda counts: counts) -> dict[str, float]:
        """The figures by name, from the counts summed over the processes by `total` (Processes.total, in place:
        call it once, after the last batch, in every process)."""
        for counts in self.counts.values():
            total(counts)
        report = class_report(self.counts["confusion"])  # the one host read of the matrix
        images = max(sum(report.support), 1)
        figures = {"acc": report.accuracy, "macro_f1": report.macro_f1}
        figures.update({f"top{k}_acc": self.counts[f"top{k}"].item() / images for k in self.top_k})
        return figures

    @property
    def confusion(self) -> torch.Tensor:
        """The (C, C) confusion matrix counted so far (summed over the processes once `compute` ran)."""
        return self.counts["confusion"]


def new_confusion(num_classes: int, device: torch.device) -> torch.Tensor:
    """An all-zero (C, C) count matrix on `device`: rows are true classes, columns predictions."""
    return torch.zeros(num_classes, num_classes, dtype=torch.long, device=device)


def update_confusion(matrix: torch.Tensor, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Add one batch of predicted and true class indices (each (B,)) to `matrix`, in place."""
    # Each (true, predicted) pair becomes one flat cell index; an accumulating index_put_ counts them all at once
    # (not bincount, whose output size depends on the data and so waits for the device).
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
