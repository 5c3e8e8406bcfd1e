"""The host's CPU cost per training sample: the project's data path against torchvision's presets and timm's.

    python benchmarks/host_cost.py --photos 400 --image-size 224      # ImageNet-sized JPEGs from real photos
    python benchmarks/host_cost.py --data /path/to/images --presets /tmp/vision/references/classification/presets.py

Reads the same images, in the same order, through each dataset in this one process (no model, no
DataLoader), on one thread, and prints CPU milliseconds per sample (time.process_time over a pass):
- `project none` / `project standard`: the training dataset train.py builds (`data.build_loaders`: the
  run's preprocessing and `--augment`, unreadable-image skipping, per-sample seeding; uint8 out) as one
  loader worker runs it (`--decode cpu`);
- `project main`: `none` in the main process (`--workers 0`), which also saves and restores the global
  RNG states around every sample;
- `device none` / `device standard`: the worker's share of `--decode device` (read the bytes and the
  header, draw the augmentation); the decode and transforms then run on the GPU (a bake with the gpu_decode
  answer; in others the script says they are not in this bake);
- `presets eval` / `presets train`: torchvision's reference ClassificationPresetEval(crop_size, resize_size
  = crop_size: the geometry of `none`) and ClassificationPresetTrain(crop_size) (random resized crop, flip:
  the geometry of `standard`), PIL images in, float normalised out, as pytorch/vision's
  references/classification/presets.py writes them (bilinear, antialiased; `--presets FILE` loads that file
  instead, with use_v2=True);
- `timm eval` / `timm train`: timm's create_transform(crop_size, is_training=False/True) (its default
  ImageNet train recipe: random resized crop, flip, colour jitter), where timm is importable.
Passes run interleaved (order rotating) `--repeats` times after one warm-up pass; printed are the
medians and the median per-repeat ratio of each project reader to the presets of the same recipe
(below 1.0: cheaper than torchvision's presets).
A script that prints figures, not a test; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, uninstalled
sys.path.insert(0, str(Path(__file__).resolve().parent))  # photo_jpegs.py beside it, also when imported by path

import torch  # noqa: E402
from photo_jpegs import write_photo_jpegs  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision import datasets  # noqa: E402
from torchvision.transforms import InterpolationMode, v2  # noqa: E402

from {{ cookiecutter.package_name }} import settings  # noqa: E402
from {{ cookiecutter.package_name }}.config import TrainConfig  # noqa: E402
from {{ cookiecutter.package_name }}.data import IMAGENET_MEAN, IMAGENET_STD, build_loaders, sampling  # noqa: E402
from {{ cookiecutter.package_name }}.plugins import load_plugins  # noqa: E402

DEVICE_DECODE = "device" in settings.choices()["decode"]  # the gpu_decode answer's plugin is in this bake


def get_args_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", help="ImageFolder root: train/ and val/, or class folders")
    p.add_argument("--photos", type=int, default=0, metavar="N", help="instead of --data: write N ImageNet-sized "
                   "JPEGs from real photos to a temp folder (benchmarks/photo_jpegs.py; needs scikit-image)")
    p.add_argument("--presets", default=None, help="torchvision's references/classification/presets.py "
                                                   "(default: the presets as that file writes them, built here)")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--samples", type=int, default=1000, help="samples per pass")
    p.add_argument("--repeats", type=int, default=5)
    return p


def project_dataset(args, augment: str, decode: str = "cpu"):
    """The training dataset train.py iterates (SeededSamples over SkipUnreadable over the ImageFolder)."""
    cfg = TrainConfig(data=args.data, image_size=args.image_size, augment=augment, workers=0, pretrained=False,
                      device="cpu", decode=decode)
    return build_loaders(cfg, torch.device("cpu"), plugins=load_plugins()).train_loader.loader.dataset


def _pil_rgb(path: str) -> Image.Image:
    """torchvision's default ImageFolder loader (the presets' input)."""
    with open(path, "rb") as handle:
        return Image.open(handle).convert("RGB")


def presets_transforms(args) -> dict[str, object]:
    """torchvision's reference eval and train presets: `--presets`' file, else as that file writes them."""
    size = args.image_size
    if args.presets:
        spec = importlib.util.spec_from_file_location("tv_presets", args.presets)
        presets = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(presets)
        return {"eval": presets.ClassificationPresetEval(crop_size=size, resize_size=size, use_v2=True),
                "train": presets.ClassificationPresetTrain(crop_size=size, use_v2=True)}
    to_float = [v2.PILToTensor(), v2.ToDtype(torch.float, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    bilinear = InterpolationMode.BILINEAR
    return {"eval": v2.Compose([v2.Resize(size, interpolation=bilinear, antialias=True), v2.CenterCrop(size),
                                *to_float]),
            "train": v2.Compose([v2.RandomResizedCrop(size, interpolation=bilinear, antialias=True),
                                 v2.RandomHorizontalFlip(0.5), *to_float])}


def timm_transforms(args) -> dict[str, object]:
    """timm's default ImageNet eval and train transforms (crop_pct 1.0 for eval: the geometry of `none`)."""
    try:
        from timm.data import create_transform  # noqa: PLC0415 (optional: a throwaway venv's)
    except ImportError:
        return {}
    return {"eval": create_transform(args.image_size, is_training=False, crop_pct=1.0),
            "train": create_transform(args.image_size, is_training=True)}


def folder_of(samples: list, transform) -> datasets.ImageFolder:
    """A plain ImageFolder-like dataset over `samples` (path, target) with the PIL loader."""
    dataset = datasets.DatasetFolder.__new__(datasets.ImageFolder)
    dataset.samples, dataset.loader, dataset.transform, dataset.target_transform = samples, _pil_rgb, transform, None
    return dataset


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


def readers_for(args) -> tuple[list[Reader], int]:
    """Every way of reading a sample that main() times, over the very same files; and how many files."""
    project, standard = project_dataset(args, "none"), project_dataset(args, "standard")
    on_device = {name: project_dataset(args, name, "device") for name in ("none", "standard") if DEVICE_DECODE}
    samples = list(project.dataset.dataset.samples)  # the very same files (a --val-split subset too)
    readers = [Reader("project none", lambda i: project[(i, 1)], in_a_worker),
               Reader("project main", lambda i: project[(i, 1)]),
               Reader("project standard", lambda i: standard[(i, 1)], in_a_worker)]
    readers += [Reader(f"device {name}", lambda i, dataset=dataset: dataset[(i, 1)], in_a_worker)
                for name, dataset in on_device.items()]
    for source, transforms in (("presets", presets_transforms(args)), ("timm", timm_transforms(args))):
        for recipe, transform in transforms.items():
            dataset = folder_of(samples, transform)
            readers.append(Reader(f"{source} {recipe}", lambda i, dataset=dataset: dataset[i]))
    return readers, len(samples)


PRESET_OF = {"none": "presets eval", "main": "presets eval", "eval": "presets eval", "standard": "presets train",
             "train": "presets train"}


def main(argv: list[str] | None = None) -> None:
    """Build each dataset, time interleaved passes, print medians and ratios to the presets."""
    args = get_args_parser().parse_args(argv)
    torch.set_num_threads(1)
    if args.photos:
        args.data = str(write_photo_jpegs(Path(tempfile.mkdtemp(prefix="host-cost-")), args.photos))
    elif not args.data:
        raise SystemExit("error: give --data DIR or --photos N")
    readers, files = readers_for(args)
    count = min(args.samples, files)
    indices = torch.randperm(files, generator=torch.Generator().manual_seed(0))[:count].tolist()
    times: dict[str, list[float]] = {reader.name: [] for reader in readers}
    for reader in readers:
        cpu_ms_per_sample(reader, indices[:100])  # warm-up: file cache, lazy imports
    for repeat in range(args.repeats):
        for reader in readers[repeat % len(readers):] + readers[:repeat % len(readers)]:
            times[reader.name].append(cpu_ms_per_sample(reader, indices))
    print(f"{count} samples per pass from {args.data}, {args.image_size} px, {args.repeats} repeats, "
          f"CPU ms per sample:")
    for name, values in times.items():
        line = f"  {name:18s} median {statistics.median(values):.3f}  runs {' '.join(f'{v:.3f}' for v in values)}"
        preset = PRESET_OF.get(name.split()[-1])
        if name.split()[0] in ("project", "device", "timm") and preset in times:
            ratio = statistics.median(a / b for a, b in zip(values, times[preset]))
            line += f"  / {preset} {ratio:.2f}"
        print(line)
    if not DEVICE_DECODE:
        print("  device none, device standard: not in this bake (the gpu_decode answer brings --decode device)")


if __name__ == "__main__":
    main()
