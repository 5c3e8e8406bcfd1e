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

import importlib

# Each name and the module that defines it, imported when first read (PEP 562's module __getattr__): a module
# that needs one light piece (demo.py's DEMO_IMAGE_SIZE, errors.py) does not load torch with the rest.
_HOME = {
    "Decoded": "dataset", "FileImages": "dataset", "ImageDataset": "dataset", "DEMO_CLASSES": "demo",
    "DEMO_IMAGE_SIZE": "demo", "DEMO_ROOT": "demo", "write_demo_dataset": "demo", "DataError": "errors",
    "class_counts": "folders", "image_folder": "folders", "load_rgb": "folders", "load_splits": "folders",
    "open_data": "folders", "build_loader": "loaders", "Loaders": "pipeline", "build_loaders": "pipeline",
    "IMAGENET_MEAN": "transforms", "IMAGENET_STD": "transforms", "Preprocessing": "transforms",
    "build_transforms": "transforms",
}

__all__ = [
    "DEMO_CLASSES", "DEMO_IMAGE_SIZE", "DEMO_ROOT", "write_demo_dataset", "DataError", "class_counts", "image_folder",
    "load_rgb", "load_splits", "build_loader", "Loaders", "build_loaders", "IMAGENET_MEAN", "IMAGENET_STD",
    "Preprocessing", "build_transforms", "Decoded", "FileImages", "ImageDataset", "open_data",
]


def __getattr__(name: str):
    """`data.image_folder` and the other names of __all__, imported from their module when first read."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value  # the next read is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
