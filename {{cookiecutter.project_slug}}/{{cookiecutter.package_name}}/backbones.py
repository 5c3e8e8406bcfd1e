"""Backbone surgery: any torchvision classification model, built on any device, without its classifier.

torchvision's classification models differ in the details that matter here:
- the classifier is `fc`, `classifier[-1]`, `heads.head`, `head` or, in SqueezeNet, a 1x1 convolution;
  it is found as the last layer with one output per ImageNet class and replaced with Identity,
  so the backbone returns its features and the layer's input width is the feature width;
- GoogLeNet and Inception v3 return auxiliary ImageNet logits in training mode; those heads are dropped;
- ViT and MaxViT are built for one input size (their positional tables depend on it);
- RegNet computes its stage widths with tensor arithmetic, which has no values on the meta device.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
from collections.abc import Iterator

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torchvision import models
from torchvision.models import vision_transformer
from torchvision.models._api import WeightsEnum

from .errors import UserError


class BackboneError(UserError):
    """The backbone name is not a torchvision classification model, or cannot take the asked input size."""


@functools.cache
def backbone_names() -> tuple[str, ...]:
    """Every torchvision classification model name (the accepted values of --backbone)."""
    return tuple(models.list_models(module=models))


def check_backbone(name: str) -> None:
    """Refuse a name torchvision does not know, naming the closest valid ones."""
    if name in backbone_names():
        return
    close = difflib.get_close_matches(name, backbone_names(), n=3, cutoff=0.5)
    hint = f"closest: {', '.join(close)}" if close else "e.g. resnet18, efficientnet_b0, convnext_tiny, vit_b_16"
    raise BackboneError(f"unknown backbone {name!r}; {hint} "
                        f"(all {len(backbone_names())}: torchvision.models.list_models(module=torchvision.models))")


def default_weights(name: str) -> WeightsEnum:
    """The ImageNet weights torchvision recommends for this backbone."""
    check_backbone(name)
    return models.get_model_weights(name).DEFAULT


def default_image_size(name: str) -> int:
    """The input size the backbone's default weights were evaluated at (224 for most, 299 for inception_v3)."""
    return default_weights(name).transforms().crop_size[0]


def min_image_size(name: str) -> int:
    """The smallest input size torchvision documents for this backbone."""
    return max(default_weights(name).meta["min_size"])


def fit_image_size(name: str, size: int) -> int:
    """The smallest input size at least `size` that the backbone's architecture accepts."""
    if name.startswith("vit_"):  # whole patches: vit_b_16 takes multiples of 16
        patch = int(name.rsplit("_", 1)[1])
        return -(-size // patch) * patch
    if name.startswith("maxvit_"):  # 7x7 partitions at every stage: multiples of 32 * 7
        return -(-size // 224) * 224
    if name.startswith("swin"):  # windows are padded: any size works; meta's min_size is the weights' size
        return size
    return max(size, min_image_size(name))


def check_image_size(name: str, size: int) -> None:
    """Refuse an input size the backbone's architecture cannot take, naming the nearest one it can."""
    if fit_image_size(name, size) != size:
        raise BackboneError(f"{name} cannot take {size} px inputs; use --image-size {fit_image_size(name, size)} "
                            f"(its own size is {default_image_size(name)})")


def _builder_kwargs(name: str, image_size: int | None, pretrained: bool) -> dict:
    """The arguments torchvision's builder would be given for this backbone, as its weights expect."""
    size = image_size or default_image_size(name)
    if name.startswith("vit_"):
        return {"image_size": size}  # vit_h_14's weights are for 518 px, the others' for 224
    if name.startswith("maxvit_"):
        return {"input_size": (size, size)}
    if name in ("googlenet", "inception_v3"):
        # Their ImageNet weights expect inputs re-normalised inside the model; always on, so a model
        # rebuilt from a checkpoint (without pretrained weights) computes what it was trained to.
        return {"transform_input": True, "init_weights": not pretrained}
    return {}


# Factory functions that allocate a module's parameters and buffers; arange and tensor are left out
# because builders also use them for arithmetic whose values they read (RegNet's stage widths).
_ALLOCATORS = frozenset({torch.empty, torch.empty_strided, torch.zeros, torch.ones, torch.full,
                         torch.rand, torch.randn, torch.randint, torch.eye})


def _in_place(func) -> bool:
    """True for torch's in-place operations (`normal_`, `zero_`), not for dunders (`__get__`)."""
    name = getattr(func, "__name__", "")
    return name.endswith("_") and not name.endswith("__")


class _AllocateOnMeta(TorchFunctionMode):
    """Like `with torch.device("meta")`, but index arithmetic keeps its values on the CPU.

    In-place updates of meta tensors (the weight initialisers) are skipped: there are no values
    to update, and torch runs them through slow Python reference implementations.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _ALLOCATORS and kwargs.get("device") is None:
            kwargs["device"] = torch.device("meta")
        elif _in_place(func) and args and isinstance(args[0], torch.Tensor) and args[0].is_meta:
            return args[0]
        return func(*args, **kwargs)


@contextlib.contextmanager
def building_on(device: torch.device) -> Iterator[None]:
    """Create the parameters and buffers of modules built inside this block directly on `device`."""
    if device.type != "meta":
        with device:
            yield
        return
    with _AllocateOnMeta():
        yield


def drop_auxiliary_heads(backbone: nn.Module) -> None:
    """Remove GoogLeNet's and Inception's auxiliary ImageNet classifiers, as torchvision does without aux_logits."""
    if getattr(backbone, "aux_logits", False):
        backbone.aux_logits = False
        for child, _ in list(backbone.named_children()):
            if child.lower().startswith("aux"):
                setattr(backbone, child, None)


def strip_classifier(backbone: nn.Module, num_outputs: int = 1000) -> int:
    """Replace the backbone's classifier (its last layer with `num_outputs` outputs) by Identity; return its width."""
    def is_classifier(module: nn.Module) -> bool:
        return ((isinstance(module, nn.Linear) and module.out_features == num_outputs)
                or (isinstance(module, nn.Conv2d) and module.out_channels == num_outputs))

    name, layer = [(name, module) for name, module in backbone.named_modules() if is_classifier(module)][-1]
    parent_name, _, child = name.rpartition(".")
    setattr(backbone.get_submodule(parent_name), child, nn.Identity())
    # Whatever follows the classifier (SqueezeNet's ReLU, pooling, flatten) keeps the channel count.
    return layer.in_features if isinstance(layer, nn.Linear) else layer.in_channels


def build_backbone(name: str, *, device: torch.device, image_size: int | None = None,
                   state: dict[str, torch.Tensor] | None = None) -> tuple[nn.Module, int]:
    """Build `name` on `device`, load `state` (its ImageNet weights) if given, and strip its classifier.

    Returns the backbone, which maps (B, 3, H, W) images to (B, F) features, and F.
    """
    check_backbone(name)
    num_outputs = len(default_weights(name).meta["categories"])
    with building_on(device):
        backbone = models.get_model(name, weights=None, **_builder_kwargs(name, image_size, state is not None))
    if device.type == "meta":
        backbone = backbone.to(device)  # the few buffers derived from index arithmetic (position tables)
    if state is not None:
        if name.startswith("vit_"):  # positional embeddings resized to this input size, as torchvision's references do
            state = vision_transformer.interpolate_embeddings(backbone.image_size, backbone.patch_size, state)
        backbone.load_state_dict(state)
    drop_auxiliary_heads(backbone)
    return backbone, strip_classifier(backbone, num_outputs)
