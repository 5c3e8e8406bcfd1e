"""The one place that knows backbones: a torchvision name, a timm model or your own module's import path.

`--backbone` takes
- a torchvision classification model name (`resnet18`, `vit_b_16`, ...): built without its ImageNet
  classifier, with its ImageNet weights (--pretrained) and the input sizes its architecture takes; or
- an import path `package.module:ClassOrFactory` (like hydra's `_target_`): your own `nn.Module`, called
  with no arguments, mapping (B, 3, H, W) images to (B, F) features (no classifier: the project adds the
  head). F is measured by one forward pass of a (1, 3, S, S) image on its device, and must equal its
  `num_features` / `out_features` if it declares one (timm's convention). Its parameters are allocated on
  the run's device while it is built (`building_on(device)`): create them without `device=`. Its tensors
  must be float32 parameters or registered buffers (a plain tensor attribute is neither saved nor moved).
  A frozen backbone (--freeze-backbone) is all of it; --pretrained is for torchvision names. Checkpoints
  record the path, which evaluate.py, predict.py, export.py and --resume import only when told (--allow-import); or
- `timm/NAME`, any model of timm (the optional group `.[timm]`), adapted in backbones_timm.py.

Every other module asks `resolve_backbone(name)` (or the functions below). torchvision's models differ in
what matters here: the classifier (`fc`, `classifier[-1]`, `heads.head`, SqueezeNet's 1x1 convolution) is
found as the last layer with one output per ImageNet class and replaced with Identity; GoogLeNet's and
Inception's auxiliary heads are dropped; ViT and MaxViT are built for one input size; RegNet computes its
widths with tensor arithmetic, which has no values on the meta device.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import os
import urllib.parse
from collections.abc import Callable

import torch
from torch import nn
from torchvision import models
from torchvision.models import vision_transformer
from torchvision.models._api import WeightsEnum

from . import backbones_timm
from .devkit.placement import building_on
from .errors import UserError


class BackboneError(UserError):
    """--backbone is neither a torchvision model nor an importable module, or cannot take the input size."""


@functools.cache
def backbone_names() -> tuple[str, ...]:
    """Every torchvision classification model name (the accepted names of --backbone besides import paths)."""
    return tuple(models.list_models(module=models))


def is_import_path(name: str) -> bool:
    """True for `package.module:ClassOrFactory` (your own module), False for a torchvision name."""
    return ":" in name


class TorchvisionBackbone:
    """A torchvision classification model, built without its ImageNet classifier."""

    def __init__(self, name: str):
        self.name = name
        self.weights: WeightsEnum = models.get_model_weights(name).DEFAULT

    def default_image_size(self) -> int:
        """The size its default weights were evaluated at (224 for most, 299 for inception_v3)."""
        return self.weights.transforms().crop_size[0]

    def weights_location(self) -> str:
        """Where torch hub keeps its default ImageNet weights."""
        name = os.path.basename(urllib.parse.urlparse(self.weights.url).path)
        return os.path.join(torch.hub.get_dir(), "checkpoints", name)

    def pretrained_state(self) -> dict[str, torch.Tensor]:
        """Its default ImageNet weights on the CPU, from the hub cache or downloaded into it, loaded safely
        (OSError/RuntimeError when neither cached nor downloadable)."""
        return self.weights.get_state_dict(progress=True, check_hash=True, weights_only=True, map_location="cpu")

    def fit_image_size(self, size: int) -> int:
        """The smallest input size at least `size` that its architecture accepts."""
        name = self.name
        if name.startswith("vit_"):  # whole patches: vit_b_16 takes multiples of 16
            patch = int(name.rsplit("_", 1)[1])
            return -(-size // patch) * patch
        if name.startswith("maxvit_"):  # 7x7 partitions at every stage: multiples of 32 * 7
            return -(-size // 224) * 224
        if name.startswith("swin"):  # windows are padded: any size works; meta's min_size is the weights' size
            return size
        return max(size, *self.weights.meta["min_size"])  # the smallest torchvision documents

    def build(self, *, device: torch.device, image_size: int | None = None,
              state: dict[str, torch.Tensor] | None = None) -> tuple[nn.Module, int]:
        """The feature extractor on `device` ((B, 3, H, W) -> (B, F)) and F; `state`: its ImageNet weights, if given."""
        name = self.name
        num_outputs = len(self.weights.meta["categories"])
        with building_on(device):
            backbone = models.get_model(name, weights=None, **builder_kwargs(self, image_size, state is not None))
        if device.type == "meta":
            backbone = backbone.to(device)  # the few buffers derived from index arithmetic (position tables)
        if state is not None:
            if name.startswith("vit_"):  # positional embeddings resized to this input size, as torchvision's refs do
                state = vision_transformer.interpolate_embeddings(backbone.image_size, backbone.patch_size, state)
            backbone.load_state_dict({key: value for key, value in state.items() if not key.lower().startswith("aux")})
        return backbone, strip_classifier(backbone, num_outputs)


class ImportedBackbone:
    """Your own nn.Module, named by an import path and called with no arguments (module docstring: the rules)."""

    weights = None  # no torchvision ImageNet weights: the module loads its own

    def __init__(self, name: str, factory: Callable[[], nn.Module]):
        self.name, self.factory = name, factory

    def default_image_size(self) -> None:
        """None: any input size (the data's or the demo's is used)."""

    def fit_image_size(self, size: int) -> int:
        """`size` itself: the project does not know your architecture's constraints."""
        return size

    def weights_location(self) -> str:
        """None to name: your module loads its own weights (BackboneError, as default_weights says)."""
        raise _no_weights(self.name)

    def pretrained_state(self) -> dict[str, torch.Tensor]:
        """None to give: your module loads its own weights (BackboneError, as default_weights says)."""
        raise _no_weights(self.name)

    def build(self, *, device: torch.device, image_size: int | None = None,
              state: dict[str, torch.Tensor] | None = None) -> tuple[nn.Module, int]:
        """Call the factory with its tensors born on `device`, check them, and measure the feature width.

        Built as for training, on the run's device, whatever the caller: a checkpoint's own module is never
        pre-built on meta (its __init__ may read values, or its factory hand out one shared instance).
        `state` is never given: build_model asks pretrained_state first, which refuses your own module.
        """
        try:
            with building_on(device):
                backbone = self.factory()
        except (Exception, SystemExit) as error:  # the user's code: a missing argument, its own checks
            raise BackboneError(f"--backbone {self.name}: calling it with no arguments failed "
                                f"({type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]})") from None
        if not isinstance(backbone, nn.Module):
            raise BackboneError(f"--backbone {self.name} returned a {type(backbone).__name__}, not an nn.Module")
        if device.type == "meta":  # asked for on meta (the device suite): tensors made from data are on the CPU
            backbone = backbone.to(device)
        check_own_tensors(backbone, device, self.name)
        return backbone, feature_width(backbone, device, image_size or 224, self.name)


def check_own_tensors(backbone: nn.Module, device: torch.device, name: str) -> None:
    """Your module's tensors: born on `device`, float32, and all registered (what checkpoints save, .to() moves)."""
    for key, tensor in [*backbone.named_parameters(), *backbone.named_buffers()]:
        if tensor.device.type != device.type or (device.index is not None and tensor.device != device):
            raise BackboneError(f"--backbone {name}: {key} was created on {tensor.device}, not {device}; "
                                "create tensors without device= so they are born where the run builds the model")
        if tensor.is_floating_point() and tensor.dtype != torch.float32:
            raise BackboneError(f"--backbone {name}: {key} is {tensor.dtype}; build it in float32 (--precision "
                                "chooses what the run computes in)")
    for path, module in backbone.named_modules():
        plain = next((attribute for attribute, value in vars(module).items() if isinstance(value, torch.Tensor)), None)
        if plain is not None:  # neither saved in checkpoints nor moved by .to(): a second answer after every load
            where = f"{path}.{plain}" if path else plain
            raise BackboneError(f"--backbone {name}: {where} is a plain tensor attribute; checkpoints and exports "
                                "do not hold it: make it an nn.Parameter or register_buffer() it")


def feature_width(backbone: nn.Module, device: torch.device, size: int, name: str) -> int:
    """F: one no-grad forward's (1, F) output, which the module's `num_features` / `out_features`, if it says, must
    equal (timm's convention; a wrong one would fail in the first step, after the run folder was written)."""
    was_training = backbone.training
    with torch.no_grad():  # eval mode: BatchNorm statistics and dropout untouched
        try:
            features = backbone.eval()(torch.zeros(1, 3, size, size, device=device))
        except Exception as error:  # the user's forward: a shape it cannot take, its own asserts
            raise BackboneError(f"--backbone {name}: a forward pass of one {size} px image failed "
                                f"({type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]})") from None
    backbone.train(was_training)
    if not isinstance(features, torch.Tensor) or features.dim() != 2 or features.shape[1] < 1:
        shape = tuple(features.shape) if isinstance(features, torch.Tensor) else type(features).__name__
        raise BackboneError(f"--backbone {name} must map (B, 3, H, W) images to (B, F) features, F >= 1, "
                            f"but gave {shape} for one {size} px image (end it with pooling and flatten)")
    for attribute in ("num_features", "out_features"):
        declared = getattr(backbone, attribute, None)
        if declared is not None and declared != features.shape[1]:
            raise BackboneError(f"--backbone {name}: its {attribute} is {declared!r}, but it gives "
                                f"{features.shape[1]} features per image")
    return int(features.shape[1])


def _import_factory(path: str) -> Callable[[], nn.Module]:
    """The class or function an import path `package.module:Name` names; BackboneError (one line) if it cannot."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise BackboneError(f"--backbone {path!r}: an import path is package.module:ClassOrFactory")
    try:
        target = importlib.import_module(module_name)
    except Exception as error:  # ImportError, or the module's own code failing: either way the user's to fix
        reason = (str(error).splitlines() or [""])[0]
        raise BackboneError(f"--backbone {path}: cannot import {module_name} ({type(error).__name__}: {reason}); "
                            "is its folder on PYTHONPATH?") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise BackboneError(f"--backbone {path}: {module_name} has no {attribute}")
        target = getattr(target, part)
    if not callable(target):
        raise BackboneError(f"--backbone {path}: {attribute} is a {type(target).__name__}, not a class or function")
    return target


@functools.cache
def resolve_backbone(name: str) -> TorchvisionBackbone | ImportedBackbone | backbones_timm.TimmBackbone:
    """The backbone --backbone names: the one resolver every part of the project asks (BackboneError if none)."""
    if backbones_timm.is_timm_name(name):
        return backbones_timm.TimmBackbone(name, BackboneError)
    if is_import_path(name):
        return ImportedBackbone(name, _import_factory(name))
    if name not in backbone_names():  # refused, naming the closest valid ones
        close = difflib.get_close_matches(name, backbone_names(), n=3, cutoff=0.5)
        hint = f"closest: {', '.join(close)}" if close else "e.g. resnet18, efficientnet_b0, convnext_tiny, vit_b_16"
        raise BackboneError(f"unknown backbone {name!r}; {hint} "
                            f"(all {len(backbone_names())}: torchvision.models.list_models(module=torchvision.models); "
                            "timm/NAME for a timm model; or your own module as package.module:ClassOrFactory)")
    return TorchvisionBackbone(name)


def default_weights(name: str) -> WeightsEnum:
    """The ImageNet weights torchvision recommends for this backbone (BackboneError for your own module)."""
    weights = resolve_backbone(name).weights
    if weights is None:
        raise _no_weights(name)
    return weights


def _no_weights(name: str) -> BackboneError:
    return BackboneError(f"{name} is your own module: it has no torchvision ImageNet weights "
                         "(--pretrained is for torchvision names; pass --no-pretrained)")


def fit_image_size(name: str, size: int) -> int:
    """The smallest input size at least `size` that the backbone's architecture accepts."""
    return resolve_backbone(name).fit_image_size(size)


def check_image_size(name: str, size: int) -> None:
    """Refuse an input size the backbone's architecture cannot take, naming the nearest one it can."""
    if fit_image_size(name, size) != size:
        raise BackboneError(f"{name} cannot take {size} px inputs; use --image-size {fit_image_size(name, size)} "
                            f"(its own size is {resolve_backbone(name).default_image_size()})")


def builder_kwargs(backbone: TorchvisionBackbone, image_size: int | None, pretrained: bool) -> dict:
    """The arguments torchvision's builder would be given for this backbone, as its weights expect."""
    name, size = backbone.name, image_size or backbone.default_image_size()
    if name.startswith("vit_"):
        return {"image_size": size}  # vit_h_14's weights are for 518 px, the others' for 224
    if name.startswith("maxvit_"):
        return {"input_size": (size, size)}
    if name in ("googlenet", "inception_v3"):
        # Their ImageNet weights expect inputs re-normalised inside the model; always on, so a model
        # rebuilt from a checkpoint (without pretrained weights) computes what it was trained to. Built
        # without the auxiliary ImageNet classifiers, whose weights (aux*, AuxLogits.*) are left out when loading.
        return {"transform_input": True, "init_weights": not pretrained, "aux_logits": False}
    return {}


def find_classifier(model: nn.Module, num_outputs: int = 1000) -> tuple[str, nn.Module]:
    """The name and layer of a torchvision model's classifier: its last layer with `num_outputs` outputs."""
    return [(name, module) for name, module in model.named_modules()
            if (isinstance(module, nn.Linear) and module.out_features == num_outputs)
            or (isinstance(module, nn.Conv2d) and module.out_channels == num_outputs)][-1]


def strip_classifier(backbone: nn.Module, num_outputs: int = 1000) -> int:
    """Replace the backbone's classifier (its last layer with `num_outputs` outputs) by Identity; return its width."""
    name, layer = find_classifier(backbone, num_outputs)
    parent_name, _, child = name.rpartition(".")
    setattr(backbone.get_submodule(parent_name), child, nn.Identity())
    # Whatever follows the classifier (SqueezeNet's ReLU, pooling, flatten) keeps the channel count.
    return layer.in_features if isinstance(layer, nn.Linear) else layer.in_channels

