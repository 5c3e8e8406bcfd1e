"""timm's models as backbones: `--backbone timm/NAME`, the adapter beside backbones.py's torchvision one.

NAME is any of `timm.list_models()`, optionally with a pretrained tag, spelled as its Hugging Face hub
repository is (`timm/convnext_atto`, `timm/vit_tiny_patch16_224.augreg_in21k`): a `/` is neither in a
torchvision name nor in an import path. timm is the optional group `pip install -e '.[timm]'`.

The model is built by timm without its classifier (`num_classes=0`: (B, 3, H, W) -> (B, F) pooled features),
its parameters born on the run's device. Models built for one input size (ViTs, CoAtNet, MaxViT) are built
for the run's. Pretrained weights come from the Hugging Face hub cache (downloaded into it once when online),
or from the file `pretrained_file` names (timm's `pretrained_cfg_overlay`): safetensors, or torch.load with
weights_only=True, never a pickle. Their data configuration (timm.data.resolve_data_config: input size,
crop_pct, mean, std, interpolation) becomes the run's preprocessing (data/preprocessing.py).
"""

from __future__ import annotations

import difflib
import os
from typing import Any

import torch
from torch import nn

from .devkit.placement import building_on
from .errors import MissingDependencyError, UserError

PREFIX = "timm/"
INSTALL = "pip install -e '.[timm]'"


def is_timm_name(name: str) -> bool:
    """True for `timm/NAME`."""
    return name.startswith(PREFIX)


def _timm(name: str) -> Any:
    try:
        import timm
        import timm.data
    except ImportError:
        raise MissingDependencyError(f"--backbone {name} needs the timm package: {INSTALL}") from None
    return timm


class TimmBackbone:
    """A timm model without its classifier; `pretrained_file`: a weights file to load instead of the hub's."""

    weights = None  # no torchvision weights: pretrained_state() loads timm's

    def __init__(self, name: str, error: type[UserError], pretrained_file: str | None = None):
        self.name, self.model_name, self.timm = name, name.removeprefix(PREFIX), _timm(name)
        architecture = self.model_name.partition(".")[0]
        if not self.timm.is_model(architecture):
            close = difflib.get_close_matches(architecture, self.timm.list_models(), n=3, cutoff=0.5)
            raise error(f"unknown timm model {architecture!r}; "
                        f"{'closest: ' + ', '.join(PREFIX + n for n in close) if close else 'see timm.list_models()'}")
        try:
            cfg = self.timm.models.get_pretrained_cfg(self.model_name)
        except RuntimeError as tag_error:  # an unknown tag
            raise error(f"--backbone {name}: {tag_error}") from None
        self.cfg: dict = {**(cfg.to_dict() if cfg else {}), **({"file": pretrained_file} if pretrained_file else {})}

    def data_config(self) -> dict[str, Any]:
        """timm's input size, interpolation, mean, std, crop_pct and crop_mode for this model's weights."""
        return self.timm.data.resolve_data_config(pretrained_cfg=self.cfg)

    def default_image_size(self) -> int:
        """The size its pretrained weights were evaluated at."""
        return int(self.data_config()["input_size"][-1])

    def fit_image_size(self, size: int) -> int:
        """`size` for convolutional models; models built for one size take whole patches (a ViT's patch size, else
        multiples of 32: CoAtNet's and MaxViT's windows)."""
        if not self.cfg.get("fixed_input_size"):
            return size
        with building_on(torch.device("meta")):  # no memory, no values: only its patch size is read
            patch = getattr(self.timm.create_model(self.model_name, num_classes=0), "patch_embed", None)
        step = max(getattr(patch, "patch_size", None) or (32,))
        return -(-size // step) * step

    def weights_location(self) -> str:
        """Where its pretrained weights are read from: the named file, or its hub repository's cache folder."""
        if self.cfg.get("file"):
            return self.cfg["file"]
        from huggingface_hub import constants

        repo = (self.cfg.get("hf_hub_id") or self.model_name).partition(":")[0]
        return os.path.join(constants.HF_HUB_CACHE, "models--" + repo.replace("/", "--"))

    def pretrained_state(self) -> dict[str, torch.Tensor]:
        """Its pretrained weights on the CPU (OSError/RuntimeError when neither cached nor downloadable)."""
        loader = self.timm.models
        if self.cfg.get("file"):
            return loader.load_state_dict(self.cfg["file"], weights_only=True)  # safetensors by suffix, else tensors
        if not self.cfg.get("hf_hub_id"):
            raise RuntimeError(f"timm has no hub weights for {self.model_name}")
        try:
            return loader.load_state_dict_from_hf(self.cfg["hf_hub_id"], weights_only=True)
        except (ValueError, ImportError) as error:  # the hub's offline and not-found errors
            raise OSError(str(error).splitlines()[0]) from None

    def build(self, *, device: torch.device, image_size: int | None = None,
              state: dict[str, torch.Tensor] | None = None) -> tuple[nn.Module, int]:
        """The feature extractor on `device` and its width F; `state` is loaded through timm's own filter (positional
        embeddings resized, the classifier left out)."""
        kwargs: dict[str, Any] = {"num_classes": 0}
        if self.cfg.get("fixed_input_size"):
            kwargs["img_size"] = image_size or self.default_image_size()
        if state is not None:
            kwargs.update(pretrained=True, pretrained_cfg_overlay={"state_dict": state})
        with building_on(device):
            backbone = self.timm.create_model(self.model_name, **kwargs)
        if device.type == "meta":
            backbone = backbone.to(device)  # buffers timm computes from data (relative position indices)
        return backbone, int(getattr(backbone, "head_hidden_size", None) or backbone.num_features)
