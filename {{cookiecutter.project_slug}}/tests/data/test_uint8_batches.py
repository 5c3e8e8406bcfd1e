"""uint8 in, float on the device: the training loaders yield uint8 images and the hardware handle normalises them,
to the same numbers the CPU transforms gave."""

from __future__ import annotations

import pytest
import torch

from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.data.folders import load_splits
from {{ cookiecutter.package_name }}.data.loaders import build_loader
from {{ cookiecutter.package_name }}.data.pipeline import build_loaders
from {{ cookiecutter.package_name }}.training.hardware import Hardware

CPU = torch.device("cpu")


def _cfg(tiny_data, **changes) -> TrainConfig:
    return TrainConfig(data=str(tiny_data), image_size=32, batch_size=8, workers=0, pretrained=False, **changes)


def _first_batches(loader, epoch: int = 1):
    loader.sampler.set_epoch(epoch)
    return next(iter(loader))


@pytest.mark.parametrize("cache", [False, True], ids=["files", "cached"])
def test_the_run_loaders_yield_uint8_that_the_device_normalises_to_the_cpu_transforms_numbers(tiny_data, cache):
    """Same seed, same images: uint8 from the run's loader, normalised by Hardware, equals the float transforms."""
    loaders = build_loaders(_cfg(tiny_data, cache_images=cache), CPU)
    prep = loaders.preprocessing
    hw = Hardware.create(CPU, mean=prep.mean, std=prep.std)
    raw, labels = _first_batches(loaders.train_loader)
    assert raw.dtype == torch.uint8 and raw.shape == (8, 3, 32, 32)
    train_set, _ = load_splits(tiny_data, prep)  # the float path: ToDtype and Normalize on the CPU
    floats, float_labels = _first_batches(build_loader(train_set, 8, CPU, train=True, seed=0))
    images, on_device = hw.batch(raw, labels)
    if not cache:  # cached images were resized once beforehand: the same crops of other pixels
        assert torch.equal(images, floats) and torch.equal(on_device, float_labels)
    assert images.dtype == torch.float32 and -3 < images.min() < images.max() < 3
    val_raw, _ = next(iter(loaders.val_loader))
    assert val_raw.dtype == torch.uint8


def test_the_same_seed_draws_the_same_uint8_batch(tiny_data):
    """The per-sample randomness is still a function of (seed, epoch, index)."""
    first = _first_batches(build_loaders(_cfg(tiny_data), CPU).train_loader, epoch=2)
    again = _first_batches(build_loaders(_cfg(tiny_data), CPU).train_loader, epoch=2)
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])


def test_uint8_images_without_a_normalisation_are_refused():
    """A handle made without mean and std cannot guess them: it says what is missing."""
    with pytest.raises(ValueError, match="mean and std"):
        Hardware.create(CPU).batch(torch.zeros(1, 3, 4, 4, dtype=torch.uint8), torch.zeros(1, dtype=torch.long))
