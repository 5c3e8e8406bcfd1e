"""`--cache-images`: decode a small dataset once into memory, so small runs are compute-bound.

Each image is decoded, resized and centre-cropped to the run's image size once, and kept as
uint8 in one (N, 3, S, S) tensor: a quarter of what float32 would take. The per-sample part of
the pipeline (random crop and flip for training, float conversion, normalisation) still runs
every epoch with the same transforms as the uncached data, so augmentation stays per-sample.
One difference: training crops are taken from the S-px cached image rather than from the
original file, which matters only when the files are much larger than S.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import torch
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2

from .dataset import Decoded
from .errors import DataError
from .transforms import Preprocessing, build_transforms

_DECODE_BATCH = 64


class CachedImages(Dataset):
    """A Decoded dataset held in memory as uint8; same `classes` and `targets`."""

    def __init__(self, images: torch.Tensor, source: Decoded, transform: v2.Compose):
        self.images = images  # (N, 3, S, S) uint8
        self.targets, self.classes, self.transform = list(source.targets), source.classes, transform

    def __len__(self) -> int:
        """Number of images."""
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        """The transformed image (3, S, S) float32 and its class index."""
        return self.transform(self.images[index]), self.targets[index]


def cache_megabytes(count: int, image_size: int) -> int:
    """Memory, in MB rounded up, that `count` uint8 RGB images of `image_size` px take."""
    return math.ceil(count * 3 * image_size * image_size / 2**20)


def check_budget(count: int, image_size: int, budget_mb: int) -> None:
    """Refuse, before decoding anything, a cache that would not fit in the budget."""
    needed = cache_megabytes(count, image_size)
    if needed > budget_mb:
        raise DataError(f"--cache-images needs {needed} MB for {count} images at {image_size} px, "
                        f"over the budget of {budget_mb} MB; drop --cache-images or raise --cache-budget-mb")


def decode_all(dataset: Decoded, image_size: int, workers: int = 0) -> torch.Tensor:
    """Every image of `dataset` decoded, resized and centre-cropped: uint8 (N, 3, S, S)."""
    resized = copy.copy(dataset)  # same files and loader, a decode-and-resize-only transform
    resized.transform = v2.Compose([v2.ToImage(), v2.Resize(image_size, antialias=True), v2.CenterCrop(image_size)])
    images = torch.empty((len(dataset), 3, image_size, image_size), dtype=torch.uint8)
    loader = DataLoader(resized, batch_size=_DECODE_BATCH, shuffle=False, num_workers=workers)
    for step, (batch, _) in enumerate(loader):  # (B, 3, S, S) uint8, in order
        images[step * _DECODE_BATCH:(step + 1) * _DECODE_BATCH] = batch
    return images


def cache_splits(train_set: Decoded, val_set: Decoded, image_size: int | Preprocessing,
                 budget_mb: int, workers: int = 0) -> tuple[CachedImages, CachedImages]:
    """Both splits decoded once into memory, after checking that they fit in `budget_mb`."""
    prep = image_size if isinstance(image_size, Preprocessing) else Preprocessing(image_size)
    image_size, prep = prep.image_size, dataclasses.replace(prep, resize_size=None)  # cached images are S px already
    check_budget(len(train_set) + len(val_set), image_size, budget_mb)
    # build_transforms on an S-px uint8 tensor: Resize/CenterCrop to S are no-ops, crops and flips still run.
    train_images, val_images = decode_all(train_set, image_size, workers), decode_all(val_set, image_size, workers)
    return (CachedImages(train_images, train_set, build_transforms(prep, train=True)),
            CachedImages(val_images, val_set, build_transforms(prep, train=False)))
