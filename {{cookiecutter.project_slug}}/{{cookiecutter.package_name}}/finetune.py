"""Fine-tuning controls: a frozen backbone, backbone/head learning rates, warmup then cosine, EMA weights,
mixup/cutmix, and starting from another run's weights.

Everything here is either derived from (config, epoch), so a resumed run recomputes it, or has a
`state_dict` that the training checkpoint carries (the EMA weights, the schedule's position).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torchvision.transforms import v2

from .devices import module_device


def backbone_frozen(epoch: int, freeze_backbone: bool, unfreeze_at: int | None) -> bool:
    """Whether the backbone is frozen during `epoch` (counted from 1): until `unfreeze_at`, if given."""
    return freeze_backbone and (unfreeze_at is None or epoch < unfreeze_at)


def freeze_backbone(model: nn.Module, frozen: bool) -> bool:
    """Freeze (or unfreeze) the backbone's parameters and its BatchNorm statistics; True if that changed."""
    changed = model.backbone_frozen != frozen
    model.backbone_frozen = frozen  # Classifier.train() keeps a frozen backbone in eval mode
    for parameter in model.backbone.parameters():
        parameter.requires_grad_(not frozen)
    model.train(model.training)
    return changed


def parameter_groups(model: nn.Module, lr: float, backbone_lr_scale: float = 1.0) -> list[dict]:
    """Two optimizer groups: the backbone at `lr * backbone_lr_scale`, the head at `lr`.

    Frozen parameters stay in their group: they have no gradient, so the optimizer skips them
    until they are unfrozen, and the optimizer's layout never changes mid-run.
    """
    head = [p for name, p in model.named_parameters() if not name.startswith("backbone.")]
    return [{"params": list(model.backbone.parameters()), "lr": lr * backbone_lr_scale, "name": "backbone"},
            {"params": head, "lr": lr, "name": "head"}]


class WarmupCosine:
    """Learning-rate factor per optimizer step: linear warmup from 1/warmup to 1, then cosine to 0.

    A callable object rather than a closure, so LambdaLR's state_dict holds its plain numbers.
    """

    def __init__(self, warmup_steps: int, total_steps: int):
        self.warmup_steps, self.total_steps = warmup_steps, max(total_steps, 1)

    def __call__(self, step: int) -> float:
        """The factor applied to each group's base learning rate after `step` optimizer steps."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        progress = (step - self.warmup_steps) / max(self.total_steps - self.warmup_steps, 1)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


def warmup_cosine(optimizer: torch.optim.Optimizer, *, warmup_steps: int, total_steps: int
                  ) -> torch.optim.lr_scheduler.LambdaLR:
    """A per-step scheduler: `warmup_steps` of linear warmup, then cosine decay to zero at `total_steps`."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupCosine(warmup_steps, total_steps))


def make_ema(model: nn.Module, decay: float) -> AveragedModel:
    """An exponential moving average of `model`'s weights and buffers, on the model's device."""
    # device= puts AveragedModel's own counter beside the weights (it would otherwise be born on the CPU).
    return AveragedModel(model, device=module_device(model), multi_avg_fn=get_ema_multi_avg_fn(decay),
                         use_buffers=True)


def batch_mixer(mixup: float, cutmix: float, num_classes: int) -> v2.Transform | None:
    """MixUp and/or CutMix on whole batches (one of the two per batch when both are on); None when off."""
    mixers = [mixer(alpha=alpha, num_classes=num_classes)
              for mixer, alpha in ((v2.MixUp, mixup), (v2.CutMix, cutmix)) if alpha > 0]
    if not mixers:
        return None
    return mixers[0] if len(mixers) == 1 else v2.RandomChoice(mixers)


def init_from_state(model: nn.Module, weights: dict[str, torch.Tensor]) -> list[str]:
    """Copy a checkpoint's weights into `model`; the head is kept fresh where its shape differs.

    Returns the names left as they were (the head, when the classes differ).
    """
    own = model.state_dict()
    fresh = [name for name, tensor in own.items()
             if name not in weights or weights[name].shape != tensor.shape]
    missing_backbone = [name for name in fresh if name.startswith("backbone.")]
    if missing_backbone:
        raise ValueError(f"the checkpoint's backbone does not match: {missing_backbone[0]} differs")
    model.load_state_dict({name: weights[name] for name in own if name not in fresh}, strict=False)
    return fresh
