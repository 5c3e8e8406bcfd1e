"""The run's hardware in one handle: device, precision policy, gradient scaler, memory format and the
normalisation that turns the loader's uint8 batches into the model's float inputs on the device.

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
    normalization: tuple[torch.Tensor, torch.Tensor] | None = None  # (3, 1, 1) mean and std, on the device

    @classmethod
    def create(cls, device: torch.device, precision: str = "fp32", channels_last: bool = False, *,
               mean: tuple[float, ...] | None = None, std: tuple[float, ...] | None = None) -> Hardware:
        """The handle for `device` under `precision` (fp32 | fp16 | bf16), NHWC when `channels_last`.

        `mean` and `std` (the preprocessing's) normalise uint8 batches on the device; float batches pass as they are.

        On CUDA it also turns on cuDNN's autotuner: the loops feed fixed-size batches, so each shape's
        fastest kernels are timed once and reused. Not where deterministic algorithms were asked for
        (torch.use_deterministic_algorithms): the autotuner may pick differently from run to run.
        """
        if device.type == "cuda":
            torch.backends.cudnn.benchmark = not torch.are_deterministic_algorithms_enabled()
        policy = make_policy(precision, device)
        memory_format = torch.channels_last if channels_last else torch.contiguous_format
        # Made once: a tensor built from Python floats per batch would be a pageable copy, i.e. a sync.
        normalization = None if mean is None or std is None else tuple(
            torch.as_tensor(values, dtype=torch.float32, device=device).view(-1, 1, 1) for values in (mean, std))
        return cls(device, policy, policy.grad_scaler(), memory_format, normalization)

    def batch(self, images: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch on the device, uint8 images made float and normalised there; non_blocking overlaps the copy
        with compute when the loader pinned it."""
        images = images.to(self.device, non_blocking=True, memory_format=self.memory_format)  # (B, 3, H, W)
        if images.dtype == torch.uint8:
            images = self.to_float(images)
        return images, targets.to(self.device, non_blocking=True)  # (B,)

    def to_float(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 images (B, 3, H, W) as normalised float32, the same operations as torchvision's ToDtype(scale=True)
        then Normalize, so the numbers equal the CPU transforms' bit for bit."""
        if self.normalization is None:
            raise ValueError("uint8 batches need the preprocessing's mean and std: Hardware.create(..., mean=, std=)")
        mean, std = self.normalization
        return images.to(torch.float32).mul_(1.0 / 255).sub_(mean).div_(std)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The precision policy's autocast (a no-op under fp32)."""
        return self.policy.autocast()
