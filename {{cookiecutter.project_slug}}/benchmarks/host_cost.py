"""The host's CPU cost per training sample: the project's data path against torchvision's reference presets.

    python benchmarks/host_cost.py --data /path/to/images --presets /tmp/vision/references/classification/presets.py

Reads the same images, in the same order, through each dataset in this one process (no model, no
DataLoader), on one thread, and prints CPU milliseconds per sample (time.process_time over a pass):
- `project`: the training dataset train.py builds (`data.build_loaders`: the run's preprocessing and
  `--augment`, unreadable-image skipping, per-sample seeding; uint8 out) as one loader worker runs it;
- `project main`: the same in the main process (`--workers 0`), which also saves and restores the
  global RNG states around every sample;
- `project standard`: `--augment standard` (random resized crop and flip, the presets' geometry);
- `presets`: torchvision's ClassificationPresetTrain(crop_size=--image-size, use_v2=True) over a plain
  ImageFolder (its default PIL backend; float, normalised out), when `--presets` names its presets.py
  (pytorch/vision's references/classification/presets.py, not part of this project).
Passes run interleaved (order rotating) `--repeats` times after one warm-up pass; printed are the
medians and the median per-repeat ratio of each to `presets` (below 1.0: cheaper than the presets).
A script that prints figures, not a test; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, uninstalled

import torch  # noqa: E402
from torchvision import datasets  # noqa: E402

from {{ cookiecutter.package_name }}.config import TrainConfig  # noqa: E402
from {{ cookiecutter.package_name }}.data import build_loaders, sampling  # noqa: E402


def get_args_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="ImageFolder root: train/ and val/, or class folders")
    p.add_argument("--presets", default=None, help="torchvision's references/classification/presets.py")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--samples", type=int, default=1000, help="samples per pass")
    p.add_argument("--repeats", type=int, default=5)
    return p


def project_dataset(args, augment: str):
    """The training dataset train.py iterates (SeededSamples over SkipUnreadable over the ImageFolder)."""
    cfg = TrainConfig(data=args.data, image_size=args.image_size, augment=augment, workers=0, pretrained=False,
                      device="cpu")
    return build_loaders(cfg, torch.device("cpu")).train_loader.loader.dataset


def presets_dataset(args, root: Path):
    """torchvision's reference training preset (v2 transforms) over a plain ImageFolder of the same images."""
    spec = importlib.util.spec_from_file_location("tv_presets", args.presets)
    presets = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(presets)
    folder = root / "train" if (root / "train").is_dir() else root
    return datasets.ImageFolder(str(folder), presets.ClassificationPresetTrain(crop_size=args.image_size,
                                                                                 use_v2=True))


@dataclasses.dataclass
class Reader:
    """One way to read a sample: a name, a function of the sample's position, and what a pass runs within."""

    name: str
    read: Callable[[int], object]
    within: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext


def cpu_ms_per_sample(reader: Reader, indices: list[int]) -> float:
    """CPU milliseconds per sample over one pass of `indices`."""
    with reader.within():
        start = time.process_time()
        for index in indices:
            reader.read(index)
        return (time.process_time() - start) * 1000 / len(indices)


def in_a_worker() -> contextlib.AbstractContextManager:
    """Within it, SeededSamples reads as in a DataLoader worker: no RNG save and restore around a sample."""
    return mock.patch.object(sampling, "get_worker_info", lambda: True)


def main(argv: list[str] | None = None) -> None:
    """Build each dataset, time interleaved passes, print medians and ratios to the presets."""
    args = get_args_parser().parse_args(argv)
    torch.set_num_threads(1)
    project, standard = project_dataset(args, "none"), project_dataset(args, "standard")
    readers = [Reader("project", lambda i: project[(i, 1)], in_a_worker),
               Reader("project main", lambda i: project[(i, 1)]),
               Reader("project standard", lambda i: standard[(i, 1)], in_a_worker)]
    if args.presets:
        presets = presets_dataset(args, Path(args.data))
        presets.samples = list(project.dataset.dataset.samples)  # the very same files (a --val-split subset too)
        readers.append(Reader("presets", lambda i: presets[i]))
    count = min(args.samples, len(project))
    indices = torch.randperm(len(project), generator=torch.Generator().manual_seed(0))[:count].tolist()
    times: dict[str, list[float]] = {reader.name: [] for reader in readers}
    for reader in readers:
        cpu_ms_per_sample(reader, indices[:100])  # warm-up: file cache, lazy imports
    for repeat in range(args.repeats):
        for reader in readers[repeat % len(readers):] + readers[:repeat % len(readers)]:
            times[reader.name].append(cpu_ms_per_sample(reader, indices))
    print(f"{count} samples per pass, {args.image_size} px, {args.repeats} repeats, CPU ms per sample:")
    for name, values in times.items():
        line = f"  {name:18s} median {statistics.median(values):.3f}  runs {' '.join(f'{v:.3f}' for v in values)}"
        if "presets" in times and name != "presets":
            ratio = statistics.median(a / b for a, b in zip(values, times["presets"]))
            line += f"  / presets {ratio:.2f}"
        print(line)


if __name__ == "__main__":
    main()
