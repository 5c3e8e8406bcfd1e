"""train.py against peers' training scripts: images per CPU-second and per wall-clock second, same settings.

    python benchmarks/peers.py --data /path/to/class/folders \
        --torchvision /tmp/vision/references/classification/train.py \
        --timm /tmp/pytorch-image-models/train.py --peer-python /tmp/peers-venv/bin/python

The peers' scripts are not part of this project: check them out from their public repositories
(pytorch/vision's references/classification/, huggingface/pytorch-image-models) and run them with a
Python that has their packages (`--peer-python`, e.g. a venv with timm). Either may be left out.

`--data` is a folder of class folders (or train/ and val/). It is split once, stratified and
seeded, into train/ and val/ of hard links in a temp folder, and every script trains on that same
split: resnet18 from scratch, `--image-size` px, `--batch-size`, `--workers` loader processes,
AdamW (lr 0.002, weight decay 0.05), fp32 on the CPU, `--epochs` epochs, one intra-op thread
(OMP_NUM_THREADS=1 and torch.set_num_threads(1) through each script's own flags where it has one).
Each script keeps its own defaults otherwise (augmentation, loss, schedule, checkpoints): this is
the end-to-end cost a user gets from each as shipped.

After `--warmup` untimed one-epoch runs of each (the OS's file cache, and Python's bytecode cache
where the environment lets Python write one), the scripts run interleaved (A B C, B C A, ...)
`--repeats` times. Each run's CPU time is user + sys of its whole process tree (the loader workers
included: the script reaps them, so getrusage(RUSAGE_CHILDREN) counts them), start-up, validation
and checkpoints included. Printed: each run, the medians of training images per CPU-second and per
wall-clock second (epochs x training images / time), and the median of the per-repeat ratios
train.py / peer.
A script that prints figures, not a test; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff"}
LR, WEIGHT_DECAY = 0.002, 0.05  # train.py's AdamW defaults, given to every script


def get_args_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="class folders (or train/ and val/ of class folders)")
    p.add_argument("--torchvision", default=None, help="pytorch/vision's references/classification/train.py")
    p.add_argument("--timm", default=None, help="pytorch-image-models' train.py")
    p.add_argument("--peer-python", default=sys.executable, help="the Python that runs the peers' scripts")
    p.add_argument("--val-split", type=float, default=0.2)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1, help="untimed 1-epoch runs of each script first (file caches)")
    p.add_argument("--logs", default=None, help="keep each run's output in this folder")
    p.add_argument("--project-args", default="", help="more train.py flags, e.g. '--augment standard'")
    p.add_argument("--seed", type=int, default=0)
    return p


def class_files(root: Path) -> dict[str, list[Path]]:
    """Every class folder's images under `root` (train/ and val/ merged when present), sorted."""
    tops = [root / "train", root / "val"] if (root / "train").is_dir() else [root]
    files: dict[str, list[Path]] = {}
    for top in tops:
        for folder in sorted(p for p in top.iterdir() if p.is_dir()):
            files.setdefault(folder.name, []).extend(
                sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES))
    return files


def link_or_copy(source: Path, target: Path) -> None:
    """A hard link (no bytes copied), else a symbolic link."""
    try:
        os.link(source, target)
    except OSError:
        target.symlink_to(source.resolve())


def write_split(root: Path, out: Path, val_split: float, seed: int) -> int:
    """train/ and val/ under `out`, stratified and seeded; the number of training images."""
    rng, train_count = random.Random(seed), 0
    for name, files in class_files(root).items():
        files = list(files)
        rng.shuffle(files)
        val_count = max(1, round(len(files) * val_split))
        for split, chosen in (("val", files[:val_count]), ("train", files[val_count:])):
            (out / split / name).mkdir(parents=True, exist_ok=True)
            for i, source in enumerate(chosen):
                link_or_copy(source, out / split / name / f"{i:06d}{source.suffix.lower()}")
        train_count += len(files) - val_count
    return train_count


def project_command(args, data: Path, out: Path) -> list[str]:
    """This project's train.py on the shared settings."""
    return [sys.executable, str(PROJECT / "train.py"), "--data", str(data), "--backbone", "resnet18",
            "--no-pretrained", "--image-size", str(args.image_size), "--batch-size", str(args.batch_size),
            "--workers", str(args.workers), "--epochs", str(args.epochs), "--lr", str(LR),
            "--weight-decay", str(WEIGHT_DECAY), "--device", "cpu", "--precision", "fp32", "--threads", "1",
            "--seed", str(args.seed), "--out", str(out), "--overwrite", *shlex.split(args.project_args)]


def torchvision_command(args, data: Path, out: Path) -> list[str]:
    """torchvision's reference script on the shared settings (v2 transforms, its default PIL backend)."""
    size = str(args.image_size)
    return [args.peer_python, args.torchvision, "--data-path", str(data), "--model", "resnet18", "--device", "cpu",
            "--batch-size", str(args.batch_size), "--workers", str(args.workers), "--epochs", str(args.epochs),
            "--opt", "adamw", "--lr", str(LR), "--wd", str(WEIGHT_DECAY), "--train-crop-size", size,
            "--val-resize-size", size, "--val-crop-size", size, "--use-v2", "--print-freq", "1000",
            "--output-dir", str(out)]


def timm_command(args, data: Path, out: Path) -> list[str]:
    """timm's train.py on the shared settings (its prefetcher, augmentation and schedule as shipped)."""
    return [args.peer_python, args.timm, "--data-dir", str(data), "--train-split", "train", "--val-split", "val",
            "--model", "resnet18", "--num-classes", str(len(class_files(data))), "--img-size", str(args.image_size),
            "--device", "cpu", "--batch-size", str(args.batch_size), "--workers", str(args.workers),
            "--epochs", str(args.epochs), "--opt", "adamw", "--lr", str(LR), "--weight-decay", str(WEIGHT_DECAY),
            "--log-interval", "1000", "--output", str(out), "--seed", str(args.seed)]


@dataclass
class Timing:
    """One run: wall-clock and CPU seconds (user + sys of the process tree)."""

    wall: float
    cpu: float


def timed_run(command: list[str], cwd: Path, log: Path) -> Timing:
    """Run `command` to its end with one thread per process; its wall and whole-tree CPU seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(log, "w") as handle:
        result = subprocess.run(command, cwd=cwd, env=env, stdout=handle, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"error: {command[1]} exited {result.returncode}; see {log}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(wall, cpu)


def scripts(args) -> dict[str, Callable]:
    """The scripts to compare, by name: train.py first, then each peer given a path."""
    builders: dict[str, Callable] = {"train.py": project_command}
    if args.torchvision:
        builders["torchvision"] = torchvision_command
    if args.timm:
        builders["timm"] = timm_command
    return builders


def warm_up(args, builders: dict[str, Callable], data: Path, tmp: Path, logs: Path) -> None:
    """`--warmup` untimed one-epoch runs of each script."""
    for repeat in range(args.warmup):
        for name, builder in builders.items():
            out = tmp / f"warmup-{name}-{repeat}"
            out.mkdir()
            timed_run(builder(argparse.Namespace(**{**vars(args), "epochs": 1}), data, out), out,
                      logs / f"warmup-{name}-{repeat}.log")


def interleaved(args, builders: dict[str, Callable], data: Path, tmp: Path, logs: Path,
                images: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Run the scripts in rotating order `--repeats` times; images per CPU-second and per wall second of each."""
    names = list(builders)
    per_cpu: dict[str, list[float]] = {name: [] for name in names}
    per_wall: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(args.repeats):
        for name in names[repeat % len(names):] + names[:repeat % len(names)]:  # load drift hits all alike
            out = tmp / f"{name}-{repeat}"
            out.mkdir()
            timing = timed_run(builders[name](args, data, out), out, logs / f"{name}-{repeat}.log")
            per_cpu[name].append(images / timing.cpu)
            per_wall[name].append(images / timing.wall)
            print(f"repeat {repeat} {name:12s} wall {timing.wall:7.1f} s  cpu {timing.cpu:7.1f} s  "
                  f"{per_cpu[name][-1]:6.1f} img/cpu-s  {per_wall[name][-1]:6.1f} img/s  "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
    return per_cpu, per_wall


def summary(per_cpu: dict[str, list[float]], per_wall: dict[str, list[float]]) -> None:
    """The medians of each script, then the median per-repeat ratios train.py / each peer."""
    for name in per_cpu:
        print(f"median {name:12s} {statistics.median(per_cpu[name]):6.1f} img/cpu-s  "
              f"{statistics.median(per_wall[name]):6.1f} img/s")
    for name in list(per_cpu)[1:]:
        cpu_ratio = statistics.median(a / b for a, b in zip(per_cpu["train.py"], per_cpu[name]))
        wall_ratio = statistics.median(a / b for a, b in zip(per_wall["train.py"], per_wall[name]))
        print(f"median ratio train.py / {name}: {cpu_ratio:.3f} per CPU-second, {wall_ratio:.3f} per wall second")


def main(argv: list[str] | None = None) -> None:
    """Split the data, run the scripts interleaved, print every run, the medians and the ratios."""
    args = get_args_parser().parse_args(argv)
    builders = scripts(args)
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        data = Path(tmp) / "data"
        train_images = write_split(Path(args.data), data, args.val_split, args.seed)
        print(f"{train_images} training images x {args.epochs} epochs, {args.image_size} px, batch "
              f"{args.batch_size}, {args.workers} workers, load average {os.getloadavg()[0]:.2f}")
        logs = Path(args.logs) if args.logs else Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        warm_up(args, builders, data, Path(tmp), logs)
        summary(*interleaved(args, builders, data, Path(tmp), logs, train_images * args.epochs))


if __name__ == "__main__":
    main()
