"""Fine-tuning controls: a frozen backbone, backbone/head learning rates, EMA weights, mixup/cutmix, and
starting from another run's weights (the optimizer and the schedule by name: optimization.py).

Everything here is either derived from (config, epoch), so a resumed run recomputes it, or has a
`state_dict` that the training checkpoint carries (the EMA weights, the schedule's position).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel
from torchvision.transforms import v2

from ..devkit import module_device
from ..errors import ConfigError
from . import optimization


def check_config(cfg) -> list[str]:
    """What is wrong with the fine-tuning values of a TrainConfig, one message per problem."""
    problems = []
    if not 0.0 < cfg.val_split < 1.0:
        problems.append(f"--val-split must be between 0 and 1, got {cfg.val_split}")
    if cfg.unfreeze_at is not None and (not cfg.freeze_backbone or cfg.unfreeze_at < 2):
        problems.append("--unfreeze-at needs --freeze-backbone and an epoch of at least 2")
    if cfg.ema is not None and not 0.0 < cfg.ema < 1.0:
        problems.append(f"--ema is a decay between 0 and 1 (e.g. 0.999), got {cfg.ema}")
    for flag, value in (("--accum-steps", cfg.accum_steps), ("--patience", cfg.patience)):
        if value is not None and value < 1:
            problems.append(f"{flag} must be at least 1, got {value}")
    for flag, name, known in (("--optimizer", cfg.optimizer, optimization.OPTIMIZERS),
                              ("--schedule", cfg.schedule, optimization.SCHEDULES)):
        if name not in known:
            problems.append(f"{flag} must be one of {', '.join(known)}, got {name}")
    if not 0.0 <= cfg.momentum < 1.0:
        problems.append(f"--momentum must be in [0, 1), got {cfg.momentum}")
    if cfg.nesterov and (cfg.optimizer != "sgd" or cfg.momentum == 0):
        problems.append("--nesterov needs --optimizer sgd and a --momentum above 0")
    if cfg.step_epochs < 1 or not 0.0 < cfg.step_gamma <= 1.0:
        problems.append(f"--step-epochs must be at least 1 and --step-gamma in (0, 1], got {cfg.step_epochs} "
                        f"and {cfg.step_gamma}")
    for flag, value in (("--backbone-lr-scale", cfg.backbone_lr_scale), ("--warmup-epochs", cfg.warmup_epochs),
                        ("--mixup", cfg.mixup), ("--cutmix", cfg.cutmix), ("--clip-grad", cfg.clip_grad or 0.0)):
        if value < 0:
            problems.append(f"{flag} must not be negative, got {value}")
    return problems


def make_optimizer(model: nn.Module, cfg) -> torch.optim.Optimizer:
    """cfg.optimizer (optimization.py) over the backbone and head groups (--backbone-lr-scale)."""
    return optimization.make_optimizer(model, cfg, parameter_groups(model, cfg.lr, cfg.backbone_lr_scale))


def epoch_score(row: dict) -> tuple[float, str]:
    """An epoch's validation accuracy and whose it is: the model's, or the EMA's where that is higher."""
    if row.get("ema_val_acc", -1.0) > row["val_acc"]:
        return row["ema_val_acc"], "ema"
    return row["val_acc"], "model"


def epochs_without_improvement(rows: list[dict]) -> int:
    """How many epochs have passed since the best validation accuracy (0: the last one was the best)."""
    scores = [epoch_score(row)[0] for row in rows]
    if not scores:
        return 0
    return len(scores) - 1 - max(range(len(scores)), key=lambda i: (scores[i], -i))


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


def make_ema(model: nn.Module, decay: float) -> DeviceEMA:
    """An exponential moving average of `model`'s weights and buffers, on the model's device."""
    return DeviceEMA(model, decay)


def batch_mixer(mixup: float, cutmix: float, num_classes: int) -> v2.Transform | None:
    """MixUp and/or CutMix on whole batches (one of the two per batch when both are on); None when off."""
    mixers = [mixer(alpha=alpha, num_classes=num_classes)
              for mixer, alpha in ((v2.MixUp, mixup), (v2.CutMix, cutmix)) if alpha > 0]
    if not mixers:
        return None
    return mixers[0] if len(mixers) == 1 else v2.RandomChoice(mixers)


def init_from_state(model: nn.Module, weights: dict[str, torch.Tensor], source: str = "checkpoint") -> list[str]:
    """Copy a checkpoint's weights into `model`; the head is kept fresh where its shape differs.

    Returns the names left as they were (the head, when the classes differ).
    """
    own = model.state_dict()
    fresh = [name for name, tensor in own.items()
             if name not in weights or weights[name].shape != tensor.shape]
    missing_backbone = [name for name in fresh if name.startswith("backbone.")]
    if missing_backbone:
        raise ConfigError(f"--init-from {source} holds another backbone or image size ({missing_backbone[0]} "
                          "differs); it needs the same --backbone")
    model.load_state_dict({name: weights[name] for name in own if name not in fresh}, strict=False)
    return fresh
