"""Choosing the preprocessing for a run: the weights' own when pretrained, else the demo's size or the data's.

The one home of that decision; a resumed run or `--init-from` takes the checkpoint's instead
(training/run_state.preprocessing), its augmentation recipe included, so a resumed run continues exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics

from PIL import Image

from .. import backbones
from .dataset import ImageDataset
from .demo import DEMO_IMAGE_SIZE
from .errors import DataError
from .images import DECODE_ERRORS
from .transforms import DEFAULT_AUGMENT, INTERPOLATIONS, Preprocessing


def typical_image_size(dataset: ImageDataset, sample: int = 64) -> int:
    """The median shorter side of up to `sample` images spread evenly over `dataset` (not empty); headers only."""
    sides = []
    for index in range(0, len(dataset), max(1, len(dataset) // sample))[:sample]:
        item = dataset[index][0]  # a path is opened (its header read, not its pixels); a PIL image used as is
        try:
            with contextlib.nullcontext(item) if isinstance(item, Image.Image) else Image.open(item) as image:
                sides.append(min(image.size))
        except DECODE_ERRORS as error:
            raise DataError(f"cannot read image {item}: {error}") from None
    return int(statistics.median(sides))


SCRATCH_SIZE_BOUNDS = (32, 224)  # sizes measured from the data, for training from scratch, are kept within these


def choose_preprocessing(backbone: str, train_images: ImageDataset | None, image_size: int | None,
                         pretrained: bool, saved: Preprocessing | None = None,
                         augment: str = DEFAULT_AUGMENT) -> Preprocessing:
    """The run's input size and normalisation, with the reason: the flag, the weights' checkpoint (`saved`,
    when resuming or starting from one), the demo's own size, the pretrained weights' preprocessing, or (from
    scratch) the data's typical image size (`train_images`: the training split; None: the demo data);
    training augments with recipe `augment` (a checkpoint's own when `saved`)."""
    if image_size and saved is not None:
        return Preprocessing(image_size, reason="--image-size", augment=saved.augment)
    if saved is not None:
        return saved
    # At a size of their own, pretrained weights keep their normalisation and interpolation (timm's vary).
    base = weights_preprocessing(backbone, augment) if pretrained else Preprocessing(DEMO_IMAGE_SIZE, augment=augment)
    if image_size:
        return dataclasses.replace(base, image_size=image_size, resize_size=None, reason="--image-size")
    if train_images is None:
        size = backbones.fit_image_size(backbone, DEMO_IMAGE_SIZE)
        raised = f", raised to the {size} px that {backbone} takes" if size != DEMO_IMAGE_SIZE else ""
        return dataclasses.replace(base, image_size=size, resize_size=None,
                                   reason=f"the demo data's own size ({DEMO_IMAGE_SIZE} px{raised})")
    if pretrained:
        return base
    measured = typical_image_size(train_images)  # the run has checked that it holds images
    low, high = SCRATCH_SIZE_BOUNDS
    size = backbones.fit_image_size(backbone, min(max(measured, low), high))
    return Preprocessing(size, reason=f"the data's typical image size (the median shorter side of a sample is "
                                      f"{measured} px; kept within {low}-{high} and what {backbone} takes)",
                         augment=augment)


def weights_preprocessing(backbone: str, augment: str = DEFAULT_AUGMENT) -> Preprocessing:
    """The preprocessing the pretrained weights were evaluated with (a timm model's: its data configuration)."""
    spec = backbones.resolve_backbone(backbone)
    if isinstance(spec, backbones.backbones_timm.TimmBackbone):
        config = spec.data_config()  # input_size, crop_pct, mean, std, interpolation (timm.data.resolve_data_config)
        size = int(config["input_size"][-1])
        resize = math.floor(size / config["crop_pct"])
        interpolation = config["interpolation"] if config["interpolation"] in INTERPOLATIONS else "bilinear"
        return Preprocessing(size, resize, tuple(config["mean"]), tuple(config["std"]), interpolation=interpolation,
                             reason=f"timm's data configuration for {backbone} (resize {resize} {interpolation}, "
                                    f"crop {size})", augment=augment)
    weights = backbones.default_weights(backbone).transforms()
    return Preprocessing(weights.crop_size[0], weights.resize_size[0], tuple(weights.mean), tuple(weights.std),
                         reason=f"the pretrained weights' preprocessing (resize {weights.resize_size[0]}, "
                                f"crop {weights.crop_size[0]})", augment=augment)
