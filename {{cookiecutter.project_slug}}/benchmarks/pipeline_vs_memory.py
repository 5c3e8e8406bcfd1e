"""Does the data pipeline feed the model? The run's loaders from JPEG files against the same batches in memory.

    python benchmarks/pipeline_vs_memory.py --device cpu
    python benchmarks/pipeline_vs_memory.py --device cuda:0 --batch-size 128 --images 2048 --workers 8

Writes a JPEG ImageFolder (`--images` images of 256 px, 4 classes) to a temp folder, builds the
training loaders exactly as train.py does (`data.build_loaders`: decode, random resized crop to
`--image-size`, flip, pinned on CUDA, `--workers`), and trains one model with the project's
`train_one_epoch` two ways, interleaved `--repeats` times after a warm-up: fed by that loader
("pipeline"), and fed the same batches already decoded, normalised and on the device ("in memory",
the model's own rate). Prints images/s of each run, the medians and the median of the per-repeat
ratios pipeline / in memory: 1.0 means the loader never keeps the model waiting.
A script that prints figures, not a test; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, uninstalled

import numpy as np  # noqa: E402
import torch  # noqa: E402
from loop_overhead import synchronize  # noqa: E402
from PIL import Image  # noqa: E402

from {{ cookiecutter.package_name }} import config  # noqa: E402
from {{ cookiecutter.package_name }}.cli import run_cli  # noqa: E402
from {{ cookiecutter.package_name }}.config import TrainConfig  # noqa: E402
from {{ cookiecutter.package_name }}.data import build_loaders  # noqa: E402
from {{ cookiecutter.package_name }}.devkit import describe_device  # noqa: E402
from {{ cookiecutter.package_name }}.loss import WeightedCrossEntropy  # noqa: E402
from {{ cookiecutter.package_name }}.model import build_model  # noqa: E402
from {{ cookiecutter.package_name }}.training.hardware import Hardware  # noqa: E402
from {{ cookiecutter.package_name }}.training.loop import train_one_epoch  # noqa: E402


def get_args_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default=None, help=f"default: ${config.DEVICE_ENV_VAR}, else {config.DEFAULT_DEVICE}")
    p.add_argument("--backbone", default="{{ cookiecutter.backbone }}")
    p.add_argument("--images", type=int, default=64, help="JPEG images written (4 classes)")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32")
    p.add_argument("--channels-last", action="store_true", help="NHWC batches and weights, as train.py --channels-last")
    return p


def write_jpegs(root: Path, count: int, side: int = 256) -> Path:
    """A train/ and val/ ImageFolder of smooth random JPEGs (photo-like sizes, quick to write)."""
    rng = np.random.default_rng(0)
    for split, n in (("train", count), ("val", 4)):
        for i in range(n):
            folder = root / split / f"class_{i % 4}"
            folder.mkdir(parents=True, exist_ok=True)
            small = rng.integers(0, 256, (side // 16, side // 16, 3), dtype=np.uint8)
            Image.fromarray(small).resize((side, side), Image.BILINEAR).save(folder / f"{i}.jpg", quality=90)
    return root


def hardware(device: torch.device, prep, args: argparse.Namespace) -> Hardware:
    """The run's handle; a project from before uint8 batches has no mean/std (its loader normalised)."""
    try:
        return Hardware.create(device, args.precision, args.channels_last, mean=prep.mean, std=prep.std)
    except TypeError:
        return Hardware.create(device, args.precision, args.channels_last)


def benchmark(args: argparse.Namespace) -> int:
    """Print images/s of both feeds and the median ratio."""
    device = config.configure_device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        root = write_jpegs(Path(tmp), args.images)
        cfg = TrainConfig(data=str(root), image_size=args.image_size, batch_size=args.batch_size,
                          workers=args.workers, pretrained=False, backbone=args.backbone)
        loaders = build_loaders(cfg, device)
        hw = hardware(device, loaders.preprocessing, args)
        loaders.train_loader.sampler.set_epoch(1)
        in_memory = [hw.batch(images, labels) for images, labels in loaders.train_loader]
        torch.manual_seed(0)
        model = build_model(args.backbone, 4, pretrained=False, device=device).to(memory_format=hw.memory_format)
        loss_fn = WeightedCrossEntropy(torch.ones(4)).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def timed(batches) -> float:
            synchronize(device)
            start = time.perf_counter()
            stats = train_one_epoch(model, loss_fn, optimizer, batches, hw, progress=False)
            synchronize(device)
            return stats.images / (time.perf_counter() - start)

        feeds = {"pipeline": lambda: timed(loaders.train_loader), "in memory": lambda: timed(in_memory)}
        for _ in range(args.warmup):
            for feed in feeds.values():
                feed()
        rates: dict[str, list[float]] = {name: [] for name in feeds}
        for repeat in range(args.repeats):
            for name in (list(feeds) if repeat % 2 == 0 else list(feeds)[::-1]):
                rates[name].append(feeds[name]())
    print(f"device: {describe_device(device)}  {args.backbone}  {args.image_size} px from 256-px JPEGs  "
          f"batch {args.batch_size}  {args.precision}{'  channels_last' if args.channels_last else ''}  "
          f"workers {args.workers}  threads {torch.get_num_threads()}")
    for name, values in rates.items():
        print(f"{name:>9}: " + "  ".join(f"{v:7.1f}" for v in values) + f"   median {statistics.median(values):.1f}")
    ratios = [a / b for a, b in zip(rates["pipeline"], rates["in memory"])]
    print(f"median ratio pipeline / in memory: {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse flags and run."""
    args = get_args_parser().parse_args(argv)
    return run_cli(lambda: benchmark(args))


if __name__ == "__main__":
    sys.exit(main())
