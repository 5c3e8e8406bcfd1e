"""ImageFolder datasets, their transforms and loaders, and the built-in demo dataset.

Loaders pin host memory exactly when the device is CUDA: pinned pages are what make
`tensor.to(device, non_blocking=True)` asynchronous, and pinning is wasted work elsewhere.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

import torch
from PIL import Image, ImageDraw
from torch.utils.data import DataLoader
from torchvision import datasets
from torchvision.transforms import v2

from .errors import UserError
from .interrupts import ignore_sigint_in_worker
from .reproducibility import EpochSampler, SeededSamples

DEMO_ROOT = Path(__file__).resolve().parent.parent / "data" / "demo"
DEMO_IMAGE_SIZE = 64
DEMO_CLASSES = ("circle", "square", "triangle", "cross")
DEMO_HUES = ((1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 0))  # red, green, blue, yellow
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class DataError(UserError):
    """The data folder is missing, empty or malformed."""


def load_rgb(path: str) -> Image.Image:
    """Open an image as RGB, turning a decode failure into a DataError naming the file."""
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except (OSError, ValueError) as error:
        raise DataError(f"cannot read image {path}: {error}") from None


def build_transforms(image_size: int, train: bool) -> v2.Compose:
    """Random crops and flips for training; a deterministic resize and centre crop otherwise."""
    if train:
        geometry = [v2.RandomResizedCrop(image_size, scale=(0.6, 1.0), antialias=True),
                    v2.RandomHorizontalFlip()]
    else:
        geometry = [v2.Resize(image_size, antialias=True), v2.CenterCrop(image_size)]
    return v2.Compose([v2.ToImage(), *geometry, v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def image_folder(root: Path, split: str, image_size: int, train: bool) -> datasets.ImageFolder:
    """One split of an ImageFolder tree, with a DataError when it is missing or empty."""
    folder = Path(root) / split
    if not folder.is_dir():
        raise DataError(f"{folder} is not a directory: expected {root}/{split}/<class>/<image>")
    try:
        return datasets.ImageFolder(str(folder), transform=build_transforms(image_size, train),
                                    loader=load_rgb)
    except (FileNotFoundError, RuntimeError) as error:
        raise DataError(f"{folder}: {error}") from None


def load_splits(root: Path, image_size: int) -> tuple[datasets.ImageFolder, datasets.ImageFolder]:
    """The train and val splits, checked to share one list of classes."""
    train_set = image_folder(root, "train", image_size, train=True)
    val_set = image_folder(root, "val", image_size, train=False)
    if train_set.classes != val_set.classes:
        raise DataError(f"{root}: train/ classes {train_set.classes} differ from val/ classes {val_set.classes}")
    return train_set, val_set


def class_counts(dataset: datasets.ImageFolder) -> torch.Tensor:
    """Images per class, as a float tensor of shape (num_classes,)."""
    counts = torch.zeros(len(dataset.classes))
    for target in dataset.targets:
        counts[target] += 1
    return counts


def build_loader(dataset, batch_size: int, device: torch.device, *, train: bool,
                 workers: int = 0, seed: int = 0, sampler=None) -> DataLoader:
    """A DataLoader that pins memory iff the device is CUDA and keeps workers alive across epochs.

    For training, shuffle order and augmentation are functions of (seed, epoch, index), so a
    resumed run redraws exactly what an uninterrupted one drew (see reproducibility.py); call
    `loader.sampler.set_epoch(epoch)` before each epoch. A given `sampler` (e.g. a
    DistributedSampler) still chooses the indices.
    """
    if train:
        sampler = EpochSampler(len(dataset), seed, shuffle=True, inner=sampler)
        dataset = SeededSamples(dataset, seed)
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False,  # the training order comes from EpochSampler
        sampler=sampler,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        persistent_workers=workers > 0,
        drop_last=False,
        generator=generator,
        worker_init_fn=ignore_sigint_in_worker if workers > 0 else None,
    )


def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, box: tuple, color: tuple) -> None:
    """Draw one of the demo classes' shapes filling `box`."""
    x0, y0, x1, y1 = box
    if shape == "circle":
        draw.ellipse(box, fill=color)
    elif shape == "square":
        draw.rectangle(box, fill=color)
    elif shape == "triangle":
        draw.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=color)
    else:
        w = (x1 - x0) / 3
        draw.rectangle((x0 + w, y0, x1 - w, y1), fill=color)
        draw.rectangle((x0, y0 + w, x1, y1 - w), fill=color)


def _demo_image(shape_index: int, image_size: int, rng: random.Random) -> Image.Image:
    """A noisy background with one shape whose hue leans towards its class's colour."""
    background = tuple(rng.randrange(0, 90) for _ in range(3))
    image = Image.new("RGB", (image_size, image_size), background)
    size = rng.uniform(0.45, 0.8) * image_size
    x0, y0 = rng.uniform(0, image_size - size), rng.uniform(0, image_size - size)
    # The class's hue is a strong hint and the shape a second one: learnable from scratch in a
    # few CPU epochs, yet noisy enough that accuracy is not trivially 1.0.
    color = [rng.randrange(190, 256) if high else rng.randrange(40, 150) for high in DEMO_HUES[shape_index]]
    _draw_shape(ImageDraw.Draw(image), DEMO_CLASSES[shape_index], (x0, y0, x0 + size, y0 + size), tuple(color))
    noise = Image.frombytes("L", (image_size, image_size), rng.randbytes(image_size * image_size)).convert("RGB")
    return Image.blend(image, noise, 0.15)


def write_demo_dataset(root: Path, *, train_per_class: int = 240, val_per_class: int = 60,
                       image_size: int = DEMO_IMAGE_SIZE, seed: int = 0) -> Path:
    """Write the synthetic shapes dataset as PNGs in ImageFolder layout, atomically.

    The tree is built in a temporary sibling folder and renamed into place, so an
    interrupted first run never leaves a half-written dataset behind.
    """
    root = Path(root)
    if (root / "train").is_dir() and (root / "val").is_dir():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".demo-", dir=root.parent))
    try:
        for split, per_class, offset in (("train", train_per_class, 0), ("val", val_per_class, 1)):
            rng = random.Random(seed * 2 + offset)
            for index, name in enumerate(DEMO_CLASSES):
                folder = staging / split / name
                folder.mkdir(parents=True)
                for i in range(per_class):
                    _demo_image(index, image_size, rng).save(folder / f"{i:04d}.png")
        os.replace(staging, root)
    except OSError:
        if not (root / "train").is_dir():  # otherwise another process won the race
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return root



if __name__ == "__main__":  # python -m {{ cookiecutter.package_name }}.data check DATA
    import runpy

    # Handed over by name: datacheck.py imports this module, never the other way round.
    runpy.run_module(f"{__package__}.datacheck", run_name="__main__")
