"""The run's hardware in one handle: device, precision policy, gradient scaler and memory format.

Decided once in train.py (and evaluate.py) and passed to the loops, so the four travel together
instead of side by side through every signature.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch

from ..devkit.precision import PrecisionPolicy, make_policy


@dataclasses.dataclass(frozen=True)
class Hardware:
    """Where and how the steps run: `device`, the autocast `policy`, its GradScaler, the memory format."""

    device: torch.device
    policy: PrecisionPolicy
    scaler: torch.amp.GradScaler
    memory_format: torch.memory_format = torch.contiguous_format

    @classmethod
    def create(cls, device: torch.device, precision: str = "fp32", channels_last: bool = False) -> Hardware:
        """The handle for `device` under `precision` (fp32 | fp16 | bf16), NHWC when `channels_last`.

        On CUDA it also turns on cuDNN's autotuner: the loops feed fixed-size batches, so each shape's
        fastest kernels are timed once and reused. Not where deterministic algorithms were asked for
        (torch.use_deterministic_algorithms): the autotuner may pick differently from run to run.
        """
        if device.type == "cuda":
            torch.backends.cudnn.benchmark = not torch.are_deterministic_algorithms_enabled()
        policy = make_policy(precision, device)
        memory_format = torch.channels_last if channels_last else torch.contiguous_format
        return cls(device, policy, policy.grad_scaler(), memory_format)

    def batch(self, images: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch on the device; non_blocking overlaps the copy with compute when the loader pinned it."""
        images = images.to(self.device, non_blocking=True, memory_format=self.memory_format)  # (B, 3, H, W)
        return images, targets.to(self.device, non_blocking=True)  # (B,)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The precision policy's autocast (a no-op under fp32)."""
        return self.policy.autocast()
