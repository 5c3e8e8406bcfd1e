"""The data pipeline: what --data names (class folders, a labels file, your own dataset), the demo data,
preprocessing, caching, unreadable images, seeded sampling, and the loaders, behind one call (`build_loaders`).

    pipeline.py       build_loaders(cfg, device) -> Loaders: the one call train.py makes
    folders.py        --data opened one way for every tool, and divided into splits
    dataset.py        ImageDataset: the interface your own dataset implements; Decoded: its images as tensors
    listing.py        the one listing of image files (no directory links followed, hidden names skipped)
    labels_csv.py     a labels file: path,label[,split] beside a folder of images
    splits.py         the --val-split division and the record of it a run keeps
    images.py         one image read as RGB, within the memory budget
    errors.py         DataError
    preprocessing.py  which input size and normalisation a run uses, and why
    transforms.py     Preprocessing and the torchvision v2 transforms that apply it
    loaders.py        DataLoaders pinned exactly when the device is CUDA
    sampling.py       shuffle order and augmentation as functions of (seed, epoch, index)
    unreadable.py     unreadable images skipped, reported once, counted
    cache.py          --cache-images: decode once into memory
    demo.py           the built-in demo dataset
    check.py          python -m <package>.data check DATA
"""

from .dataset import Decoded, FileImages, ImageDataset
from .demo import DEMO_CLASSES, DEMO_IMAGE_SIZE, DEMO_ROOT, write_demo_dataset
from .folders import DataError, class_counts, image_folder, load_rgb, load_splits, open_data
from .loaders import build_loader
from .pipeline import Loaders, build_loaders
from .transforms import IMAGENET_MEAN, IMAGENET_STD, Preprocessing, build_transforms

__all__ = [
    "DEMO_CLASSES", "DEMO_IMAGE_SIZE", "DEMO_ROOT", "write_demo_dataset", "DataError", "class_counts", "image_folder",
    "load_rgb", "load_splits", "build_loader", "Loaders", "build_loaders", "IMAGENET_MEAN", "IMAGENET_STD",
    "Preprocessing", "build_transforms", "Decoded", "FileImages", "ImageDataset", "open_data",
]
