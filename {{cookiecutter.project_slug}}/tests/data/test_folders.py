"""Real ImageFolder files on disk, loaders that pin memory only for CUDA, clear data errors."""

import pytest
import torch
from PIL import Image

from {{ cookiecutter.package_name }}.data.demo import DEMO_CLASSES, write_demo_dataset
from {{ cookiecutter.package_name }}.data.folders import DataError, class_counts, load_splits, open_data
from {{ cookiecutter.package_name }}.data.loaders import build_loader


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


def _class_folders(root, sizes_per_class, size=28):
    """Class folders straight under `root` (no train/ or val/), `size`-px PNGs."""
    for name, count in sizes_per_class.items():
        (root / name).mkdir(parents=True)
        for i in range(count):
            Image.new("RGB", (size, size), (i * 20 % 255, 0, 0)).save(root / name / f"{i}.png")
    return root


def test_class_folders_without_train_and_val_are_split_stratified_and_seeded(tmp_path):
    """--val-split 0.2: a fifth of every class validates, the rest trains, no image in both, same split each time."""
    from {{ cookiecutter.package_name }}.data.folders import image_folder

    root = _class_folders(tmp_path / "flat", {"a": 10, "b": 5, "c": 2})
    train_set, val_set = load_splits(root, 16, val_split=0.2, seed=1)
    assert class_counts(val_set).tolist() == [2, 1, 1] and class_counts(train_set).tolist() == [8, 4, 1]
    assert not {path for path, _ in train_set.samples} & {path for path, _ in val_set.samples}
    again = image_folder(root, "val", 16, train=False, val_split=0.2, seed=1)
    assert again.samples == val_set.samples
    assert image_folder(root, "val", 16, train=False, val_split=0.2, seed=2).samples != val_set.samples


def test_the_typical_image_size_is_measured_from_the_files(tmp_path):
    """The median shorter side of a sample of the images, read from their headers."""
    from {{ cookiecutter.package_name }}.data.preprocessing import typical_image_size

    assert typical_image_size(open_data(_class_folders(tmp_path / "d", {"a": 3, "b": 3}, size=28)).whole) == 28


def test_the_image_size_follows_the_data_the_weights_or_the_demo(tmp_path):
    """From scratch on 28 px scans: 32 px (the lower bound), not 224; pretrained: the weights' own
    resize, crop and normalisation; the demo: its own 64 px; each with its reason."""
    from {{ cookiecutter.package_name }}.data.preprocessing import choose_preprocessing

    root = open_data(_class_folders(tmp_path / "scans", {"a": 2, "b": 2}, size=28)).whole  # the training images
    scratch = choose_preprocessing("resnet18", root, None, pretrained=False)
    assert scratch.image_size == 32 and "28 px" in scratch.reason
    assert choose_preprocessing("inception_v3", root, None, pretrained=False).image_size == 75
    pretrained = choose_preprocessing("resnet18", root, None, pretrained=True)
    assert (pretrained.image_size, pretrained.resize_size) == (224, 256) and "pretrained" in pretrained.reason
    assert choose_preprocessing("resnet18", None, None, pretrained=True).image_size == 64
    assert choose_preprocessing("resnet18", root, 48, pretrained=True).image_size == 48
