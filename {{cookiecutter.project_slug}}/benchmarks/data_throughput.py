"""Can the data pipeline keep up? The project's DataLoader alone, next to the model's consumption rate.

    python benchmarks/data_throughput.py --device cpu --workers 0,1,2
    python benchmarks/data_throughput.py --device cuda:0 --data /path/to/images --image-size 224 \\
        --batch-size 128 --workers 0,4,8,16 --cache-images

For each --workers value the project's training loader (load_splits + build_loader: decode,
random crop and flip, normalise; pinned on CUDA) is iterated with no model attached: the first
epoch includes starting the workers, later epochs reuse them (persistent_workers). With
--cache-images the same is measured for the in-memory uint8 cache of cache.py. Then the model's
consumption rate: the hand-written training loop of loop_overhead.py on in-memory batches of the
same shape on --device. The loader keeps up when its rate is above the model's. On CPU the two
share the cores, so during training both run slower than they do here, alone.
A script that prints figures, not a test; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, uninstalled

import torch  # noqa: E402
from loop_overhead import Bench  # noqa: E402
from loop_overhead import get_args_parser as loop_args_parser

from {{ cookiecutter.package_name }} import config
from {{ cookiecutter.package_name }}.cli import run_cli
from {{ cookiecutter.package_name }}.data.cache import cache_splits
from {{ cookiecutter.package_name }}.data.demo import DEMO_ROOT, write_demo_dataset
from {{ cookiecutter.package_name }}.data.folders import load_splits
from {{ cookiecutter.package_name }}.data.loaders import build_loader
from {{ cookiecutter.package_name }}.devkit import describe_device


def get_args_parser() -> argparse.ArgumentParser:
    """loop_overhead.py's flags (device, model, batch shape) plus the data's."""
    p = loop_args_parser()
    p.description = __doc__.split("\n")[0]
    p.add_argument("--data", default=None, help="ImageFolder root with train/ and val/ (default: the demo data)")
    p.add_argument("--workers", default="0,1,2", help="comma-separated DataLoader worker counts to measure")
    p.add_argument("--epochs", type=int, default=3, help="loader epochs per setting: the first, then steady state")
    p.add_argument("--max-batches", type=int, default=50, help="batches per loader epoch at most (0: all)")
    p.add_argument("--cache-images", action="store_true", help="also measure the --cache-images dataset")
    return p


def loader_rates(dataset, args: argparse.Namespace, device: torch.device, workers: int) -> list[float]:
    """images/s of each epoch of the project's train loader over `dataset`, with no model."""
    loader = build_loader(dataset, args.batch_size, device, train=True, workers=workers, seed=args.seed)
    rates = []
    for _ in range(args.epochs):
        seen, start = 0, time.perf_counter()
        for step, (_images, targets) in enumerate(loader):  # images (B, 3, H, W)
            seen += len(targets)
            if step + 1 == args.max_batches:
                break
        rates.append(seen / (time.perf_counter() - start))
    return rates


def benchmark(args: argparse.Namespace) -> int:
    """Measure every loader setting, then the model, and print one table."""
    device = config.compute_device(args.device)
    torch.set_num_threads(args.threads)
    root = Path(args.data) if args.data else write_demo_dataset(DEMO_ROOT)
    train_set, val_set = load_splits(root, args.image_size)
    datasets = {"files": train_set}
    if args.cache_images:
        start = time.perf_counter()
        datasets["cached"] = cache_splits(train_set, val_set, args.image_size, config.TrainConfig().cache_budget_mb)[0]
        print(f"cache built in {time.perf_counter() - start:.1f} s", flush=True)
    print(f"device: {describe_device(device)}  threads: {torch.get_num_threads()}  data: {root} "
          f"({len(train_set)} train images)  batch {args.batch_size} at {args.image_size} px", flush=True)
    args.classes = len(train_set.classes)
    bench = Bench(args, device)
    for _ in range(args.warmup):
        bench.hand_written()
    model_rate = statistics.median(bench.hand_written() for _ in range(args.repeats))
    print(f"{'dataset':>8}  {'workers':>7}  {'first epoch':>11}  {'steady':>8}  {'steady/model':>12}   "
          "(images/s, loader alone)")
    for name, dataset in datasets.items():
        for workers in (int(w) for w in args.workers.split(",")):
            rates = loader_rates(dataset, args, device, workers)
            steady = statistics.median(rates[1:] or rates)
            print(f"{name:>8}  {workers:>7}  {rates[0]:>11.1f}  {steady:>8.1f}  {steady / model_rate:>11.1f}x",
                  flush=True)
    print(f"model consumption ({args.backbone}, {args.precision}, train step on {device}): {model_rate:.1f} images/s")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse flags and benchmark; bad input is one line and exit 2."""
    args = get_args_parser().parse_args(argv)
    return run_cli(lambda: benchmark(args))


if __name__ == "__main__":
    sys.exit(main())
