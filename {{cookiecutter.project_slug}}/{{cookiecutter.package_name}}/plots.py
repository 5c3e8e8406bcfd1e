"""Pictures of a run: training curves, a confusion matrix, and the most confident mistakes (and collecting them).

Each builder returns a matplotlib `Figure` (object-oriented API, no pyplot state, no display
backend) so that tests and notebooks can inspect what was drawn; `save_figure` writes it as a
PNG atomically. matplotlib is imported here only, so training without plots never loads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from .devkit.atomic import atomic_file


def curves_figure(rows: Sequence[dict]) -> Figure:
    """Loss and accuracy per epoch, one line each for train and val (four lines in all)."""
    epochs = [row["epoch"] for row in rows]
    figure = Figure(figsize=(9, 3.5))
    loss_ax, acc_ax = figure.subplots(1, 2)
    for split in ("train", "val"):
        loss_ax.plot(epochs, [row[f"{split}_loss"] for row in rows], marker="o", label=split)
        acc_ax.plot(epochs, [row[f"{split}_acc"] for row in rows], marker="o", label=split)
    for axis, title in ((loss_ax, "loss"), (acc_ax, "accuracy")):
        axis.set(title=title, xlabel="epoch", xticks=epochs)  # ticks: whole epochs only, even for a short run
        axis.grid(alpha=0.3)
        axis.legend()
    acc_ax.set_ylim(0.0, 1.02)
    figure.tight_layout()
    return figure


def confusion_figure(matrix: torch.Tensor, class_names: Sequence[str]) -> Figure:
    """A C x C confusion matrix (rows: true class, columns: predicted) with a count in each cell."""
    counts = torch.as_tensor(matrix).cpu()  # (C, C)
    size = max(4.0, 0.6 * len(class_names) + 2.0)
    figure = Figure(figsize=(size + 1.0, size))
    axis = figure.subplots()
    image = axis.imshow(counts.numpy(), cmap="Blues", vmin=0)
    figure.colorbar(image, ax=axis, fraction=0.046, pad=0.04)
    ticks = range(len(class_names))
    axis.set_xticks(ticks, labels=list(class_names), rotation=45, ha="right")
    axis.set_yticks(ticks, labels=list(class_names))
    axis.set(xlabel="predicted", ylabel="true", title="confusion matrix")
    threshold = counts.max().item() / 2
    for (row, col), count in np.ndenumerate(counts.numpy()):
        axis.text(col, row, str(count), ha="center", va="center", color="white" if count > threshold else "black")
    figure.tight_layout()
    return figure


class ConfidentMistakes:
    """The `count` wrong predictions made with the highest probability, kept on the device as batches pass.

    Call it with each batch's (images, targets, logits) (training.loop.evaluate's `on_batch`, for evaluate.py's
    mistakes figure). Correct predictions get confidence -1 instead of being filtered out, so the shapes never
    depend on the data and nothing is read back before `result()` (one host sync).
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


def mistakes_figure(images: torch.Tensor, targets: Sequence[int], predictions: Sequence[int],
                    probabilities: Sequence[float], class_names: Sequence[str], *, mean: Sequence[float],
                    std: Sequence[float], columns: int = 4) -> Figure:
    """A grid of misclassified images, each titled with its true label, predicted label and probability."""
    count = len(targets)
    rows = max(1, -(-count // columns))  # ceiling division
    figure = Figure(figsize=(2.4 * columns, 2.6 * rows))
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    # Undo the transforms' normalisation so the pictures look like the files did.
    pixels = images.float().cpu() * torch.tensor(std).view(1, 3, 1, 1) + torch.tensor(mean).view(1, 3, 1, 1)
    for index, axis in enumerate(axes):
        axis.axis("off")
        if index < count:
            axis.imshow(pixels[index].clamp(0, 1).permute(1, 2, 0).numpy())  # (H, W, 3)
            axis.set_title(f"true {class_names[targets[index]]}\npred {class_names[predictions[index]]} "
                           f"({probabilities[index]:.2f})", fontsize=9, color="firebrick")
    if count == 0:
        axes[0].text(0.5, 0.5, "no wrong predictions", ha="center", va="center")
    figure.suptitle(f"most confident mistakes ({count})")
    figure.tight_layout()
    return figure


def save_figure(figure: Figure, path: str | Path, dpi: int = 100) -> Path:
    """Render `figure` as a PNG and write it atomically to `path`."""
    with atomic_file(path) as handle:
        figure.savefig(handle, format="png", dpi=dpi)
    return Path(path)
