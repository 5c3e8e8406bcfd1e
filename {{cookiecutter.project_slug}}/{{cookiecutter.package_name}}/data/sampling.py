"""Randomness that is a pure function of (seed, epoch, sample), so a resumed run re-derives it.

Why derive instead of replay: a run killed mid-epoch k+1 (SIGKILL, power cut) leaves only the
checkpoint of epoch k. If every random draw of epoch e depends only on (seed, e), resuming at
epoch k+1 draws exactly what the uninterrupted run drew, with nothing to replay.

Three sources of randomness, three fixes:
- Shuffle order: `EpochSampler` permutes with a generator seeded from (seed, epoch). It does not
  use the DataLoader's generator, whose draws (a worker base seed at each new iterator) differ
  between a fresh loader and one with persistent workers.
- Augmentation: `SeededSamples` runs each sample's transforms under RNGs seeded from
  (seed, epoch, index). The sampler yields (index, epoch) pairs, so the epoch travels with the
  index into worker processes. This is what makes `persistent_workers=True` safe: workers keep
  their own RNG state across epochs, so reseeding anything in the main process never reaches
  them, but a per-sample seed does not care which worker, or which epoch of its life, runs it.
- Main-process draws (dropout, anything in the step): `seed_epoch` reseeds Python, NumPy and
  torch (CPU and every CUDA device) from (seed, epoch) at each epoch start.

`rng_state` / `set_rng_state` capture and restore those global states as plain values (a
weights_only checkpoint cannot hold NumPy arrays), for the record and for code that draws
outside an epoch.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler, get_worker_info

_MASK = (1 << 63) - 1


def derive_seed(seed: int, *keys: int) -> int:
    """A 63-bit seed mixing `seed` with `keys` (epoch, sample index); stable across runs and platforms."""
    value = seed & _MASK
    for key in keys:
        # splitmix64-style mixing: nearby (seed, epoch) pairs give unrelated streams
        value = (value * 6364136223846793005 + key + 1442695040888963407) & _MASK
        value ^= value >> 31
    return value


class EpochSampler(Sampler):
    """Yields (index, epoch) pairs in an order that is a function of (seed, epoch).

    With `inner` (e.g. a DistributedSampler) the indices are the inner sampler's, and
    `set_epoch` is forwarded to it; otherwise they are a seeded permutation.
    `start` skips the epoch's first samples without drawing anything, so a run resumed mid-epoch
    sees the rest of the very order an uninterrupted run sees.

    With `batch_size`, an epoch whose last batch would hold a single sample leaves that sample out:
    BatchNorm cannot train on a batch of one ("Expected more than 1 value per channel"). The sample
    dropped is the epoch's last in its own order, so it changes from epoch to epoch when shuffled.
    The cut is made on the whole epoch before `start` is applied (a mid-epoch resume drops the same
    sample), and under ddp on each rank's shard, which DistributedSampler pads to one size on every
    rank: every rank drops alike and the ranks keep the same number of batches.
    """

    def __init__(self, num_samples: int, seed: int, *, inner: Sampler | None = None, batch_size: int = 1):
        self.num_samples, self.seed, self.inner, self.batch_size = num_samples, seed, inner, batch_size
        self.epoch, self.start = 0, 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Select the epoch whose order (and sample seeds) the next iteration yields, from its `start`-th sample."""
        self.epoch, self.start = epoch, start
        if hasattr(self.inner, "set_epoch"):
            self.inner.set_epoch(epoch)

    def _kept(self, total: int) -> int:
        """How many of an epoch's `total` samples are yielded: all but a lone last one."""
        return total - 1 if self.batch_size > 1 and total % self.batch_size == 1 else total

    def __iter__(self) -> Iterator[tuple[int, int]]:
        if self.inner is not None:
            indices = list(self.inner)
        else:
            generator = torch.Generator().manual_seed(derive_seed(self.seed, self.epoch))
            indices = torch.randperm(self.num_samples, generator=generator).tolist()
        return iter([(index, self.epoch) for index in indices[self.start:self._kept(len(indices))]])

    def __len__(self) -> int:
        total = len(self.inner) if self.inner is not None else self.num_samples
        return max(self._kept(total) - self.start, 0)


def _seed_cpu_rngs(seed: int) -> None:
    """Seed the RNGs a CPU transform can draw from: Python, NumPy and torch's CPU generator."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    # Not torch.manual_seed: it also seeds every accelerator backend, about 1 ms per call.
    torch.default_generator.manual_seed(seed)


@contextlib.contextmanager
def _global_rngs_preserved() -> Iterator[None]:
    """Restore Python's, NumPy's and torch's CPU RNG states on exit."""
    saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.set_rng_state(saved[2])


class SeededSamples(Dataset):
    """A dataset whose item (index, epoch) is produced under RNGs seeded from (seed, epoch, index).

    In the main process (workers=0) the global RNG states are restored afterwards, so the
    wrapper changes nothing for dropout or for NumPy/Python draws in the training step: the
    run is the same with 0 or N workers. In a worker process nothing else uses those RNGs, so
    the costly save and restore (about 0.4 ms, mostly NumPy's state) is skipped. A plain
    integer index is passed through unseeded.
    """

    def __init__(self, dataset: Dataset, seed: int):
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: int | tuple[int, int]) -> Any:
        if not isinstance(key, tuple):
            return self.dataset[key]
        index, epoch = key
        with contextlib.nullcontext() if get_worker_info() is not None else _global_rngs_preserved():
            _seed_cpu_rngs(derive_seed(self.seed, epoch, index))
            return self.dataset[index]
