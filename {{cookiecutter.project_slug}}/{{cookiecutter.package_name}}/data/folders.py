"""ImageFolder data on disk: the train/ and val/ splits (or a stratified split of class folders), and
reading one image as RGB.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps
from torchvision import datasets

from ..errors import UserError
from .transforms import Preprocessing, build_transforms


class DataError(UserError):
    """The data folder is missing, empty or malformed."""


# What Pillow raises for a file it cannot decode: OSError and ValueError for most damage, SyntaxError and
# struct.error from some format plugins, DecompressionBombError (neither of those) for a file whose
# pixel count would exhaust memory (Image.MAX_IMAGE_PIXELS).
DECODE_ERRORS = (OSError, ValueError, SyntaxError, struct.error, Image.DecompressionBombError)
_WIDE_INTEGER_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I")  # 16- and 32-bit grey levels


def _to_8_bit(image: Image.Image) -> Image.Image:
    """A grey image of 16-bit or 32-bit integers, or of floats, as 8-bit grey ("L").

    convert("RGB") clips such values to 0..255, so a mid-grey 16-bit PNG (32768) turns white and a
    float TIFF in [0, 1] black. Integers are scaled by their range (16 bits unless the values are
    larger), floats in [0, 1] by 255, any other float range from its minimum to its maximum.
    """
    values = np.nan_to_num(np.asarray(image, dtype=np.float64))  # (H, W)
    low, high = 0.0, 65535.0
    if image.mode == "F":
        in_unit_range = values.size == 0 or (values.min() >= 0 and values.max() <= 1)
        low, high = (0.0, 1.0) if in_unit_range else (float(values.min()), float(values.max()))
    elif values.size and values.max() > high:  # 32-bit integers beyond 16 bits: their own range
        high = float(values.max())
    scaled = (values - low) / max(high - low, 1e-12) * 255.0
    return Image.fromarray(np.clip(np.rint(scaled), 0, 255).astype(np.uint8))  # (H, W) uint8: mode "L"


def load_rgb(path: str) -> Image.Image:
    """Open an image as 8-bit RGB, upright (its EXIF orientation applied), deep grey levels scaled to 8 bits.

    A decode failure of any kind (see DECODE_ERRORS) becomes a DataError naming the file.
    """
    try:
        with Image.open(path) as image:
            image = ImageOps.exif_transpose(image)  # a phone's portrait photo is stored sideways
            if image.mode in _WIDE_INTEGER_MODES or image.mode == "F":
                image = _to_8_bit(image)
            return image.convert("RGB")
    except DECODE_ERRORS as error:
        raise DataError(f"cannot read image {path}: {error}") from None


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
