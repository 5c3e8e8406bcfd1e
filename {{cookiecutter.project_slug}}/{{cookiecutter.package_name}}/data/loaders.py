"""DataLoaders that pin host memory exactly when the device is a GPU (CUDA or XPU).

Pinned pages are what make `tensor.to(device, non_blocking=True)` asynchronous, and pinning is
wasted work elsewhere.
"""

from __future__ import annotations

import atexit
import signal
import weakref

import torch
from torch.utils.data import DataLoader

from ..devkit.backends import pins_memory
from .sampling import EpochSampler, SeededSamples

# A terminal's Ctrl-C, a closed ssh session's SIGHUP, and the SIGTERM that SLURM, systemd and GNU timeout send
# reach every process of the group, workers too. Only the main process acts on them (a save at the next step
# boundary, training/stopping.py) and then ends its workers itself: a worker killed first would end the run
# with "DataLoader worker (pid N) is killed by signal" before the save.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
_CAN_MASK = hasattr(signal, "pthread_sigmask")


def ignore_stop_signals(worker_id: int) -> None:
    """DataLoader worker_init_fn: ignore SIGINT, SIGTERM and SIGHUP, then take the signals SignalSafeLoader held."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    if _CAN_MASK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # one held meanwhile is now ignored


class SignalSafeLoader(DataLoader):
    """A DataLoader whose workers never die of a stop signal, not even one sent while they start.

    Workers are started inside `iter()`: the stop signals are held (blocked) around it, so a worker
    inherits them blocked until its worker_init_fn has set them to be ignored. The main process gets
    one held meanwhile as soon as `iter()` returns.
    """

    def __iter__(self):
        if self.num_workers == 0:
            return super().__iter__()
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS) if _CAN_MASK else None
        try:
            iterator = super().__iter__()
        finally:
            if held is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
        _WITH_WORKERS.add(iterator)
        return iterator


# The iterators whose workers may still run. multiprocessing ends a process's daemonic children at exit with
# SIGTERM and then waits for them; these workers ignore it, so a script, notebook or test process that leaves a
# loader behind would wait forever. Registered after torch's and multiprocessing's exit handlers (imported above),
# this one runs before them (atexit runs last in, first out) and ends the workers as a freed loader does.
_WITH_WORKERS: weakref.WeakSet = weakref.WeakSet()


def _end_workers_at_exit() -> None:
    """At interpreter exit: end the workers of every loader iterator that still has them."""
    for iterator in list(_WITH_WORKERS):
        shutdown = getattr(iterator, "_shutdown_workers", None)  # DataLoader's own (not public): joins them
        if shutdown is not None:
            shutdown()


atexit.register(_end_workers_at_exit)


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
    a plugin's for batches the device decodes (the gpu_decode answer).
    """
    if train:
        sampler = EpochSampler(len(dataset), seed, inner=sampler, batch_size=batch_size)
        dataset = SeededSamples(dataset, seed)
    return SignalSafeLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False,  # the training order comes from EpochSampler
        sampler=sampler,
        num_workers=workers,
        pin_memory=pins_memory(device),
        persistent_workers=workers > 0,
        prefetch_factor=PREFETCH_BATCHES if workers > 0 else None,
        drop_last=False,
        generator=torch.Generator().manual_seed(seed),
        worker_init_fn=ignore_stop_signals if workers > 0 else None,
        collate_fn=collate_fn,
    )
