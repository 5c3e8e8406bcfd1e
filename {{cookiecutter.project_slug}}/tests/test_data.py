"""Real ImageFolder files on disk, loaders that pin memory only for CUDA, clear data errors."""

import pytest
import torch
from PIL import Image

from {{ cookiecutter.package_name }}.data import (
    DEMO_CLASSES,
    DataError,
    build_loader,
    class_counts,
    load_splits,
    write_demo_dataset,
)


def test_demo_dataset_is_real_png_files_in_imagefolder_layout(tiny_data):
    """The demo data is PNG files under train/<class>/ and val/<class>/ for every class."""
    for split, per_class in (("train", 6), ("val", 3)):
        for name in DEMO_CLASSES:
            files = sorted((tiny_data / split / name).glob("*.png"))
            assert len(files) == per_class
            assert Image.open(files[0]).size == (32, 32)


def test_demo_dataset_is_reproducible(tmp_path):
    """The same seed writes byte-identical images."""
    a = write_demo_dataset(tmp_path / "a", train_per_class=2, val_per_class=1, image_size=16, seed=3)
    b = write_demo_dataset(tmp_path / "b", train_per_class=2, val_per_class=1, image_size=16, seed=3)
    assert (a / "train/square/0001.png").read_bytes() == (b / "train/square/0001.png").read_bytes()


def test_batches_have_the_requested_shape_and_counts(tiny_data):
    """Loaders yield float (B, 3, H, W) images and long targets; class counts match the files."""
    train_set, _ = load_splits(tiny_data, image_size=24)
    images, targets = next(iter(build_loader(train_set, 4, torch.device("cpu"), train=True)))
    assert images.shape == (4, 3, 24, 24) and images.dtype == torch.float32 and targets.dtype == torch.long
    assert class_counts(train_set).tolist() == [6.0] * len(DEMO_CLASSES)


@pytest.mark.parametrize("device, pinned", [("cpu", False), ("meta", False), ("cuda:0", True)])
def test_memory_is_pinned_exactly_when_the_device_is_cuda(tiny_data, device, pinned):
    """pin_memory follows the device type (decided from the argument, no GPU needed to check)."""
    train_set, _ = load_splits(tiny_data, image_size=16)
    assert build_loader(train_set, 4, torch.device(device), train=True).pin_memory is pinned


def test_missing_split_is_a_data_error(tmp_path):
    """A root without val/ is refused with a message naming the expected layout."""
    (tmp_path / "train" / "a").mkdir(parents=True)
    with pytest.raises(DataError, match="val"):
        load_splits(tmp_path, 16)


def test_empty_class_folders_are_a_data_error(tmp_path):
    """train/ and val/ with class folders but no images are refused."""
    for split in ("train", "val"):
        (tmp_path / split / "a").mkdir(parents=True)
    with pytest.raises(DataError):
        load_splits(tmp_path, 16)


def test_corrupt_image_is_a_data_error_naming_the_file(tiny_data, tmp_path):
    """A file that is not an image fails with its path, not a PIL traceback."""
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(tiny_data, root)
    bad = root / "train" / "circle" / "0000.png"
    bad.write_bytes(b"not a png")
    train_set, _ = load_splits(root, 16)
    with pytest.raises(DataError, match="0000.png"):
        train_set[0]
