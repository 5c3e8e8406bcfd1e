"""What a model sees of an image: the preprocessing (size, crop, normalisation) chosen for the weights and the
data, and the transforms that apply it.
"""

from __future__ import annotations

import dataclasses

import torch
from torchvision.transforms import v2

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


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


def build_transforms(image_size: int | Preprocessing, train: bool, *, normalize: bool = True) -> v2.Compose:
    """Random crops and flips for training; a deterministic resize and centre crop otherwise.

    `normalize=False` stops at the uint8 (3, H, W) image: a quarter of the bytes to copy, and the
    conversion to float and normalisation run on the device (training/hardware.Hardware.batch), exactly.
    """
    prep = image_size if isinstance(image_size, Preprocessing) else Preprocessing(image_size)
    if train:
        geometry = [v2.RandomResizedCrop(prep.image_size, scale=(0.6, 1.0), antialias=True),
                    v2.RandomHorizontalFlip()]
    else:
        geometry = [v2.Resize(prep.resize_size or prep.image_size, antialias=True), v2.CenterCrop(prep.image_size)]
    to_float = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(prep.mean, prep.std)] if normalize else []
    return v2.Compose([v2.ToImage(), *geometry, *to_float])
