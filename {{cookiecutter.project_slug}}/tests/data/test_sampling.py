"""Randomness derived from (seed, epoch, sample): shuffle order, augmentation and the global RNGs."""

import io
import random

import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler

from {{ cookiecutter.package_name }}.data.folders import load_splits
from {{ cookiecutter.package_name }}.data.loaders import build_loader
from {{ cookiecutter.package_name }}.data.sampling import EpochSampler, SeededSamples, derive_seed
from {{ cookiecutter.package_name }}.data.transforms import Preprocessing
from {{ cookiecutter.package_name }}.training.seeding import rng_state, seed_epoch, set_rng_state

CPU = torch.device("cpu")


def _epoch_batches(loader, epoch: int) -> list[torch.Tensor]:
    loader.sampler.set_epoch(epoch)
    return [images for images, _ in loader]  # (B, 3, H, W) each


def test_the_order_is_a_function_of_seed_and_epoch():
    """Same (seed, epoch): same order; another epoch or seed: another order; every index once."""
    sampler = EpochSampler(50, seed=3)
    sampler.set_epoch(1)
    first = list(sampler)
    sampler.set_epoch(2)
    second = list(sampler)
    sampler.set_epoch(1)
    assert list(sampler) == first and first != second
    assert sorted(index for index, _ in first) == list(range(50)) and {epoch for _, epoch in first} == {1}
    other = EpochSampler(50, seed=4)
    other.set_epoch(1)
    assert list(other) != first


def test_an_inner_distributed_sampler_chooses_the_indices_and_follows_set_epoch():
    """A DistributedSampler inside keeps its sharding; set_epoch reaches it."""
    inner = DistributedSampler(range(20), num_replicas=2, rank=1, shuffle=True, seed=0)
    sampler = EpochSampler(20, seed=0, inner=inner)
    sampler.set_epoch(5)
    assert [index for index, _ in sampler] == list(inner) and inner.epoch == 5 and len(sampler) == 10


@pytest.mark.parametrize("workers", [0, 2])
def test_a_fresh_loader_redraws_exactly_what_a_long_lived_one_drew(tiny_data, workers):
    """Epoch 2's augmented batches are the same whether the loader (and its persistent workers) saw epoch 1 or not."""
    train_set, _ = load_splits(tiny_data, image_size=Preprocessing(32, augment="standard"))  # random crops and flips
    long_lived = build_loader(train_set, 8, CPU, train=True, workers=workers, seed=1)
    _epoch_batches(long_lived, 1)
    continued = _epoch_batches(long_lived, 2)
    fresh = _epoch_batches(build_loader(train_set, 8, CPU, train=True, workers=workers, seed=1), 2)
    assert len(continued) == len(fresh) and all(torch.equal(a, b) for a, b in zip(continued, fresh))
    epoch_1_again = _epoch_batches(build_loader(train_set, 8, CPU, train=True, workers=0, seed=1), 1)
    assert not all(torch.equal(a, b) for a, b in zip(continued, epoch_1_again))  # augmentation does vary


def test_seeded_samples_leave_the_global_rngs_alone(tiny_data):
    """Drawing a sample in the main process does not consume or reseed the global RNGs (dropout's stream)."""
    train_set, _ = load_splits(tiny_data, image_size=Preprocessing(32, augment="standard"))  # random crops and flips
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    SeededSamples(train_set, seed=0)[(3, 1)]
    after = (torch.rand(1), random.random(), np.random.rand())
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    assert after == (torch.rand(1), random.random(), np.random.rand())


def test_rng_state_survives_a_weights_only_round_trip():
    """Python, NumPy and torch states saved in a checkpoint restore the same next draws."""
    seed_epoch(11, 2)
    buffer = io.BytesIO()
    torch.save({"rng": rng_state()}, buffer)
    expected = (torch.rand(3), random.random(), np.random.rand(2).tolist())
    buffer.seek(0)
    set_rng_state(torch.load(buffer, map_location="cpu", weights_only=True)["rng"])
    assert torch.equal(torch.rand(3), expected[0])
    assert (random.random(), np.random.rand(2).tolist()) == expected[1:]


def test_derived_seeds_differ_for_neighbouring_epochs_and_samples():
    """(seed, epoch) and (seed, epoch, index) give distinct 63-bit seeds."""
    seeds = {derive_seed(0, epoch, index) for epoch in range(20) for index in range(50)}
    assert len(seeds) == 1000 and all(0 <= s < 2**63 for s in seeds)
    assert derive_seed(0, 1) != derive_seed(1, 0)
