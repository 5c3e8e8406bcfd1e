"""Does the data pipeline feed the model, and what does it cost the host? The run's loaders from ImageNet-sized
JPEG files against the same batches in memory.

    python benchmarks/pipeline_vs_memory.py --device cpu
    python benchmarks/pipeline_vs_memory.py --device cuda:0 --batch-size 128 --images 2048 --precision bf16

Writes a JPEG ImageFolder (`--images` images, 4 classes) to a temp folder: ImageNet-sized (500x375, 375x500,
500x333) crops of real photos where scikit-image is installed (benchmarks/photo_jpegs.py), else smooth random
images of those sizes. Builds the training loaders exactly as train.py does (`data.build_loaders` with the
default recipe, `--augment none` unless given; the default worker count, the cores this process may use less
one, unless `--workers`; `--decode auto|cpu|device` as train.py's, `device` where the gpu_decode answer brought
it, else the script says it is not in this bake and measures nothing), and trains one model with the project's
`train_one_epoch` and optimizer two ways, interleaved `--repeats` times after a warm-up: fed by that loader
("pipeline"), and fed the same batches already decoded and on the device ("in memory", the model's own rate).
Prints images/s of each run, the medians and the median of the per-repeat ratios pipeline / in memory (1.0:
the loader never keeps the model waiting), and the host CPU ms per image of each feed (this process and its
loader workers, from /proc; Linux), whose difference is what decoding and augmenting cost the host.
A script that prints figures, not a test; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, uninstalled

import numpy as np  # noqa: E402
import torch  # noqa: E402
from loop_overhead import synchronize  # noqa: E402
from photo_jpegs import SIZES, write_photo_jpegs  # noqa: E402
from PIL import Image  # noqa: E402

from {{ cookiecutter.package_name }} import config, settings  # noqa: E402
from {{ cookiecutter.package_name }}.cli import run_cli  # noqa: E402
from {{ cookiecutter.package_name }}.config import TrainConfig  # noqa: E402
from {{ cookiecutter.package_name }}.data import build_loaders  # noqa: E402
from {{ cookiecutter.package_name }}.data.transforms import AUGMENTATIONS  # noqa: E402
from {{ cookiecutter.package_name }}.devkit import describe_device  # noqa: E402
from {{ cookiecutter.package_name }}.model import build_model  # noqa: E402
from {{ cookiecutter.package_name }}.plugins import load_plugins  # noqa: E402
from {{ cookiecutter.package_name }}.task import WeightedCrossEntropy  # noqa: E402
from {{ cookiecutter.package_name }}.training import optimization  # noqa: E402
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
    p.add_argument("--workers", type=int, default=config.default_workers(),
                   help="default: train.py's (%(default)s here)")
    p.add_argument("--augment", choices=tuple(AUGMENTATIONS), default=TrainConfig().augment)
    p.add_argument("--decode", choices=("auto", "cpu", "device"), default="auto",
                   help="device: where the gpu_decode answer brought it (plugins/gpu_decode)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32")
    p.add_argument("--channels-last", action="store_true", help="NHWC batches and weights, as train.py --channels-last")
    return p


def write_jpegs(root: Path, count: int) -> tuple[Path, str]:
    """A train/ and val/ ImageFolder of ImageNet-sized JPEGs: crops of real photos, else smooth random images."""
    try:
        return write_photo_jpegs(root, count), "ImageNet-sized JPEGs of real photos"
    except ImportError:  # no scikit-image: photo-sized random images
        pass
    rng = np.random.default_rng(0)
    for split, n in (("train", count), ("val", 4)):
        for i in range(n):
            folder = root / split / f"class_{i % 4}"
            folder.mkdir(parents=True, exist_ok=True)
            width, height = SIZES[i % len(SIZES)]
            small = rng.integers(0, 256, (height // 16, width // 16, 3), dtype=np.uint8)
            Image.fromarray(small).resize((width, height), Image.BILINEAR).save(folder / f"{i}.jpg", quality=90)
    return root, "ImageNet-sized smooth random JPEGs (no scikit-image)"


def tree_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and its living children (the loader workers), from /proc."""
    total, pids = 0.0, [os.getpid()]
    while pids:
        pid = pids.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            for task in Path(f"/proc/{pid}/task").iterdir():
                pids += [int(child) for child in (task / "children").read_text().split()]
        except (OSError, ValueError):  # a worker that ended meanwhile
            continue
    return total


def hardware(device: torch.device, prep, args: argparse.Namespace) -> Hardware:
    """The run's handle; a project from before uint8 batches has no mean/std (its loader normalised)."""
    try:
        return Hardware.create(device, args.precision, args.channels_last, mean=prep.mean, std=prep.std)
    except TypeError:
        return Hardware.create(device, args.precision, args.channels_last)


def benchmark(args: argparse.Namespace) -> int:
    """Print images/s of both feeds and the median ratio."""
    device = config.compute_device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        root, what = write_jpegs(Path(tmp), args.images)
        cfg = TrainConfig(data=str(root), image_size=args.image_size, batch_size=args.batch_size,
                          workers=args.workers, pretrained=False, backbone=args.backbone, augment=args.augment,
                          decode=args.decode)
        loaders = build_loaders(cfg, device, plugins=load_plugins())  # train.py's way of reading images
        hw = hardware(device, loaders.preprocessing, args)
        loaders.train_loader.sampler.set_epoch(1)
        in_memory = [hw.batch(images, labels) for images, labels in loaders.train_loader]
        torch.manual_seed(0)
        model = build_model(args.backbone, 4, pretrained=False, device=device).to(memory_format=hw.memory_format)
        loss_fn = WeightedCrossEntropy(torch.ones(4)).to(device)
        optimizer = optimization.make_optimizer(model, cfg)  # train.py's
        cpu_ms: dict[str, list[float]] = {"pipeline": [], "in memory": []}

        def timed(name: str, batches) -> float:
            synchronize(device)
            start, cpu = time.perf_counter(), tree_cpu_seconds()
            stats = train_one_epoch(model, loss_fn, optimizer, batches, hw, progress=False)
            synchronize(device)
            cpu_ms[name].append((tree_cpu_seconds() - cpu) * 1000 / stats.images)
            return stats.images / (time.perf_counter() - start)

        feeds = {"pipeline": lambda: timed("pipeline", loaders.train_loader),
                 "in memory": lambda: timed("in memory", in_memory)}
        for _ in range(args.warmup):
            for feed in feeds.values():
                feed()
        rates: dict[str, list[float]] = {name: [] for name in feeds}
        for repeat in range(args.repeats):
            for name in (list(feeds) if repeat % 2 == 0 else list(feeds)[::-1]):
                rates[name].append(feeds[name]())
        decode = loaders.decode
    print(f"device: {describe_device(device)}  {args.backbone}  {args.image_size} px from {what}  "
          f"--augment {args.augment}  decode on the {decode}  batch {args.batch_size}  {args.precision}"
          f"{'  channels_last' if args.channels_last else ''}  workers {args.workers}  "
          f"threads {torch.get_num_threads()}")
    for name, values in rates.items():
        print(f"{name:>9}: " + "  ".join(f"{v:7.1f}" for v in values) + f"   median {statistics.median(values):.1f}")
    ratios = [a / b for a, b in zip(rates["pipeline"], rates["in memory"])]
    print(f"median ratio pipeline / in memory: {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
    pipeline, memory = (statistics.median(cpu_ms[name][args.warmup:]) for name in ("pipeline", "in memory"))
    print(f"host CPU ms per image (this process and its workers): pipeline {pipeline:.2f}, in memory {memory:.2f}, "
          f"the data's share {pipeline - memory:.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse flags and run."""
    args = get_args_parser().parse_args(argv)
    if args.decode not in settings.choices()["decode"]:
        print(f"skipped: --decode {args.decode} is not in this bake (the gpu_decode answer brings it)")
        return 0
    return run_cli(lambda: benchmark(args))


if __name__ == "__main__":
    sys.exit(main())
