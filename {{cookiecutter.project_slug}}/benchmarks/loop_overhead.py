"""What the project's training loop costs: `train_one_epoch` against a minimal hand-written loop.

    python benchmarks/loop_overhead.py --device cpu
    python benchmarks/loop_overhead.py --device cuda:0 --batch-size 128 --image-size 224 --precision bf16

Both loops train fresh copies of one initial model on the same in-memory batches, with the same
optimizer (the project's: optimization.make_optimizer, fused AdamW where the device has it), loss
(WeightedCrossEntropy), batch size, precision, device and thread count. The batches are uint8, as train.py's
loaders yield them: both loops make them float and normalise them on the device. `--channels-last` puts the
model and its inputs in NHWC, `--compile` runs both through torch.compile.
After a warm-up they run interleaved (the order alternates every repeat, so drift in the
machine's load hits both alike). Printed: images/s of every run, the medians, and the median of
the per-repeat ratios project / hand-written, without and with the tqdm progress bar. The
hand-written loop's rate is the model's pure compute rate on this device at this batch size.
A script that prints figures, not a test; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, uninstalled

import torch  # noqa: E402

from {{ cookiecutter.package_name }} import config
from {{ cookiecutter.package_name }}.cli import run_cli
from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.data import IMAGENET_MEAN, IMAGENET_STD
from {{ cookiecutter.package_name }}.devkit import describe_device
from {{ cookiecutter.package_name }}.model import build_model
from {{ cookiecutter.package_name }}.task import WeightedCrossEntropy
from {{ cookiecutter.package_name }}.training import optimization
from {{ cookiecutter.package_name }}.training.hardware import Hardware
from {{ cookiecutter.package_name }}.training.loop import train_one_epoch

Batches = list[tuple[torch.Tensor, torch.Tensor]]


def get_args_parser() -> argparse.ArgumentParser:
    """The benchmark's flags; data_throughput.py reuses them."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default=None, help="as train.py: auto, cpu, cuda:N, ... (default: the project's)")
    p.add_argument("--backbone", default=TrainConfig().backbone)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch.set_num_threads for every loop")
    p.add_argument("--batches", type=int, default=8, help="in-memory batches per timed epoch")
    p.add_argument("--warmup", type=int, default=1, help="untimed epochs of each loop before timing")
    p.add_argument("--repeats", type=int, default=5, help="interleaved timed epochs of each loop")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--channels-last", action="store_true", help="NHWC model and inputs in both loops")
    p.add_argument("--compile", action="store_true", help="torch.compile the model in both loops")
    return p


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so the clock measures work done rather than work queued."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type in ("mps", "xpu"):
        getattr(torch, device.type).synchronize()


def synthetic_batches(args: argparse.Namespace, device: torch.device) -> Batches:
    """Fixed uint8 host batches, pinned on CUDA, as the project's DataLoader yields them."""
    generator = torch.Generator().manual_seed(args.seed)
    batches = []
    for _ in range(args.batches):
        images = torch.randint(256, (args.batch_size, 3, args.image_size, args.image_size), generator=generator,
                               dtype=torch.uint8)  # (B, 3, H, W)
        targets = torch.randint(args.classes, (args.batch_size,), generator=generator)  # (B,)
        if device.type == "cuda":
            images, targets = images.pin_memory(), targets.pin_memory()
        batches.append((images, targets))
    return batches


def hand_written_epoch(model, loss_fn, optimizer, batches: Batches, device: torch.device, precision: str,
                       memory_format: torch.memory_format = torch.contiguous_format) -> None:
    """The minimal loop a user would write by hand: no metrics, no progress, no conveniences."""
    model.train()
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16" and device.type == "cuda")
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    mean, std = (torch.tensor(values, device=device).view(-1, 1, 1) for values in (IMAGENET_MEAN, IMAGENET_STD))
    for images, targets in batches:
        images, targets = images.to(device, non_blocking=True), targets.to(device, non_blocking=True)
        images = ((images.float() / 255 - mean) / std).contiguous(memory_format=memory_format)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            logits = model(images)
        loss = loss_fn(logits, targets)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


class Bench:
    """One initial model and the batches; each run trains a fresh copy and returns images/s."""

    def __init__(self, args: argparse.Namespace, device: torch.device):
        torch.set_num_threads(args.threads)
        torch.manual_seed(args.seed)
        self.args, self.device = args, device
        self.memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
        self.initial = build_model(args.backbone, args.classes, pretrained=False, device=device).to(
            memory_format=self.memory_format)
        self.loss_fn = WeightedCrossEntropy(torch.ones(args.classes)).to(device)
        self.batches = synthetic_batches(args, device)

    def _timed(self, epoch: Callable) -> float:
        """images/s of one epoch of `epoch(model, optimizer)` on a fresh copy of the model."""
        model = copy.deepcopy(self.initial)
        optimizer = optimization.make_optimizer(model, TrainConfig(lr=1e-3))  # train.py's (fused AdamW where it can)
        step_model = torch.compile(model) if self.args.compile else model
        synchronize(self.device)
        start = time.perf_counter()
        epoch(step_model, optimizer)
        synchronize(self.device)
        return len(self.batches) * self.args.batch_size / (time.perf_counter() - start)

    def hand_written(self) -> float:
        """images/s of the hand-written loop."""
        return self._timed(lambda model, optimizer: hand_written_epoch(
            model, self.loss_fn, optimizer, self.batches, self.device, self.args.precision, self.memory_format))

    def project(self, progress: bool = False) -> float:
        """images/s of the project's train_one_epoch (with or without its tqdm bar)."""
        return self._timed(lambda model, optimizer: train_one_epoch(
            model, self.loss_fn, optimizer, self.batches,
            Hardware.create(self.device, self.args.precision, self.args.channels_last, mean=IMAGENET_MEAN,
                            std=IMAGENET_STD), progress=progress))


def run_interleaved(bench: Bench, repeats: int, warmup: int) -> dict[str, list[float]]:
    """images/s per loop and repeat, the order of the loops rotating every repeat."""
    loops = {"hand-written": bench.hand_written, "project": bench.project,
             "project+tqdm": lambda: bench.project(progress=True)}
    for _ in range(warmup):
        for run in loops.values():
            run()
    rates = {name: [] for name in loops}
    names = list(loops)
    for repeat in range(repeats):
        for name in names[repeat % 3:] + names[:repeat % 3]:
            rates[name].append(loops[name]())
    return rates


def report(rates: dict[str, list[float]]) -> str:
    """Each run's images/s, the medians and the median ratios to the hand-written loop."""
    hand = rates["hand-written"]
    lines = [f"{'repeat':>6}  " + "  ".join(f"{name:>14}" for name in rates) + "   (images/s)"]
    for i in range(len(hand)):
        lines.append(f"{i + 1:>6}  " + "  ".join(f"{rates[name][i]:>14.1f}" for name in rates))
    lines.append("median images/s: " + ", ".join(f"{name} {statistics.median(r):.1f}" for name, r in rates.items()))
    for name in ("project", "project+tqdm"):
        ratios = [a / b for a, b in zip(rates[name], hand)]
        lines.append(f"median ratio {name} / hand-written: {statistics.median(ratios):.3f} "
                     f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
    return "\n".join(lines)


def benchmark(args: argparse.Namespace) -> int:
    """Run both loops interleaved and print the figures."""
    device = config.compute_device(args.device)
    bench = Bench(args, device)
    print(f"device: {describe_device(device)}  threads: {torch.get_num_threads()}  backbone: {args.backbone}  "
          f"precision: {args.precision}  {args.batches} uint8 batches of {args.batch_size} at {args.image_size} px"
          f"{'  channels_last' if args.channels_last else ''}{'  compiled' if args.compile else ''}",
          flush=True)
    print(report(run_interleaved(bench, args.repeats, args.warmup)))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse flags and benchmark; a bad device or precision is one line and exit 2."""
    args = get_args_parser().parse_args(argv)
    return run_cli(lambda: benchmark(args))


if __name__ == "__main__":
    sys.exit(main())
