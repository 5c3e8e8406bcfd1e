"""Seeding the global RNGs, per run and per epoch, and capturing their states as plain values.

The per-sample randomness (shuffle order, augmentation) is data/sampling.py's; this module
seeds what the main process draws (dropout, anything in the step) from (seed, epoch).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from ..data.sampling import derive_seed


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global RNGs (torch.manual_seed covers every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def seed_epoch(seed: int, epoch: int) -> None:
    """Reseed the global RNGs for `epoch`, so that epoch's main-process draws depend on (seed, epoch) only."""
    seed_everything(derive_seed(seed, epoch))


def rng_state() -> dict[str, Any]:
    """Python, NumPy, torch CPU and every initialised CUDA device's RNG state, as checkpoint-safe values."""
    numpy_state = np.random.get_state(legacy=False)
    return {
        "python": random.getstate(),  # (version, tuple of ints, gauss): plain values
        "numpy": {"key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
                  "pos": int(numpy_state["state"]["pos"]),
                  "has_gauss": int(numpy_state["has_gauss"]), "gauss": float(numpy_state["gauss"])},
        "torch": torch.get_rng_state(),
        # Only when CUDA is already in use: querying it otherwise would create a context on every GPU.
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `rng_state` captured, from tensors on any device; CUDA states for absent devices are skipped."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy = state["numpy"]
    np.random.set_state({"bit_generator": "MT19937",
                         "state": {"key": numpy["key"].cpu().numpy().astype(np.uint32), "pos": numpy["pos"]},
                         "has_gauss": numpy["has_gauss"], "gauss": numpy["gauss"]})
    torch.set_rng_state(state["torch"].cpu())
    for index, cuda_state in enumerate(state["cuda"][: torch.cuda.device_count()]):  # device_count: 0 without CUDA
        torch.cuda.set_rng_state(cuda_state.cpu(), index)
