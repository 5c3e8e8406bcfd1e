"""ImageNet-sized JPEGs from real photos, for the benchmarks that measure what a default run decodes.

    python benchmarks/photo_jpegs.py /tmp/photos --images 400

Writes an ImageFolder (train/ and val/, 4 classes) of 500x375 and 375x500 JPEGs (ImageNet's typical
sizes), each a random crop of a real photograph, resized and re-encoded at quality 75-95. The photos are
the colour photographs scikit-image ships in skimage.data (pip install scikit-image, a benchmark-only
dependency; not one of the project's), or those in `--photos DIR`.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from PIL import Image

SKIMAGE_PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png",
                  "motorcycle_right.png", "hubble_deep_field.jpg", "retina.jpg")
SIZES = ((500, 375), (375, 500), (500, 333), (500, 375))  # (W, H): ImageNet's landscape, portrait, 3:2


def photo_files(folder: str | None = None) -> list[Path]:
    """The source photographs: `folder`'s images, else skimage.data's colour photos (ImportError without it)."""
    if folder:
        return sorted(path for path in Path(folder).iterdir() if path.suffix.lower() in (".png", ".jpg", ".jpeg"))
    import skimage.data  # noqa: PLC0415 (benchmark-only dependency)

    root = Path(skimage.data.__file__).parent
    return [root / name for name in SKIMAGE_PHOTOS if (root / name).is_file()]


def write_photo_jpegs(root: Path, images: int = 400, *, photos: str | None = None, seed: int = 0,
                      val_fraction: float = 0.2) -> Path:
    """`images` JPEGs under root/train and root/val (4 classes), random crops of real photos; returns `root`."""
    rng = random.Random(seed)
    sources = [Image.open(path).convert("RGB") for path in photo_files(photos)]
    for i in range(images):
        split = "val" if i % round(1 / val_fraction) == 0 else "train"
        folder = root / split / f"class{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        photo = rng.choice(sources)
        width, height = rng.choice(SIZES)
        scale = rng.uniform(0.5, 1.0)  # the crop covers this much of the photo's fitting box
        fit = min(photo.width / width, photo.height / height)
        crop_w, crop_h = max(16, int(width * fit * scale)), max(16, int(height * fit * scale))
        left, top = rng.randint(0, photo.width - crop_w), rng.randint(0, photo.height - crop_h)
        image = photo.crop((left, top, left + crop_w, top + crop_h)).resize((width, height), Image.BICUBIC)
        image.save(folder / f"{i:05d}.jpg", quality=rng.randint(75, 95))
    return root


def main(argv: list[str] | None = None) -> None:
    """Write the folder and say where."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("root")
    p.add_argument("--images", type=int, default=400)
    p.add_argument("--photos", default=None, help="a folder of photographs (default: skimage.data's)")
    args = p.parse_args(argv)
    print(write_photo_jpegs(Path(args.root), args.images, photos=args.photos))


if __name__ == "__main__":
    main()
