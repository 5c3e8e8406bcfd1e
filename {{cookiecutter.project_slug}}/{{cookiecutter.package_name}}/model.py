"""`Classifier`: a torchvision backbone with its own classifier removed and a new head.

The head is created on the backbone's device (`module_device(backbone)`), so a backbone
built on cuda:1, or on the meta device for structure tests, gets a head beside it; the
model never calls `.to()` on itself.
"""

from __future__ import annotations

import os
import urllib.parse

import torch
from torch import nn
from torchvision import models

from .devices import DeviceAwareMixin, module_device
from .errors import UserError


class WeightsError(UserError):
    """Pretrained weights were asked for but are neither cached nor downloadable."""


def strip_classifier(backbone: nn.Module) -> nn.Module:
    """Replace the backbone's last Linear layer (its ImageNet classifier) with Identity."""
    last = [name for name, module in backbone.named_modules() if isinstance(module, nn.Linear)][-1]
    parent_name, _, child = last.rpartition(".")
    parent = backbone.get_submodule(parent_name) if parent_name else backbone
    setattr(parent, child, nn.Identity())
    return backbone


def feature_width(backbone_name: str, image_size: int = 64) -> int:
    """Width of the stripped backbone's features, found on the meta device (no memory, no compute)."""
    with torch.device("meta"):
        skeleton = strip_classifier(models.get_model(backbone_name, weights=None))
        features = skeleton.eval()(torch.empty(1, 3, image_size, image_size))  # (1, F)
    return features.shape[-1]


def weights_file(backbone_name: str) -> str:
    """Where torch hub keeps this backbone's default ImageNet weights."""
    weights = models.get_model_weights(backbone_name).DEFAULT
    name = os.path.basename(urllib.parse.urlparse(weights.url).path)
    return os.path.join(torch.hub.get_dir(), "checkpoints", name)


def pretrained_state_dict(backbone_name: str) -> dict[str, torch.Tensor]:
    """The default ImageNet weights, from the hub cache or downloaded into it, loaded safely."""
    weights = models.get_model_weights(backbone_name).DEFAULT
    try:
        return weights.get_state_dict(progress=True, check_hash=True, weights_only=True, map_location="cpu")
    except (OSError, RuntimeError) as error:  # URLError is an OSError; a bad file is a RuntimeError
        raise WeightsError(
            f"pretrained {backbone_name} weights are not cached and could not be loaded ({error}); "
            f"place {os.path.basename(weights_file(backbone_name))} in {os.path.dirname(weights_file(backbone_name))} "
            "or pass --no-pretrained"
        ) from None


class Classifier(DeviceAwareMixin, nn.Module):
    """A feature extractor followed by a linear head of `num_classes` logits."""

    def __init__(self, backbone: nn.Module, feature_dim: int, num_classes: int, dropout: float = 0.0):
        super().__init__()
        self.backbone = backbone
        self.dropout = nn.Dropout(dropout)
        # Created where the backbone already is: no later .to() can be forgotten.
        self.head = nn.Linear(feature_dim, num_classes, device=module_device(backbone))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits of shape (B, num_classes) for images of shape (B, 3, H, W)."""
        features = self.backbone(images)  # (B, F)
        return self.head(self.dropout(features))


def build_model(backbone_name: str, num_classes: int, *, pretrained: bool,
                device: torch.device) -> Classifier:
    """Build a Classifier with every tensor created directly on `device`."""
    state = pretrained_state_dict(backbone_name) if pretrained else None
    with device:  # parameters are allocated on the device, not built on cpu then copied
        backbone = models.get_model(backbone_name, weights=None)
        if state is not None:
            backbone.load_state_dict(state)
        backbone = strip_classifier(backbone)
        return Classifier(backbone, feature_width(backbone_name), num_classes)
