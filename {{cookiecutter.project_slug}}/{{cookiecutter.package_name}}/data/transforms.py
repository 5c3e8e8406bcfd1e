"""What a model sees of an image: the preprocessing (size, crop, normalisation) chosen for the weights and the
data, the training augmentation recipe (`--augment`), and the transforms that apply them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch
from torchvision.transforms import v2

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
INTERPOLATIONS = ("bilinear", "bicubic", "nearest", "nearest-exact")  # what v2's resizes take on image tensors
MIN_IMAGE_SIZE, MAX_IMAGE_SIZE = 16, 4096  # smaller holds no picture; larger is a typo (tens of GiB a batch)

# --augment: each recipe is a list of v2 ops for the training split, chosen by name. `light` shifts, turns and
# scales a little without mirroring, so digits, text and most scans stay what they are; `standard` adds
# mirror images and larger crops (natural photos). The default is `none`: on real small datasets it reached
# the best accuracy in 5 epochs (digits: none 99.4%, light 98.1%, standard 92.5% after 2 of 5; docs/data.md).
DEFAULT_AUGMENT = "none"
LEGACY_AUGMENT = "standard"  # what checkpoints written before --augment existed trained with


def _none(size: int, resize: int) -> list[v2.Transform]:
    return [v2.Resize(resize, antialias=True), v2.CenterCrop(size)]


def _light(size: int, resize: int) -> list[v2.Transform]:
    return [*_none(size, resize), v2.RandomAffine(degrees=10, translate=(0.1, 0.1), scale=(0.9, 1.1))]


def _standard(size: int, resize: int) -> list[v2.Transform]:
    return [v2.RandomResizedCrop(size, scale=(0.6, 1.0), antialias=True), v2.RandomHorizontalFlip()]


AUGMENTATIONS: dict[str, Callable[[int, int], list[v2.Transform]]] = {
    "none": _none, "light": _light, "standard": _standard}


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """How images become model inputs: crop size, the resize before the evaluation crop, normalisation, and the
    training split's augmentation recipe."""

    image_size: int  # the square crop the model sees
    resize_size: int | None = None  # evaluation resizes the shorter side to this, then crops; None: image_size
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    reason: str = ""  # why this size: printed and saved in config.json
    augment: str = DEFAULT_AUGMENT  # a name in AUGMENTATIONS; used for the training split only
    interpolation: str = "bilinear"  # how every resize samples (a timm model's weights may want bicubic)

    def to_dict(self) -> dict:
        """Plain values for config.json and checkpoints."""
        return {**dataclasses.asdict(self), "mean": list(self.mean), "std": list(self.std)}

    def problem(self) -> str | None:
        """What makes it unusable (a size out of range, a normalisation that divides by zero), or None."""
        for key in ("image_size", "resize_size"):
            size = getattr(self, key)
            whole = isinstance(size, int) and not isinstance(size, bool)
            if (size is not None or key == "image_size") and not (whole and MIN_IMAGE_SIZE <= size <= MAX_IMAGE_SIZE):
                return f"{key} is {size!r}; expected a whole number of pixels in [{MIN_IMAGE_SIZE}, {MAX_IMAGE_SIZE}]"
        for key in ("mean", "std"):
            values = getattr(self, key)
            if len(values) != 3 or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                           and math.isfinite(v) for v in values):
                return f"{key} is {list(values)!r}; expected 3 finite numbers (R, G, B)"
        if not all(v > 0 for v in self.std):
            return f"std is {list(self.std)!r}; every value must be above 0"
        if self.interpolation not in INTERPOLATIONS:
            return f"interpolation is {self.interpolation!r}; expected one of {', '.join(INTERPOLATIONS)}"
        return None if self.augment in AUGMENTATIONS else f"augment is {self.augment!r}"

    @classmethod
    def from_dict(cls, values: dict) -> Preprocessing:
        """Read back what to_dict wrote (a checkpoint from before --augment trained with the legacy recipe)."""
        return cls(**{"augment": LEGACY_AUGMENT, **values, "mean": tuple(values["mean"]),
                      "std": tuple(values["std"])})


def augmentation(name: str, image_size: int, resize_size: int | None = None,
                 interpolation: str = "bilinear") -> list[v2.Transform]:
    """The training geometry of recipe `name` (KeyError for an unknown name; settings.py offers only known ones),
    every resize in it sampling with `interpolation`."""
    geometry = AUGMENTATIONS[name](image_size, resize_size or image_size)
    for op in geometry:
        if hasattr(op, "interpolation"):  # the recipes stay two-argument functions
            op.interpolation = v2.InterpolationMode(interpolation)
    return geometry


def build_transforms(image_size: int | Preprocessing, train: bool, *, normalize: bool = True) -> v2.Compose:
    """The preprocessing's augmentation recipe for training; a deterministic resize and centre crop otherwise.

    `normalize=False` stops at the uint8 (3, H, W) image: a quarter of the bytes to copy, and the
    conversion to float and normalisation run on the device (training/hardware.Hardware.batch), exactly.
    """
    prep = image_size if isinstance(image_size, Preprocessing) else Preprocessing(image_size)
    geometry = augmentation(prep.augment if train else "none", prep.image_size, prep.resize_size, prep.interpolation)
    to_float = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(prep.mean, prep.std)] if normalize else []
    return v2.Compose([v2.ToImage(), *geometry, *to_float])
