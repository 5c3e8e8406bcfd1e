"""What a run trains towards and from: the settings' own checks, which weights score best each epoch, when to stop
for --patience, and --init-from's starting weights (the optimizer and the schedule by name: optimization.py).

Everything here is derived from (config, metrics rows), so a resumed run recomputes it.
"""

from __future__ import annotations

import torch
from torch import nn

from ..data.transforms import AUGMENTATIONS
from ..errors import ConfigError
from . import optimization


def check_config(cfg) -> list[str]:
    """What is wrong with the training values of a TrainConfig, one message per problem."""
    problems = []
    if not 0.0 < cfg.val_split < 1.0:
        problems.append(f"--val-split must be between 0 and 1, got {cfg.val_split}")
    for flag, value in (("--accum-steps", cfg.accum_steps), ("--patience", cfg.patience)):
        if value is not None and value < 1:
            problems.append(f"{flag} must be at least 1, got {value}")
    for flag, name, known in (("--augment", cfg.augment, AUGMENTATIONS),  # registries: their names, checked with torch
                              ("--optimizer", cfg.optimizer, optimization.OPTIMIZERS),
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
    for flag, value in (("--warmup-epochs", cfg.warmup_epochs), ("--clip-grad", cfg.clip_grad or 0.0)):
        if value < 0:
            problems.append(f"{flag} must not be negative, got {value}")
    return problems


def epoch_score(row: dict) -> tuple[float, str]:
    """An epoch's best validation accuracy and whose weights scored it: the model's, or other weights a plugin
    validated (a `<name>_val_acc` column: the fine-tuning answer's EMA); the model's on a tie."""
    others = [(value, key.removesuffix("_val_acc")) for key, value in row.items()
              if key.endswith("_val_acc")]
    return max([(row["val_acc"], "model"), *others], key=lambda scored: scored[0])


def epochs_without_improvement(rows: list[dict]) -> int:
    """How many epochs have passed since the best validation accuracy (0: the last one was the best)."""
    scores = [epoch_score(row)[0] for row in rows]
    return len(scores) - 1 - scores.index(max(scores)) if scores else 0  # index: the first of equal bests


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
