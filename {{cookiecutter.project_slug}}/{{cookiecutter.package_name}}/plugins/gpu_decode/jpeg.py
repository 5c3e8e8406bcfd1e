"""JPEG files as the loader workers hand them to the device: their bytes and upright size, read without decoding;
and the one place that decides which library decodes them there (`decoder_for`).

A file whose header cannot be read or whose end-of-image marker is missing (a truncated download) raises
DataError in the worker, so data/unreadable.py skips it exactly as on the CPU path; bytes after the marker
(padding, a phone's motion-photo video) are left out. Files the device cannot decode (PNG and other formats,
CMYK JPEGs) are decoded in the worker as on the CPU path (load_rgb).

The decoder: TorchCodec's `decode_jpeg` (libjpeg-turbo on the CPU, nvJPEG on CUDA) where it is installed
(the project's `[decode]` extra) and loads against the torch in use, else torchvision's `decode_jpeg`, which
torchvision 0.29 deprecates (a DeprecationWarning on every call) and a later release removes. Both give
Pillow's pixels on the CPU (tests/plugins/gpu_decode/test_decoders.py).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torchvision
from PIL import Image

from ...data.errors import DataError
from ...data.images import DECODE_ERRORS, check_size, load_rgb

JPEG_START = b"\xff\xd8\xff"
JPEG_SUFFIXES = (".jpg", ".jpeg", ".jpe", ".jfif")
_TORCHVISION = tuple(int(part) for part in torchvision.__version__.split(".")[:2])  # (0, 19)
DEVICE_MODES = ("RGB", "L")  # JPEG colour modes both decoders turn into RGB on CUDA too (not CMYK)
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


@dataclasses.dataclass(frozen=True)
class JpegDecoder:
    """A library's JPEG decoder: a batch of files' bytes to upright uint8 (3, H, W) RGB images on a device."""

    name: str  # the library and its version: what config.json's machine record and the start-up line say
    decode: Callable[[list[torch.Tensor], torch.device], list[torch.Tensor]]

    def decodes_on(self, device: torch.device) -> bool:
        """Whether it decodes a tiny JPEG on `device` (CUDA needs nvJPEG in this build of the library)."""
        try:
            self.decode([torch.frombuffer(bytearray(_TINY_JPEG), dtype=torch.uint8)], device)
        except (RuntimeError, OSError):  # a build without nvJPEG, or without the CUDA libraries it needs
            return False
        return True


def torchcodec_decoder() -> JpegDecoder | None:
    """TorchCodec's decode_jpeg; None where it is absent, older than its image decoders (0.16), or built for
    another torch (its C++ operators then fail to load: ImportError, OSError or RuntimeError at import)."""
    try:
        import torchcodec
        from torchcodec.decoders import decode_jpeg
    except (ImportError, OSError, RuntimeError):
        return None

    def decode(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
        # Its defaults, pinned: they differ from torchvision's (meta-pytorch/torchcodec#1560) and defaults move.
        # It always applies the EXIF orientation (there is no switch), as Pillow's exif_transpose does here.
        return decode_jpeg(data, mode="RGB", output_dtype=torch.uint8, device=device)

    return JpegDecoder(f"torchcodec {getattr(torchcodec, '__version__', '?')}", decode)


def torchvision_decoder() -> JpegDecoder | None:
    """torchvision's decode_jpeg (deprecated from 0.29, warning on each call); None once a release removes it."""
    try:
        from torchvision.io import ImageReadMode, decode_jpeg
    except ImportError:
        return None

    def decode(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
        options = {"mode": ImageReadMode.RGB, "device": device, "apply_exif_orientation": True}
        if _TORCHVISION >= (0, 20):  # takes a list (batched on CUDA); 0.19 takes one tensor
            return decode_jpeg(data, **options)
        return [decode_jpeg(one, **options) for one in data]

    hint = " (deprecated there: install the [decode] extra, TorchCodec)" if _TORCHVISION >= (0, 29) else ""
    return JpegDecoder(f"torchvision {torchvision.__version__}{hint}", decode)


LIBRARIES: tuple[Callable[[], JpegDecoder | None], ...] = (torchcodec_decoder, torchvision_decoder)  # preferred first


@functools.cache
def decoder_for(device: torch.device) -> JpegDecoder | None:
    """The decoder of JPEGs on `device`, decided once per process: the first of LIBRARIES that decodes there."""
    if device.type not in ("cpu", "cuda"):  # the CPU stands in for CUDA in tests; MPS, XPU: no decoder
        return None
    for library in LIBRARIES:
        decoder = library()
        if decoder is not None and decoder.decodes_on(device):
            return decoder
    return None


def decode_jpegs(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Each JPEG's bytes decoded to uint8 (3, H, W) RGB on `device`, by decoder_for(device), in one call."""
    decoder = decoder_for(device)
    if decoder is None:  # choose_decode refused this device before any data was read
        raise RuntimeError(f"no JPEG decoder runs on {device}")
    return decoder.decode(data, device)


def _tiny_jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, format="JPEG")
    return buffer.getvalue()


_TINY_JPEG = _tiny_jpeg()


def mostly_jpeg(files: Sequence[str]) -> bool:
    """True when most of `files` (a sample of the training split) are JPEGs by name."""
    return sum(str(path).lower().endswith(JPEG_SUFFIXES) for path in files) * 2 > len(files)


