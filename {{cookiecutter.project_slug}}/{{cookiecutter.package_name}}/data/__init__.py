"""The data pipeline: ImageFolder splits on disk, the demo data, preprocessing, caching, unreadable images,
seeded sampling, and the loaders, behind one call (`build_loaders`).

    pipeline.py       build_loaders(cfg, device) -> Loaders: the one call train.py makes
    folders.py        train/ and val/ (or a stratified split of class folders), DataError
    preprocessing.py  which input size and normalisation a run uses, and why
    transforms.py     Preprocessing and the torchvision v2 transforms that apply it
    loaders.py        DataLoaders pinned exactly when the device is CUDA
    device_decode.py  --decode device: workers read JPEG bytes, the device decodes, resizes, crops and flips
    sampling.py       shuffle order and augmentation as functions of (seed, epoch, index)
    unreadable.py     unreadable images skipped, reported once, counted
    cache.py          --cache-images: decode once into memory
    demo.py           the built-in demo dataset
    check.py          python -m <package>.data check DATA
"""

from .demo import DEMO_CLASSES, DEMO_IMAGE_SIZE, DEMO_ROOT, write_demo_dataset
from .folders import DataError, class_counts, image_folder, load_rgb, load_splits
from .loaders import build_loader
from .pipeline import Loaders, build_loaders
from .transforms import IMAGENET_MEAN, IMAGENET_STD, Preprocessing, build_transforms

__all__ = [
    "DEMO_CLASSES", "DEMO_IMAGE_SIZE", "DEMO_ROOT", "write_demo_dataset", "DataError", "class_counts", "image_folder",
    "load_rgb", "load_splits", "build_loader", "Loaders", "build_loaders", "IMAGENET_MEAN", "IMAGENET_STD",
    "Preprocessing", "build_transforms",
]
