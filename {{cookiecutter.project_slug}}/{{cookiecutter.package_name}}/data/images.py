"""Reading one image as 8-bit RGB, and refusing those whose decoded or resized size would exhaust memory.

A file's header gives its size before any pixel is decoded: an image of more pixels than Pillow's
bomb limit (Image.MAX_IMAGE_PIXELS), or one that resizing to the run's size would make larger than
MAX_RESIZED_PIXELS (a 3 KB PNG of 1 x 1,000,000 pixels, resized to 224 px on its shorter side, is
224 x 224,000,000), is unreadable like any damaged file: skipped and counted in training and
evaluate.py, a warning in predict.py.
"""

from __future__ import annotations

import contextlib
import math
import os
import struct

import numpy as np
from PIL import Image, ImageOps

from .errors import DataError

# What Pillow raises for a file it cannot decode: OSError and ValueError for most damage, SyntaxError and
# struct.error from some format plugins, DecompressionBombError (neither of those) for a file whose
# pixel count would exhaust memory (Image.MAX_IMAGE_PIXELS).
DECODE_ERRORS = (OSError, ValueError, SyntaxError, struct.error, Image.DecompressionBombError)
# 2**26 pixels: 192 MiB as uint8 RGB, 768 MiB as float32, per image and per loader worker. A 4:1 panorama
# resized to 224 px needs 0.2 M; this refuses only aspect ratios beyond about 1300:1 at 224 px.
MAX_RESIZED_PIXELS = 2**26


def resized_pixels(size: tuple[int, int], short_side: int) -> int:
    """Pixels of an image of `size` (width, height) once its shorter side is resized to `short_side`."""
    short, long = min(size), max(size)
    return short_side * math.ceil(long * short_side / max(short, 1))


def check_size(size: tuple[int, int], short_side: int | None) -> None:
    """DataError when decoding an image of `size`, or resizing it to `short_side`, would exceed the budget."""
    width, height = size
    limit = Image.MAX_IMAGE_PIXELS
    if limit and width * height > limit:
        raise DataError(f"{width}x{height} pixels is more than the {limit} that Pillow decodes safely "
                        "(Image.MAX_IMAGE_PIXELS)")
    if short_side and resized_pixels(size, short_side) > MAX_RESIZED_PIXELS:
        raise DataError(f"{width}x{height} pixels would be {resized_pixels(size, short_side)} pixels resized to "
                        f"{short_side} px on its shorter side, more than the memory budget of "
                        f"{MAX_RESIZED_PIXELS} (aspect ratio too extreme)")


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


def to_rgb(image: Image.Image) -> Image.Image:
    """An opened image upright (its EXIF orientation applied), deep grey levels scaled to 8 bits, as RGB."""
    image = ImageOps.exif_transpose(image)  # a phone's portrait photo is stored sideways
    if image.mode.startswith(("I", "F")):  # 16- and 32-bit grey levels (I, I;16, I;16B ...), floats (F)
        image = _to_8_bit(image)
    return image.convert("RGB")


def load_rgb(path: str | os.PathLike, short_side: int | None = None) -> Image.Image:
    """Open an image file as 8-bit RGB (see to_rgb), refusing before decoding one over the memory budget (as_rgb)."""
    return as_rgb(path, short_side)


def as_rgb(item, short_side: int | None = None, name: str = "") -> Image.Image:
    """A dataset's image, given as a file path or as a PIL image, as 8-bit RGB within the memory budget.

    `short_side`: the size the image will be resized to (its shorter side), for the budget. A decode
    failure of any kind (see DECODE_ERRORS) or an image over budget becomes a DataError naming the file
    (`name`: what it calls a PIL image; a path names itself).
    """
    given = isinstance(item, Image.Image)
    try:  # a PIL image is the dataset's own: not closed here
        with contextlib.nullcontext(item) if given else Image.open(item) as image:
            check_size(image.size, short_side)  # from the header: nothing is decoded yet
            return to_rgb(image)
    except (DataError, *DECODE_ERRORS) as error:
        raise DataError(f"cannot read image {(name or 'given') if given else item}: {error}") from None
