"""What --compile's cache saves a resumed run: its wall time and its epoch's time, with and without the cache.

    python benchmarks/compile_cache.py [--repeats 3] [--backbone resnet18] [--device cpu]

One run trains an epoch of a small dataset (24 images of 32 px, 3 steps) with --compile, compiling and saving
compile_cache.bin beside last.pt. Then, interleaved, a copy of that run is resumed for one more epoch with
the cache and with it moved aside. Each resume is a fresh process with an empty inductor cache of its own
(TORCHINDUCTOR_CACHE_DIR), so only the run folder's cache carries work over. With three steps the resumed
epoch is mostly its compile: its epoch_time_s (metrics.csv) is the time until training runs at speed.
Prints each repeat and the medians.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def run(args: list[str], scratch: Path, tag: str) -> float:
    """train.py in a fresh process with an inductor cache of its own; its wall time in seconds."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(scratch / f"inductor-{tag}"), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "train.py", *args], cwd=PROJECT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"train.py {' '.join(args)} failed (exit {done.returncode}): {done.stderr[-500:]}")
    return time.perf_counter() - start


def last_epoch_seconds(out: Path) -> float:
    """The last row's epoch_time_s in the run's metrics.csv."""
    with open(out / "metrics.csv", newline="") as handle:
        return float(list(csv.DictReader(handle))[-1]["epoch_time_s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backbone", default="resnet18")
    parser.add_argument("--device", default="cpu")
    options = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="compile-cache-"))
    sys.path.insert(0, str(PROJECT))
    from {{ cookiecutter.package_name }}.data.demo import write_demo_dataset

    data = write_demo_dataset(scratch / "data", train_per_class=6, val_per_class=2, image_size=32, seed=0)
    out = scratch / "run"
    common = ["--data", str(data), "--device", options.device, "--backbone", options.backbone, "--no-pretrained",
              "--image-size", "32", "--batch-size", "8", "--workers", "0", "--compile", "--progress", "none",
              "--out", str(out)]
    run([*common, "--epochs", "1"], scratch, "first")
    cache = out / "compile_cache.bin"
    if not cache.is_file():
        print("no compile_cache.bin was written (torch.compiler.save_cache_artifacts needs torch 2.7+)")
        return 0
    timings: dict[str, list[float]] = {"with the cache": [], "without it": []}
    epochs: dict[str, list[float]] = {label: [] for label in timings}
    for repeat in range(options.repeats):
        for label in (timings if repeat % 2 == 0 else reversed(list(timings))):  # interleaved: A B, B A, ...
            moved = scratch / "aside.bin"
            if label == "without it":
                shutil.move(cache, moved)
            shutil.copytree(out, scratch / "resume", dirs_exist_ok=False)
            resumed = [*common[:-1], str(scratch / "resume"), "--epochs", "2", "--resume", str(scratch / "resume")]
            timings[label].append(run(resumed, scratch, f"{label}-{repeat}".replace(" ", "-")))
            epochs[label].append(last_epoch_seconds(scratch / "resume"))
            shutil.rmtree(scratch / "resume")
            if label == "without it":
                shutil.move(moved, cache)
            print(f"repeat {repeat + 1}: {label}: process {timings[label][-1]:.1f} s, resumed epoch "
                  f"{epochs[label][-1]:.1f} s", flush=True)
    for name, figures in (("process", timings), ("resumed epoch", epochs)):
        medians = {label: statistics.median(values) for label, values in figures.items()}
        print(f"median {name} seconds ({options.backbone}, {options.device}): "
              + ", ".join(f"{label} {value:.1f}" for label, value in medians.items())
              + f"; ratio {medians['with the cache'] / medians['without it']:.2f}")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
