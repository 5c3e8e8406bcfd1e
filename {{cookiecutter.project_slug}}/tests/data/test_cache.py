"""--cache-images: images decoded once into uint8 memory, same interface, refused over budget."""

import pytest
import torch

import train
from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.data.cache import cache_megabytes, cache_splits, check_budget
from {{ cookiecutter.package_name }}.data.folders import DataError, class_counts, load_splits
from {{ cookiecutter.package_name }}.data.loaders import build_loader
from {{ cookiecutter.package_name }}.data.pipeline import build_loaders
from {{ cookiecutter.package_name }}.data.transforms import Preprocessing


@pytest.fixture(scope="module")
def splits(tiny_data):
    """The tiny data's splits at 24 px, from files and from the cache."""
    train_set, val_set = load_splits(tiny_data, image_size=24)
    budget_mb = TrainConfig().cache_budget_mb
    augmenting = Preprocessing(24, augment="standard")  # random crops and flips, for the test that they still run
    return (train_set, val_set), cache_splits(train_set, val_set, augmenting, budget_mb=budget_mb)


def test_cache_holds_every_image_once_as_resized_uint8(splits):
    """The cache is one (N, 3, S, S) uint8 tensor per split, resized to the run's image size."""
    (train_set, val_set), (cached_train, cached_val) = splits
    assert cached_train.images.shape == (len(train_set), 3, 24, 24)
    assert cached_val.images.shape == (len(val_set), 3, 24, 24)
    assert cached_train.images.dtype == torch.uint8


def test_cached_splits_keep_classes_targets_and_class_counts(splits):
    """classes, targets and so the loss weights are those of the files' dataset."""
    (train_set, _), (cached_train, _) = splits
    assert cached_train.classes == train_set.classes
    assert cached_train.targets == train_set.targets
    assert torch.equal(class_counts(cached_train), class_counts(train_set))


def test_cached_validation_images_equal_the_decoded_files(splits):
    """The deterministic validation pipeline gives the same float tensors from the cache as from the files."""
    (_, val_set), (_, cached_val) = splits
    for index in (0, len(val_set) - 1):
        (from_files, target), (from_cache, cached_target) = val_set[index], cached_val[index]
        assert target == cached_target
        torch.testing.assert_close(from_cache, from_files)


def test_cached_training_batches_are_normalised_float_and_still_augmented(splits):
    """Training batches are float (B, 3, S, S); an augmenting recipe's random crops still differ between passes."""
    _, (cached_train, _) = splits
    torch.manual_seed(0)
    first = cached_train[0][0]
    assert first.dtype == torch.float32 and first.shape == (3, 24, 24)
    assert any(not torch.equal(first, cached_train[0][0]) for _ in range(5))
    images, targets = next(iter(build_loader(cached_train, 4, torch.device("cpu"), train=True)))
    assert images.shape == (4, 3, 24, 24) and targets.dtype == torch.long


def test_cache_over_budget_is_refused_naming_size_count_and_budget():
    """A dataset that would not fit is refused before decoding, with the numbers and the way out."""
    needed = cache_megabytes(100_000, 224)
    assert needed == 14356
    with pytest.raises(DataError, match=rf"needs {needed} MB for 100000 images at 224 px, over the budget of 2048 MB"):
        check_budget(100_000, 224, budget_mb=2048)
    check_budget(100_000, 224, budget_mb=needed)  # exactly at the budget is allowed


def test_train_with_cache_images_over_budget_exits_2_with_one_line_and_writes_nothing(tiny_data, tmp_path, capsys):
    """train.py --cache-images with too small a budget stops with exit 2 and one error line."""
    out = tmp_path / "run"
    code = train.main(["--data", str(tiny_data), "--device", "cpu", "--image-size", "32", "--cache-images",
                       "--cache-budget-mb", "0", "--out", str(out), "--parallel", "none", "--no-pretrained"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not out.exists()
    assert err == ["error: --cache-images needs 1 MB for 36 images at 32 px, over the budget of 0 MB; "
                   "drop --cache-images or raise --cache-budget-mb"]


def test_train_with_cache_images_trains_and_reports_throughput(tiny_data, tmp_path, capsys):
    """A cached run trains an epoch and reports images_per_s like an uncached one."""
    out = tmp_path / "run"
    code = train.main(["--data", str(tiny_data), "--device", "cpu", "--epochs", "1", "--batch-size", "8",
                       "--image-size", "32", "--cache-images", "--out", str(out), "--precision", "fp32",
                       "--parallel", "none", "--no-pretrained"])
    assert code == 0 and (out / "last.pt").exists()
    assert "img/s" in capsys.readouterr().out


@pytest.mark.parametrize("augment", ["standard", "none"])
def test_a_cached_run_still_augments_with_its_recipe(tiny_data, augment):
    """build_loaders with --cache-images: a training image differs from epoch to epoch under --augment standard
    (random crops and flips of the cached pixels) and not under none; validation never changes."""
    cfg = TrainConfig(data=str(tiny_data), image_size=24, batch_size=4, workers=0, pretrained=False,
                      cache_images=True, augment=augment)
    loaders = build_loaders(cfg, torch.device("cpu"))
    samples = loaders.train_loader.loader.dataset  # indexed by (index, epoch), as the sampler does
    changed = [not torch.equal(samples[(index, 0)][0], samples[(index, 1)][0]) for index in range(8)]
    assert any(changed) == (augment == "standard")
