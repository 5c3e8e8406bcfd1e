"""A training recipe's geometry split in two: parameters drawn in the loader worker, applied on the device.

Exact resume holds as on the CPU path: the worker draws each sample's parameters with the recipe's own
transforms (`make_params`, and the coin of a random flip) under the sample's seed (data/sampling.SeededSamples),
in the order the CPU path draws them, and the device applies them with the same transforms (`transform`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2._transform import _RandomApplyTransform

from .jpeg import Encoded


def _placeholder(size: tuple[int, int]) -> tv_tensors.Image:
    """An image of `size` without data, for transforms that only need the size (make_params, output shapes)."""
    return tv_tensors.Image(torch.empty((3, *size), dtype=torch.uint8, device="meta"))


def _make_params(transform: v2.Transform, inputs: list) -> dict:
    """transform.make_params: public from torchvision 0.21; 0.19 and 0.20 call it _get_params."""
    make_params = getattr(transform, "make_params", None) or transform._get_params
    return make_params(inputs)


def _transform(transform: v2.Transform, image: tv_tensors.Image, params: dict) -> tv_tensors.Image:
    """transform.transform: public from torchvision 0.21; 0.19 and 0.20 call it _transform."""
    apply = getattr(transform, "transform", None) or transform._transform
    return apply(image, params)


def _output_size(transform: v2.Transform, size: tuple[int, int], params: dict) -> tuple[int, int]:
    """The (H, W) `transform` makes of an image of `size` with `params`."""
    if isinstance(transform, (v2.RandomResizedCrop, v2.CenterCrop)):
        height, width = transform.size
        return height, width
    if isinstance(transform, (v2.RandomHorizontalFlip, v2.RandomVerticalFlip, v2.RandomAffine)):
        return size  # v2's affine has no `expand`: it keeps the size
    return tuple(_transform(transform, _placeholder(size), params).shape[-2:])  # shape only, on the meta device


class DeviceGeometry:
    """A recipe's geometry split in two: `draw` (in the worker, under the sample's seed) and `apply` (on the device).

    Called like the transform it replaces: an Encoded JPEG gets its parameters, anything else (a PIL image
    of another format) is transformed on the CPU to a uint8 (3, H, W) tensor as build_transforms does.
    """

    def __init__(self, transforms: Sequence[v2.Transform]):
        self.transforms = list(transforms)
        self.cpu = v2.Compose([v2.ToImage(), *self.transforms])

    def __call__(self, sample: Encoded | Image.Image) -> Encoded | torch.Tensor:
        if not isinstance(sample, Encoded):
            return self.cpu(sample).as_subclass(torch.Tensor)
        return dataclasses.replace(sample, params=self.draw(sample.size))

    def draw(self, size: tuple[int, int]) -> list[dict | None]:
        """Each transform's parameters for an image of `size`, drawn from the global RNGs as its forward() draws."""
        drawn = []
        for transform in self.transforms:
            if isinstance(transform, _RandomApplyTransform) and torch.rand(1) >= transform.p:
                drawn.append(None)  # the coin said no: forward() returns the image as it is
                continue
            params = _make_params(transform, [_placeholder(size)])
            drawn.append(params)
            size = _output_size(transform, size, params)
        return drawn

    def apply(self, image: torch.Tensor, params: list[dict | None]) -> torch.Tensor:
        """`image` (3, H, W) uint8, on any device, through the transforms with the drawn parameters."""
        image = tv_tensors.Image(image)
        for transform, drawn in zip(self.transforms, params):
            if drawn is not None:
                image = _transform(transform, image, drawn)
        return image.as_subclass(torch.Tensor)


