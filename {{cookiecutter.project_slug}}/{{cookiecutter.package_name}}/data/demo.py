"""The built-in demo dataset: coloured shapes drawn with PIL, written once as a real ImageFolder tree.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

from PIL import Image, ImageDraw

DEMO_ROOT = Path(__file__).resolve().parents[2] / "data" / "demo"  # <project>/data/demo, beside the package
DEMO_IMAGE_SIZE = 64
DEMO_CLASSES = ("circle", "square", "triangle", "cross")
DEMO_HUES = ((1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 0))  # red, green, blue, yellow


def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, box: tuple, color: tuple) -> None:
    """Draw one of the demo classes' shapes filling `box`."""
    x0, y0, x1, y1 = box
    if shape == "circle":
        draw.ellipse(box, fill=color)
    elif shape == "square":
        draw.rectangle(box, fill=color)
    elif shape == "triangle":
        draw.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=color)
    else:
        w = (x1 - x0) / 3
        draw.rectangle((x0 + w, y0, x1 - w, y1), fill=color)
        draw.rectangle((x0, y0 + w, x1, y1 - w), fill=color)


def _demo_image(shape_index: int, image_size: int, rng: random.Random) -> Image.Image:
    """A noisy background with one shape whose hue leans towards its class's colour."""
    background = tuple(rng.randrange(0, 90) for _ in range(3))
    image = Image.new("RGB", (image_size, image_size), background)
    size = rng.uniform(0.45, 0.8) * image_size
    x0, y0 = rng.uniform(0, image_size - size), rng.uniform(0, image_size - size)
    # The class's hue is a strong hint and the shape a second one: learnable from scratch in a
    # few CPU epochs, yet noisy enough that accuracy is not trivially 1.0.
    color = [rng.randrange(190, 256) if high else rng.randrange(40, 150) for high in DEMO_HUES[shape_index]]
    _draw_shape(ImageDraw.Draw(image), DEMO_CLASSES[shape_index], (x0, y0, x0 + size, y0 + size), tuple(color))
    noise = Image.frombytes("L", (image_size, image_size), rng.randbytes(image_size * image_size)).convert("RGB")
    return Image.blend(image, noise, 0.15)


def write_demo_dataset(root: Path, *, train_per_class: int = 240, val_per_class: int = 60,
                       image_size: int = DEMO_IMAGE_SIZE, seed: int = 0) -> Path:
    """Write the synthetic shapes dataset as PNGs in ImageFolder layout, atomically.

    The tree is built in a temporary sibling folder and renamed into place, so an
    interrupted first run never leaves a half-written dataset behind.
    """
    root = Path(root)
    if (root / "train").is_dir() and (root / "val").is_dir():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".demo-", dir=root.parent))
    try:
        for split, per_class, offset in (("train", train_per_class, 0), ("val", val_per_class, 1)):
            rng = random.Random(seed * 2 + offset)
            for index, name in enumerate(DEMO_CLASSES):
                folder = staging / split / name
                folder.mkdir(parents=True)
                for i in range(per_class):
                    _demo_image(index, image_size, rng).save(folder / f"{i:04d}.png")
        os.replace(staging, root)
    except OSError:
        if not (root / "train").is_dir():  # otherwise another process won the race
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return root
