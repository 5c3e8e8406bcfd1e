"""DataLoaders that pin host memory exactly when the device is a GPU (CUDA or XPU).

Pinned pages are what make `tensor.to(device, non_blocking=True)` asynchronous, and pinning is
wasted work elsewhere.
"""

from __future__ import annotations

import signal

import torch
from torch.utils.data import DataLoader

from ..devkit.backends import pins_memory
from .sampling import EpochSampler, SeededSamples


def ignore_sigint_in_worker(worker_id: int) -> None:
    """DataLoader worker_init_fn: a terminal's Ctrl-C reaches the workers too; only the main process acts on it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# Per worker. With a worker per core, 2 ride out a slow image without idling the device; more only multiply the
# pinned memory and /dev/shm the batches in flight take (workers x prefetch of them: a uint8 batch of 256 images
# at 224 px is 38 MB, pinned as 64 MB), and a container's small /dev/shm ends the workers with a bus error.
PREFETCH_BATCHES = 2


def build_loader(dataset, batch_size: int, device: torch.device, *, train: bool,
                 workers: int = 0, seed: int = 0, sampler=None, collate_fn=None) -> DataLoader:
    """A DataLoader that pins memory iff the device is a GPU and keeps workers alive across epochs.

    Each worker keeps PREFETCH_BATCHES batches ready ahead of the step that needs them.

    For training, shuffle order and augmentation are functions of (seed, epoch, index), so a
    resumed run redraws exactly what an uninterrupted one drew (see sampling.py); call
    `loader.sampler.set_epoch(epoch)` before each epoch. A given `sampler` (e.g. a
    DistributedSampler) still chooses the indices. `collate_fn`: None for torch's default (stacked tensors);
    data/device_decode.CollateEncoded for batches the device decodes.
    """
    if train:
        sampler = EpochSampler(len(dataset), seed, shuffle=True, inner=sampler, batch_size=batch_size)
        dataset = SeededSamples(dataset, seed)
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False,  # the training order comes from EpochSampler
        sampler=sampler,
        num_workers=workers,
        pin_memory=pins_memory(device),
        persistent_workers=workers > 0,
        prefetch_factor=PREFETCH_BATCHES if workers > 0 else None,
        drop_last=False,
        generator=generator,
        worker_init_fn=ignore_sigint_in_worker if workers > 0 else None,
        collate_fn=collate_fn,
    )
