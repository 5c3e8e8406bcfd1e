"""The run's hardware in one handle: device, precision policy, gradient scaler, memory format, the processes
training together (processes.py) and the normalisation that turns the loader's uint8 batches into
the model's float inputs on the device (decoding them there first when the loader hands over encoded images).

Defaults that use a GPU: TF32 matmuls for fp32 on CUDA, channels_last when autocasting on CUDA (the handle's
`tf32` and `channels_last` say which are on, for the start-up lines and config.json).

Decided once in train.py (and evaluate.py) and passed to the loops, so the four travel together
instead of side by side through every signature.
"""

from __future__ import annotations

import dataclasses

import torch

from ..devkit.precision import PrecisionPolicy, make_policy
from ..processes import Processes


def default_channels_last(device: torch.device, precision: str) -> bool:
    """NHWC where it pays by default: autocast (fp16/bf16) on CUDA, whose tensor-core convolutions want it."""
    return device.type == "cuda" and precision in ("fp16", "bf16")


@dataclasses.dataclass(frozen=True)
class Hardware:
    """Where and how the steps run: `device`, the autocast `policy`, its GradScaler, the memory format."""

    device: torch.device
    policy: PrecisionPolicy
    scaler: torch.amp.GradScaler
    memory_format: torch.memory_format = torch.contiguous_format
    normalization: tuple[torch.Tensor, torch.Tensor] | None = None  # (3, 1, 1) mean and std, on the device
    tf32: bool = False  # fp32 matmuls on TF32 tensor cores
    processes: Processes = dataclasses.field(default_factory=Processes)  # one, unless --parallel ddp

    @classmethod
    def create(cls, device: torch.device, precision: str = "fp32", channels_last: bool | None = False, *,
               mean: tuple[float, ...] | None = None, std: tuple[float, ...] | None = None,
               processes: Processes | None = None) -> Hardware:
        """The handle for `device` under `precision` (fp32 | fp16 | bf16), NHWC when `channels_last` (None: the
        default, default_channels_last).

        `mean` and `std` (the preprocessing's) normalise uint8 batches on the device; float batches pass as they are.

        On CUDA it also turns on cuDNN's autotuner (the loops feed fixed-size batches, so each shape's fastest
        kernels are timed once and reused) and lets fp32 matmuls use TF32 tensor cores (torch's default is full
        fp32). Neither where deterministic algorithms were asked for (torch.use_deterministic_algorithms): the
        autotuner may pick differently from run to run, and who asks for them wants the same numbers.
        """
        # TF32 keeps fp32's range with a 10-bit mantissa: ConvNeXt and ViT, mostly Linear layers, run several times
        # faster at fp32. Convolutions already use it (torch.backends.cudnn.allow_tf32 defaults to True).
        deterministic = torch.are_deterministic_algorithms_enabled()
        tf32 = device.type == "cuda" and not deterministic
        if device.type == "cuda":
            torch.backends.cudnn.benchmark = not deterministic
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        policy = make_policy(precision, device)
        if channels_last is None:
            channels_last = default_channels_last(device, precision)
        memory_format = torch.channels_last if channels_last else torch.contiguous_format
        # Made once: a tensor built from Python floats per batch would be a pageable copy, i.e. a sync.
        normalization = None if mean is None or std is None else tuple(
            torch.as_tensor(values, dtype=torch.float32, device=device).view(-1, 1, 1) for values in (mean, std))
        return cls(device, policy, policy.grad_scaler(), memory_format, normalization, tf32, processes or Processes())

    @property
    def channels_last(self) -> bool:
        """Whether the model and its inputs are NHWC."""
        return self.memory_format == torch.channels_last

    def batch(self, images, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch on the device, uint8 images made float and normalised there; non_blocking overlaps the copy
        with compute when the loader pinned it. Encoded images (a plugin's batch with `to_images(device)`, such
        as the gpu_decode answer's JPEG bytes) are decoded on the device first."""
        if not isinstance(images, torch.Tensor):
            images = images.to_images(self.device)
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
