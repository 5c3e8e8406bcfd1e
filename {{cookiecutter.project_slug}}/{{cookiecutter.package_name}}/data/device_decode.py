"""`--decode device`: loader workers only read a JPEG's bytes and draw its augmentation; the device decodes the
whole batch (`torchvision.io.decode_jpeg(list, device=...)`) and resizes, crops and flips it there.

Why: decoding and resizing an ImageNet-sized JPEG costs a CPU core 10-15 ms, so a host feeds a fast GPU
only a fraction of the images it can train on. Reading the bytes and the header costs well under 1 ms.

Exact resume holds as on the CPU path: the worker draws each sample's parameters with the recipe's own
transforms (`make_params`, and the coin of a random flip) under the sample's seed (sampling.SeededSamples),
in the order the CPU path draws them, and the device applies them with the same transforms (`transform`).
So the crops and flips are the CPU path's; the pixels are too where the decoder and resize kernels are the
same (on the CPU, torchvision's libjpeg-turbo standing in for the device's decoder: equal to Pillow's;
see tests/data/test_device_decode.py). On CUDA nvJPEG's inverse DCT and colour conversion and the float
resize kernel round differently: a few levels of 255 at most in a pixel, under one level on average.

Files the device cannot decode (PNG and other formats, CMYK JPEGs) are decoded and transformed in the
worker as today and travel beside the encoded ones in the same batch. A file whose header cannot be read
or whose end-of-image marker is missing (a truncated download) raises DataError in the worker, so
data/unreadable.py skips it exactly as on the CPU path.
"""

from __future__ import annotations

import dataclasses
import io
import re
from collections.abc import Sequence
from pathlib import Path

import torch
import torchvision
from PIL import Image
from torch.utils.data import Dataset
from torchvision import tv_tensors
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.transforms import v2
from torchvision.transforms.v2._transform import _RandomApplyTransform

from .errors import DataError
from .images import DECODE_ERRORS, as_rgb, check_size, load_rgb
from .transforms import Preprocessing, augmentation

DECODES = ("auto", "cpu", "device")
JPEG_START = b"\xff\xd8\xff"
JPEG_SUFFIXES = (".jpg", ".jpeg", ".jpe", ".jfif")
_TORCHVISION = tuple(int(part) for part in torchvision.__version__.split(".")[:2])  # (0, 19)
DEVICE_MODES = ("RGB", "L")  # JPEG colour modes decode_jpeg(mode=RGB) decodes on CUDA too (not CMYK)
_ORIENTATION = 0x0112  # the EXIF tag; values 5-8 turn the image a quarter, swapping its height and width
# In entropy-coded data a 0xFF byte is a marker unless followed by 0x00 (a stuffed byte), a restart marker or fill
_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")


def jpeg_length(data: bytes) -> int | None:
    """The JPEG's own bytes, through its end-of-image marker, walked segment by segment; None if it never ends.

    Bytes may follow it (padding, the video of a phone's motion photo): Pillow ignores them, a device decoder
    may not, and the last bytes of the file are then no test of truncation.
    """
    position = 2  # after the start-of-image marker
    while position + 2 <= len(data):
        if data[position] != 0xFF:
            return None  # not a marker where one must be: damaged
        marker = data[position + 1]
        if marker == 0xD9:
            return position + 2
        if marker == 0xFF or 0xD0 <= marker <= 0xD7 or marker == 0x01:  # fill byte; markers without a length
            position += 1 if marker == 0xFF else 2
            continue
        position += 2 + int.from_bytes(data[position + 2:position + 4], "big")
        if marker == 0xDA:  # start of scan: the compressed data runs to the next real marker
            found = _NEXT_MARKER.search(data, position)
            if found is None:
                return None
            position = found.start()
    return None


@dataclasses.dataclass
class Encoded:
    """One JPEG file as the worker hands it on: its bytes, its upright (H, W), and the drawn parameters."""

    data: torch.Tensor  # (N,) uint8: the file's bytes
    size: tuple[int, int]  # (H, W) after its EXIF orientation
    params: list[dict | None] = dataclasses.field(default_factory=list)  # per transform; None: not applied


def read_encoded(path: str, short_side: int | None = None) -> Encoded | Image.Image:
    """A JPEG's bytes and upright size from its header; any other file decoded as load_rgb does (DataError if bad,
    or over the memory budget for resizing to `short_side`: data/images.py)."""
    data = Path(path).read_bytes()
    if not data.startswith(JPEG_START):
        return load_rgb(path, short_side)
    try:
        with Image.open(io.BytesIO(data)) as image:  # parses the header, decodes nothing
            (width, height), mode = image.size, image.mode
            orientation = image.getexif().get(_ORIENTATION, 1)
            check_size(image.size, short_side)
    except (DataError, *DECODE_ERRORS) as error:
        raise DataError(f"cannot read image {path}: {error}") from None
    if mode not in DEVICE_MODES:
        return load_rgb(path, short_side)
    end = jpeg_length(data)
    if end is None:  # what Pillow would find only by decoding: refused here, skipped by the caller
        raise DataError(f"cannot read image {path}: image file is truncated (no end-of-image marker)")
    if orientation in (5, 6, 7, 8):
        width, height = height, width
    return Encoded(torch.frombuffer(bytearray(data[:end]), dtype=torch.uint8), (height, width))


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


def _decode_jpegs(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Each JPEG's bytes decoded to uint8 (3, H, W) RGB on `device`: in one call where decode_jpeg takes a list
    (seen on torchvision 0.26; batched on CUDA), one call each on torchvision 0.19, which takes one tensor."""
    if _TORCHVISION >= (0, 20):
        return decode_jpeg(data, mode=ImageReadMode.RGB, device=device, apply_exif_orientation=True)
    return [decode_jpeg(one, mode=ImageReadMode.RGB, device=device, apply_exif_orientation=True) for one in data]


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
            decoded = _decode_jpegs([self.samples[i].data for i in jpegs], device)
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
    return EncodedSamples(decoded, DeviceGeometry(augmentation(recipe, prep.image_size, prep.resize_size)))


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


def can_decode_on(device: torch.device) -> bool:
    """Whether decode_jpeg decodes on `device` (the CPU stands in for it in tests; CUDA needs nvJPEG)."""
    if device.type not in ("cpu", "cuda"):
        return False
    try:
        decode_jpeg(torch.frombuffer(bytearray(_TINY_JPEG), dtype=torch.uint8), device=device)
    except RuntimeError:  # torchvision built without nvJPEG
        return False
    return True


def _tiny_jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, format="JPEG")
    return buffer.getvalue()


_TINY_JPEG = _tiny_jpeg()


def mostly_jpeg(files: Sequence[str]) -> bool:
    """True when most of `files` (a sample of the training split) are JPEGs by name."""
    return sum(str(path).lower().endswith(JPEG_SUFFIXES) for path in files) * 2 > len(files)


def choose_decode(requested: str, device: torch.device, files: Sequence[str], cached: bool) -> tuple[str, str]:
    """Where images are decoded ("cpu" | "device") and why: the flag, or auto's choice for this device and data.

    Raises DataError (bad input) for `--decode device` where the device cannot decode.
    """
    if requested == "cpu":
        return "cpu", "--decode cpu"
    if requested == "device":
        if cached:
            raise DataError("--decode device cannot be combined with --cache-images (the cache holds decoded images)")
        if not can_decode_on(device):
            raise DataError(f"--decode device: torchvision cannot decode JPEGs on {device}; use --decode cpu")
        return "device", "--decode device"
    if cached:
        return "cpu", "auto: --cache-images holds decoded images"
    if device.type != "cuda":
        return "cpu", f"auto: the CPU path on {device.type}"
    if not mostly_jpeg(files):
        return "cpu", "auto: the data is mostly not JPEG"
    if not can_decode_on(device):
        return "cpu", "auto: this torchvision cannot decode JPEGs on CUDA"
    return "device", "auto: JPEG data on CUDA (nvJPEG)"
