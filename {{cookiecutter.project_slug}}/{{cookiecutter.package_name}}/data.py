"""ImageFolder datasets, their transforms and loaders, and the built-in demo dataset.

Loaders pin host memory exactly when the device is CUDA: pinned pages are what make
`tensor.to(device, non_blocking=True)` asynchronous, and pinning is wasted work elsewhere.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import statistics
import tempfile
from pathlib import Path

import torch
from PIL import Image, ImageDraw
from torch.utils.data import DataLoader
from torchvision import datasets
from torchvision.transforms import v2

from . import backbones
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


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """How images become model inputs: crop size, the resize before the evaluation crop, normalisation."""

    image_size: int  # the square crop the model sees
    resize_size: int | None = None  # evaluation resizes the shorter side to this, then crops; None: image_size
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    reason: str = ""  # why this size: printed and saved in config.json

    def to_dict(self) -> dict:
        """Plain values for config.json and checkpoints."""
        return {**dataclasses.asdict(self), "mean": list(self.mean), "std": list(self.std)}

    @classmethod
    def from_dict(cls, values: dict) -> Preprocessing:
        """Read back what to_dict wrote."""
        return cls(**{**values, "mean": tuple(values["mean"]), "std": tuple(values["std"])})


def build_transforms(image_size: int | Preprocessing, train: bool) -> v2.Compose:
    """Random crops and flips for training; a deterministic resize and centre crop otherwise."""
    prep = image_size if isinstance(image_size, Preprocessing) else Preprocessing(image_size)
    if train:
        geometry = [v2.RandomResizedCrop(prep.image_size, scale=(0.6, 1.0), antialias=True),
                    v2.RandomHorizontalFlip()]
    else:
        geometry = [v2.Resize(prep.resize_size or prep.image_size, antialias=True), v2.CenterCrop(prep.image_size)]
    return v2.Compose([v2.ToImage(), *geometry, v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(prep.mean, prep.std)])


def typical_image_size(root: Path, sample: int = 64) -> int:
    """The median shorter side of up to `sample` images spread evenly over the tree (headers only)."""
    files = sorted(path for path in Path(root).rglob("*")
                   if path.suffix.lower() in datasets.folder.IMG_EXTENSIONS and path.is_file())
    if not files:
        raise DataError(f"{root}: no image files found; expected {root}/train/<class>/<image> and val/, "
                        f"or {root}/<class>/<image>")
    picked = files[::max(1, len(files) // sample)][:sample]
    sides = []
    for path in picked:
        try:
            with Image.open(path) as image:  # reads the header, not the pixels
                sides.append(min(image.size))
        except (OSError, ValueError) as error:
            raise DataError(f"cannot read image {path}: {error}") from None
    return int(statistics.median(sides))


SCRATCH_SIZE_BOUNDS = (32, 224)  # sizes measured from the data, for training from scratch, are kept within these


def choose_preprocessing(backbone: str, root: Path | None, image_size: int | None,
                         pretrained: bool) -> Preprocessing:
    """The run's input size and normalisation, with the reason: the flag, the demo's own size, the
    pretrained weights' preprocessing, or (from scratch) the data's typical image size."""
    if image_size:
        return Preprocessing(image_size, reason="--image-size")
    if root is None:
        size = backbones.fit_image_size(backbone, DEMO_IMAGE_SIZE)
        raised = f", raised to the {size} px that {backbone} takes" if size != DEMO_IMAGE_SIZE else ""
        return Preprocessing(size, reason=f"the demo data's own size ({DEMO_IMAGE_SIZE} px{raised})")
    if pretrained:
        weights = backbones.default_weights(backbone).transforms()
        return Preprocessing(weights.crop_size[0], weights.resize_size[0], tuple(weights.mean), tuple(weights.std),
                             reason=f"the pretrained weights' preprocessing (resize {weights.resize_size[0]}, "
                                    f"crop {weights.crop_size[0]})")
    measured = typical_image_size(root)
    low, high = SCRATCH_SIZE_BOUNDS
    size = backbones.fit_image_size(backbone, min(max(measured, low), high))
    return Preprocessing(size, reason=f"the data's typical image size (the median shorter side of a sample is "
                                      f"{measured} px; kept within {low}-{high} and what {backbone} takes)")


def split_indices(targets: list[int], val_split: float, seed: int) -> tuple[list[int], list[int]]:
    """A stratified, seeded split: `val_split` of each class (at least one image where it has two) to val."""
    if not 0.0 < val_split < 1.0:
        raise DataError(f"--val-split must be between 0 and 1, got {val_split}")
    rng = random.Random(seed)
    train_indices, val_indices = [], []
    for label in sorted(set(targets)):
        indices = [i for i, target in enumerate(targets) if target == label]
        rng.shuffle(indices)
        count = min(max(round(len(indices) * val_split), 1), len(indices) - 1) if len(indices) > 1 else 0
        val_indices += indices[:count]
        train_indices += indices[count:]
    return sorted(train_indices), sorted(val_indices)


def has_split_folders(root: Path) -> bool:
    """True for a tree with train/ or val/; False for class folders to be split by --val-split."""
    return (Path(root) / "train").is_dir() or (Path(root) / "val").is_dir()


def image_folder(root: Path, split: str, image_size: int | Preprocessing, train: bool, *,
                 val_split: float | None = None, seed: int = 0) -> datasets.ImageFolder:
    """One split of an ImageFolder tree, with a DataError when it is missing or empty.

    A root of class folders without train/ and val/ is split by `split_indices(val_split, seed)`.
    """
    folder = Path(root) / split
    if not folder.is_dir() and val_split and split in ("train", "val") and not has_split_folders(root):
        folder = Path(root)
    elif not folder.is_dir():
        raise DataError(f"{folder} is not a directory: expected {root}/{split}/<class>/<image>, "
                        f"or {root}/<class>/<image> split by --val-split")
    try:
        dataset = datasets.ImageFolder(str(folder), transform=build_transforms(image_size, train), loader=load_rgb)
    except (FileNotFoundError, RuntimeError) as error:
        raise DataError(f"{folder}: {error}") from None
    if folder == Path(root):
        keep = split_indices(dataset.targets, val_split, seed)[split == "val"]
        dataset.samples = dataset.imgs = [dataset.samples[i] for i in keep]
        dataset.targets = [target for _, target in dataset.samples]
    return dataset


def load_splits(root: Path, image_size: int | Preprocessing, *, val_split: float | None = None,
                seed: int = 0) -> tuple[datasets.ImageFolder, datasets.ImageFolder]:
    """The train and val splits, checked to share one list of classes."""
    train_set = image_folder(root, "train", image_size, train=True, val_split=val_split, seed=seed)
    val_set = image_folder(root, "val", image_size, train=False, val_split=val_split, seed=seed)
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
