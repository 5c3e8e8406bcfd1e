"""The gpu_decode answer: `--decode device`, the loader workers read a JPEG's bytes and the device decodes the whole
batch (TorchCodec's `decode_jpeg(list, device=...)`, else torchvision's: jpeg.decoder_for), then resizes, crops and
flips it there. The start-up line and config.json's machine record name the decoder (`decode_reason`).
Why: decoding and resizing an ImageNet-sized JPEG costs a CPU core 10-15 ms, so a host feeds a fast GPU
only a fraction of the images it can train on. Reading the bytes and the header costs well under 1 ms.

Exact resume holds as on the CPU path: the worker draws each sample's parameters with the recipe's own
transforms (`make_params`, and the coin of a random flip) under the sample's seed (sampling.SeededSamples),
in the order the CPU path draws them, and the device applies them with the same transforms (`transform`).
So the crops and flips are the CPU path's; the pixels are too where the decoder and resize kernels are the
same (on the CPU, TorchCodec's or torchvision's libjpeg-turbo standing in for the device's decoder: equal to
Pillow's; see tests/plugins/gpu_decode/test_decoders.py). On CUDA nvJPEG's inverse DCT and colour conversion
and the float resize kernel round differently: a few levels of 255 at most in a pixel, under one level on average.

`--decode auto` (the default) decodes on the device for mostly-JPEG data on CUDA, else in the workers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from PIL import Image
from torch.utils.data import Dataset

from ...data.errors import DataError
from ...data.images import as_rgb
from ...data.transforms import Preprocessing, augmentation
from .. import Plugin
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


def _no_decoder(device: torch.device) -> str:
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
            raise DataError(_no_decoder(device))
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


class GpuDecodePlugin(Plugin):
    """--decode device (and auto's choice of it): JPEGs decoded, resized, cropped and flipped on the GPU."""

    name = "gpu_decode"

    def choices(self) -> dict[str, list[str]]:
        return {"decode": ["device"]}

    def unavailable(self, field: str, value: str, device) -> str | None:
        if decoder_for(device) is None:  # before the data is listed: MPS, XPU, a build without nvJPEG
            return _no_decoder(device)
        return None

    def loaders(self, plan) -> None:
        """Where the run's images are decoded (plan.decode and why); for the device, the workers hand over bytes."""
        cfg = plan.cfg
        plan.decode, plan.decode_reason = choose_decode(cfg.decode, plan.device, file_names(plan.datasets[True]),
                                                        cfg.cache_images)
        if plan.decode != "device":
            return
        for train, dataset in plan.datasets.items():  # inside SkipUnreadable (no cache here)
            dataset.dataset = use_device_decode(dataset.dataset, plan.geometry, train)
            plan.collate[train] = CollateEncoded(dataset.dataset.geometry)


PLUGIN = GpuDecodePlugin()
