"""`Classifier`: a backbone (a torchvision model without its classifier, or your own module) and a new head.

The head is one Linear layer from the backbone's F features to the classes (backbones.py: how F is
found); a frozen backbone (the fine_tuning answer's --freeze-backbone) is everything under `model.backbone`.

The head is created on the backbone's device (`module_device(backbone)`), so a backbone
built on cuda:1, or on the meta device for structure tests, gets a head beside it; the
model never calls `.to()` on itself.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import sys
from typing import Any

import torch
from torch import nn

from .backbones import BackboneError, ImportedBackbone, resolve_backbone
from .backbones_timm import TimmBackbone
from .devkit import DeviceAwareMixin, module_device
from .errors import UserError, one_line


class WeightsError(UserError):
    """Pretrained weights were asked for but are neither cached nor downloadable."""


def _backbone(backbone_name: str, pretrained_file: str | None = None) -> Any:
    """The backbone --backbone names; a timm model given --pretrained-file reads its weights from that file."""
    spec = resolve_backbone(backbone_name)
    if pretrained_file is None:
        return spec
    if not isinstance(spec, TimmBackbone):
        raise WeightsError(f"--pretrained-file is for timm models (timm/NAME); {backbone_name} is not one")
    return TimmBackbone(backbone_name, BackboneError, pretrained_file)


def weights_file(backbone_name: str, pretrained_file: str | None = None) -> str:
    """Where this backbone's pretrained weights are read from: torch hub's cache (a timm model: its own place)."""
    return _backbone(backbone_name, pretrained_file).weights_location()


def pretrained_state_dict(backbone_name: str, pretrained_file: str | None = None) -> dict[str, torch.Tensor]:
    """The backbone's pretrained weights, from their cache or downloaded into it, loaded safely (WeightsError)."""
    spec = _backbone(backbone_name, pretrained_file)
    try:
        return spec.pretrained_state()
    # Offline and not cached, no weights, a file that is no state; a pickle weights_only refuses reaches here bare
    # from timm 1.0.22 (1.0.26 makes it a RuntimeError)
    except (OSError, RuntimeError, pickle.UnpicklingError) as error:
        where = spec.weights_location()
        if isinstance(spec, TimmBackbone):
            raise WeightsError(f"pretrained {backbone_name} weights could not be loaded ({one_line(error)}); they "
                               f"are read from {where}: fetch them once online or pass --no-pretrained") from None
        folder, name = os.path.split(where)  # URLError is an OSError; a bad file is a RuntimeError
        raise WeightsError(f"pretrained {backbone_name} weights are not cached and could not be loaded ({error}); "
                           f"place {name} in {folder} or pass --no-pretrained") from None


def resolve_pretrained(backbone_name: str, requested: bool, explicit: bool,
                       pretrained_file: str | None = None) -> tuple[bool, str | None]:
    """Whether to start from ImageNet weights, and a note when the default had to fall back.

    An explicit --pretrained (or --pretrained-file) must succeed (WeightsError names the file to place); the
    project's default falls back to training from scratch where the weights cannot be had (offline, not cached).
    """
    if not requested:
        return False, None
    explicit = explicit or pretrained_file is not None
    if isinstance(resolve_backbone(backbone_name), ImportedBackbone):  # your own module: its code loads its weights
        if explicit:
            raise WeightsError(f"--pretrained loads torchvision's ImageNet weights; {backbone_name} is your own "
                               "module, which loads its own: pass --no-pretrained")
        return False, None
    folder, name = os.path.split(weights_file(backbone_name, pretrained_file))
    cached = os.path.exists(os.path.join(folder, name))
    try:
        # Unasked-for, a failed attempt is one note, not torch hub's "Downloading ..." line and progress bar too.
        quiet = contextlib.nullcontext() if explicit else contextlib.redirect_stdout(io.StringIO())
        with quiet, contextlib.redirect_stderr(sys.stderr if explicit else io.StringIO()):
            pretrained_state_dict(backbone_name, pretrained_file)  # downloads into the hub cache once, or finds it
    except WeightsError:
        if explicit:
            raise
        return False, (f"note: pretrained {backbone_name} weights are not cached ({name}) and cannot be "
                       "downloaded; training from scratch (pass --pretrained to insist)")
    return True, None if cached or explicit else f"note: downloaded {name} into {folder}"


class Classifier(DeviceAwareMixin, nn.Module):
    """A feature extractor followed by a linear head of `num_classes` logits."""

    def __init__(self, backbone: nn.Module, feature_dim: int, num_classes: int):
        super().__init__()
        self.backbone = backbone
        # Created where the backbone already is: no later .to() can be forgotten.
        self.head = nn.Linear(feature_dim, num_classes, device=module_device(backbone))
        self.backbone_frozen = False  # set where a backbone is frozen (the fine_tuning answer's plugin)

    def train(self, mode: bool = True) -> Classifier:
        """Training mode for the head; a frozen backbone stays in eval mode, so its BatchNorm statistics are kept."""
        super().train(mode)
        if mode and self.backbone_frozen:
            self.backbone.eval()
        return self

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits of shape (B, num_classes) for images of shape (B, 3, H, W)."""
        features = self.backbone(images)  # (B, F)
        return self.head(features)


def build_model(backbone_name: str, num_classes: int, *, pretrained: bool, device: torch.device,
                image_size: int | None = None, pretrained_file: str | None = None) -> Classifier:
    """Build a Classifier with every tensor created directly on `device`.

    `image_size` matters only to backbones built for one input size (ViT, MaxViT); None: their own.
    """
    state = pretrained_state_dict(backbone_name, pretrained_file) if pretrained else None
    backbone, width = resolve_backbone(backbone_name).build(device=device, image_size=image_size, state=state)
    return Classifier(backbone, width, num_classes)
