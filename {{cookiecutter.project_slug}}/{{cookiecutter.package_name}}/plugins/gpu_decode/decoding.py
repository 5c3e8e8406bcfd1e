"""What `--decode device` runs (the gpu_decode answer; __init__.py says why and how): the workers' Encoded samples,
their collate, the batch the device decodes and transforms, and the choice between the device and the CPU."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from PIL import Image
from torch.utils.data import Dataset

from ...data.errors import DataError
from ...data.images import as_rgb
from ...data.transforms import Preprocessing, augmentation
from .geometry import DeviceGeometry
from .jpeg import Encoded, decode_jpegs, decoder_for, mostly_jpeg, read_encoded


class EncodedBatch:
    """A batch of Encoded JPEGs (and CPU-decoded other images), decoded and transformed by `to_images(device)`."""

    def __init__(self, samples: list[Encoded | torch.Tensor], geometry: DeviceGeometry):
        self.samples, self.geometry = samples, geometry

    def __len__(self) -> int:
        return len(self.samples)

    def pin_memory(self) -> EncodedBatch:
        """What the DataLoader's pinning thread calls: the bytes are read by the decoder, not copied; keep them."""
        return self

    def to_images(self, device: torch.device) -> torch.Tensor:
        """The batch as uint8 (B, 3, H, W) on `device`: every JPEG decoded there in one call, then transformed."""
        images: list[torch.Tensor | None] = [None] * len(self.samples)
        jpegs = [i for i, sample in enumerate(self.samples) if isinstance(sample, Encoded)]
        if jpegs:
            decoded = decode_jpegs([self.samples[i].data for i in jpegs], device)
            for i, image in zip(jpegs, decoded):
                images[i] = self.geometry.apply(image, self.samples[i].params)
        for i, sample in enumerate(self.samples):
            if images[i] is None:  # decoded in the worker
                images[i] = sample.to(device, non_blocking=True)
        return torch.stack(images)


class EncodedSamples(Dataset):
    """A data.dataset.Decoded's samples with JPEG files as Encoded (bytes and drawn parameters): (sample, target).

    Any other image (another format, a PIL image from the dataset) is opened and transformed on the CPU as
    Decoded does. `name(index)` and `samples` are the wrapped dataset's (unreadable.py names skipped files).
    """

    def __init__(self, decoded, geometry: DeviceGeometry):
        self.decoded, self.geometry = decoded, geometry
        self.classes, self.targets = decoded.classes, decoded.targets

    def __len__(self) -> int:
        return len(self.decoded)

    def name(self, index: int) -> str:
        """What warnings call image `index`."""
        return self.decoded.name(index)

    @property
    def samples(self) -> list[tuple[str, int]]:
        """(name, target) per image."""
        return self.decoded.samples

    def __getitem__(self, index: int) -> tuple[Encoded | torch.Tensor, int]:
        item, target = self.decoded.source[index]
        if isinstance(item, Image.Image):
            sample = as_rgb(item, self.decoded.short_side, self.name(index))
        else:
            sample = read_encoded(item, self.decoded.short_side)
        return self.geometry(sample), int(target)


def use_device_decode(decoded, prep: Preprocessing, train: bool) -> EncodedSamples:
    """`decoded` (a data.dataset.Decoded) yielding Encoded JPEGs for the device to decode with `prep`'s geometry."""
    recipe = prep.augment if train else "none"
    return EncodedSamples(decoded, DeviceGeometry(
        augmentation(recipe, prep.image_size, prep.resize_size, prep.interpolation)))


def file_names(dataset, count: int = 64) -> list[str]:
    """The first `count` file names of a dataset (a Decoded, possibly inside SkipUnreadable); [] if it has none."""
    inner = getattr(dataset, "dataset", dataset)
    paths = getattr(getattr(inner, "source", None), "paths", None) or []
    return [str(path) for path in paths[:count]]


class CollateEncoded:
    """The DataLoader's collate_fn for DeviceGeometry samples: (EncodedBatch, targets[, paths, reasons])."""

    def __init__(self, geometry: DeviceGeometry):
        self.geometry = geometry

    def __call__(self, batch: list[tuple]) -> tuple:
        columns = list(zip(*batch))
        images = EncodedBatch(list(columns[0]), self.geometry)
        return (images, torch.tensor(columns[1]), *(list(column) for column in columns[2:]))


def no_decoder(device: torch.device) -> str:
    return f"--decode device: neither TorchCodec nor torchvision decodes JPEGs on {device} here; use --decode cpu"


def choose_decode(requested: str, device: torch.device, files: Sequence[str], cached: bool) -> tuple[str, str]:
    """Where images are decoded ("cpu" | "device") and why (naming the decoder): the flag, or auto's choice.

    Raises DataError (bad input) for `--decode device` where no decoder runs on the device.
    """
    if requested == "cpu":
        return "cpu", "--decode cpu"
    if requested == "device":
        if cached:
            raise DataError("--decode device cannot be combined with --cache-images (the cache holds decoded images)")
        if (decoder := decoder_for(device)) is None:
            raise DataError(no_decoder(device))
        return "device", f"--decode device; {decoder.name}"
    if cached:
        return "cpu", "auto: --cache-images holds decoded images"
    if device.type != "cuda":
        return "cpu", f"auto: the CPU path on {device.type}"
    if not mostly_jpeg(files):
        return "cpu", "auto: the data is mostly not JPEG"
    if (decoder := decoder_for(device)) is None:
        return "cpu", "auto: neither TorchCodec nor torchvision decodes JPEGs on CUDA here"
    return "device", f"auto: JPEG data on CUDA (nvJPEG; {decoder.name})"
