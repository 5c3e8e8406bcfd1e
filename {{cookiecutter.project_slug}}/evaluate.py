"""Measure a trained checkpoint on an ImageFolder split: accuracy, per-class table, confusion matrix.

    python evaluate.py runs/latest/best.pt --data path/to/data --split val

Prints accuracy and loss, a precision/recall table per class, and writes the confusion
matrix as a PNG (default: confusion_<split>.png beside the checkpoint, or --out).
Exit codes: 0 done, 1 failure, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from {{ cookiecutter.package_name }} import config
from {{ cookiecutter.package_name }}.checkpoint import load_checkpoint
from {{ cookiecutter.package_name }}.cli import run_cli
from {{ cookiecutter.package_name }}.data import DEMO_ROOT, DataError, build_loader, image_folder
from {{ cookiecutter.package_name }}.metrics import class_report, format_report, new_confusion, update_confusion
from {{ cookiecutter.package_name }}.model import model_from_checkpoint


def get_args_parser() -> argparse.ArgumentParser:
    """The evaluation flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoint", help="a .pt file written by train.py, or its run directory (uses last.pt)")
    p.add_argument("--data", default=None, help="ImageFolder root (default: the demo data)")
    p.add_argument("--split", default="val", help="sub-folder of --data to measure (default: val)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    p.add_argument("--device", default=None, help=f"default: ${config.DEVICE_ENV_VAR}, else {config.DEFAULT_DEVICE}")
    p.add_argument("--out", default=None, help="confusion-matrix PNG (default: confusion_<split>.png beside the checkpoint)")
    p.add_argument("--verbose", action="store_true", help="print tracebacks on failure")
    return p


@torch.inference_mode()
def confusion_and_loss(model: nn.Module, loader, device: torch.device, num_classes: int) -> tuple[torch.Tensor, float]:
    """The (C, C) confusion matrix and mean cross-entropy over `loader`, summed on `device`."""
    model.eval()
    matrix = new_confusion(num_classes, device)
    loss_sum = torch.zeros((), device=device)
    for images, targets in loader:
        images = images.to(device, non_blocking=True)  # (B, 3, H, W)
        targets = targets.to(device, non_blocking=True)  # (B,)
        logits = model(images)  # (B, C)
        loss_sum += F.cross_entropy(logits.float(), targets, reduction="sum")
        update_confusion(matrix, logits.argmax(dim=1), targets)
    matrix = matrix.cpu()  # the one host sync of the pass
    return matrix, loss_sum.item() / max(int(matrix.sum()), 1)


def default_png(checkpoint: str, split: str) -> Path:
    """confusion_<split>.png in the checkpoint's run directory."""
    path = Path(checkpoint)
    return (path if path.is_dir() else path.parent) / f"confusion_{split}.png"


def run(args: argparse.Namespace) -> int:
    """Print accuracy and the per-class table; write the confusion-matrix PNG."""
    from {{ cookiecutter.package_name }}.plots import confusion_figure, save_figure

    if args.batch_size < 1 or args.workers < 0:
        raise DataError("--batch-size must be at least 1 and --workers at least 0")
    device = config.configure_device(args.device)
    state = load_checkpoint(args.checkpoint, map_location="cpu")
    class_names = list(state.get("class_names", []))
    model = model_from_checkpoint(state, device, args.checkpoint)
    dataset = image_folder(Path(args.data) if args.data else DEMO_ROOT, args.split, state["image_size"], train=False)
    if dataset.classes != class_names:
        raise DataError(f"{args.split}/ holds classes {dataset.classes}, but the checkpoint knows {class_names}")
    loader = build_loader(dataset, args.batch_size, device, train=False, workers=args.workers)
    matrix, loss = confusion_and_loss(model, loader, device, len(class_names))
    report = class_report(matrix)
    print(f"{args.split}: accuracy {report.accuracy:.4f}  loss {loss:.4f}  "
          f"({int(matrix.sum())} images, {len(class_names)} classes, device {device})")
    print(format_report(report, class_names))
    png = save_figure(confusion_figure(matrix, class_names), args.out or default_png(args.checkpoint, args.split))
    print(f"confusion matrix: {png}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse flags and evaluate; returns the exit code."""
    args = get_args_parser().parse_args(argv)
    return run_cli(lambda: run(args), verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
