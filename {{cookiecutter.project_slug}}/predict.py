"""Classify images with a trained checkpoint.

    python predict.py runs/latest/best.pt photo1.png photo2.jpg --device cpu

Prints one row per image: path, label, probability. Exit codes: 0 done, 1 failure, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys

import torch

from {{ cookiecutter.package_name }} import config
from {{ cookiecutter.package_name }}.checkpoint import load_checkpoint
from {{ cookiecutter.package_name }}.cli import run_cli
from {{ cookiecutter.package_name }}.data import build_transforms, load_rgb
from {{ cookiecutter.package_name }}.model import model_from_checkpoint
from {{ cookiecutter.package_name }}.precision import half_copy


def get_args_parser() -> argparse.ArgumentParser:
    """The prediction flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoint", help="a .pt file written by train.py, or its run directory")
    p.add_argument("images", nargs="+", help="image files")
    p.add_argument("--device", default=None, help=f"default: ${config.DEVICE_ENV_VAR}, else {config.DEFAULT_DEVICE}")
    p.add_argument("--half", action="store_true",
                   help="run a float16 copy of the model, inputs cast to match (about half the memory; "
                        "probabilities agree with fp32 to within 0.05)")
    p.add_argument("--verbose", action="store_true")
    return p


def predict(args: argparse.Namespace) -> int:
    """Load the model once, classify every image, print a row each."""
    device = config.configure_device(args.device)
    state = load_checkpoint(args.checkpoint, map_location="cpu")
    model = model_from_checkpoint(state, device, args.checkpoint).eval()
    if args.half:
        model = half_copy(model)
    transform = build_transforms(state["image_size"], train=False)
    images = torch.stack([transform(load_rgb(path)) for path in args.images])  # (N, 3, H, W)
    with torch.inference_mode():
        # inputs take the model's dtype (float16 under --half); softmax in float32
        probs = model(images.to(device, dtype=model.dtype)).float().softmax(dim=1)  # (N, C)
    confidence, index = probs.max(dim=1)
    for path, p, i in zip(args.images, confidence.tolist(), index.tolist()):
        print(f"{path}\t{state['class_names'][i]}\t{p:.3f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse flags and predict; returns the exit code."""
    args = get_args_parser().parse_args(argv)
    return run_cli(lambda: predict(args), verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
