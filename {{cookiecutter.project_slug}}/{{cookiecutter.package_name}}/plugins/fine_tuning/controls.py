"""The fine-tuning controls themselves: which parameters train, at which learning rates, the EMA of the weights,
and MixUp/CutMix. The model says which part is its backbone (`model.backbone`); nothing here knows layer names."""

from __future__ import annotations

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel
from torchvision.transforms import v2

from ...devkit import module_device


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
    backbone = list(model.backbone.parameters())
    in_backbone = {id(p) for p in backbone}  # by identity: no layer names
    head = [p for p in model.parameters() if id(p) not in in_backbone]
    return [{"params": backbone, "lr": lr * backbone_lr_scale, "name": "backbone"},
            {"params": head, "lr": lr, "name": "head"}]


class DeviceEMA(AveragedModel):
    """An exponential moving average of a model's weights and buffers whose update never waits for the device.

    torch's AveragedModel asks `n_averaged == 0` on the host twice per update (a sync on a GPU). Here the
    first update's copy is a weight chosen on the device: keep = 0 at the first update, `decay` after, and
    the average becomes keep * average + (1 - keep) * weights with foreach kernels. `module` and
    `n_averaged` are AveragedModel's, so checkpoints hold what they held.
    """

    def __init__(self, model: nn.Module, decay: float):
        # device= puts the counter beside the weights (it would otherwise be born on the CPU).
        super().__init__(model, device=module_device(model), use_buffers=True)
        self.decay = decay

    @torch.no_grad()
    def update_parameters(self, model: nn.Module) -> None:
        """Move the average towards `model`'s current weights and buffers (a copy at the first update)."""
        averaged = [*self.module.parameters(), *self.module.buffers()]
        current = [tensor.detach() for tensor in (*model.parameters(), *model.buffers())]
        keep = torch.where(self.n_averaged == 0, 0.0, self.decay)  # a 0-dim tensor on the device
        floats = [(a, c) for a, c in zip(averaged, current, strict=True) if a.is_floating_point()]
        if floats:
            ema, now = (list(group) for group in zip(*floats))
            torch._foreach_mul_(ema, keep)
            torch._foreach_add_(ema, torch._foreach_mul(now, 1.0 - keep))
        for a, c in zip(averaged, current, strict=True):
            if not a.is_floating_point():  # BatchNorm's step counter: averaged, then truncated, as torch does
                a.copy_(torch.where(keep == 0, c, a * keep + c * (1.0 - keep)))
        self.n_averaged += 1


def batch_mixer(mixup: float, cutmix: float, num_classes: int) -> v2.Transform | None:
    """MixUp and/or CutMix on whole batches (one of the two per batch when both are on); None when off."""
    mixers = [mixer(alpha=alpha, num_classes=num_classes)
              for mixer, alpha in ((v2.MixUp, mixup), (v2.CutMix, cutmix)) if alpha > 0]
    if not mixers:
        return None
    return mixers[0] if len(mixers) == 1 else v2.RandomChoice(mixers)
