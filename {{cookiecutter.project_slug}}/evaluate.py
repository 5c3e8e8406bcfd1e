"""Measure a trained checkpoint on an ImageFolder split.

    python evaluate.py runs/latest/best.pt --data path/to/data --split val

Exit codes: 0 done, 1 failure, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from {{ cookiecutter.package_name }} import config
from {{ cookiecutter.package_name }}.checkpoint import load_checkpoint
from {{ cookiecutter.package_name }}.cli import run_cli
from {{ cookiecutter.package_name }}.data import DEMO_ROOT, build_loader, image_folder
from {{ cookiecutter.package_name }}.engine import evaluate
from {{ cookiecutter.package_name }}.loss import WeightedCrossEntropy
from {{ cookiecutter.package_name }}.model import model_from_checkpoint
from {{ cookiecutter.package_name }}.precision import make_policy


def get_args_parser() -> argparse.ArgumentParser:
    """The evaluation flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoint", help="a .pt file written by train.py, or its run directory")
    p.add_argument("--data", default=None, help="ImageFolder root (default: the demo data)")
    p.add_argument("--split", default="val")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", default=None, help=f"default: ${config.DEVICE_ENV_VAR}, else {config.DEFAULT_DEVICE}")
    p.add_argument("--verbose", action="store_true")
    return p


def run(args: argparse.Namespace) -> int:
    """Print loss and accuracy of the checkpoint on the split."""
    device = config.configure_device(args.device)
    state = load_checkpoint(args.checkpoint, map_location="cpu")
    model = model_from_checkpoint(state, device, args.checkpoint)
    dataset = image_folder(Path(args.data) if args.data else DEMO_ROOT, args.split, state["image_size"], train=False)
    loader = build_loader(dataset, args.batch_size, device, train=False)
    loss_fn = WeightedCrossEntropy(torch.ones(len(state["class_names"]))).to(device)
    stats = evaluate(model, loss_fn, loader, device, policy=make_policy("fp32", device), progress=False)
    print(f"{args.split}: loss {stats.loss:.4f}  accuracy {stats.acc:.4f}  ({stats.images} images)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse flags and evaluate; returns the exit code."""
    args = get_args_parser().parse_args(argv)
    return run_cli(lambda: run(args), verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
