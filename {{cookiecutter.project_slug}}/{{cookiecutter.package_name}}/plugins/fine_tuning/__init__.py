"""The fine_tuning answer: a frozen backbone (unfrozen at an epoch), backbone and head learning rates, an
exponential moving average (EMA) of the weights validated beside them, and MixUp/CutMix (controls.py).

Its settings join train.py's flags, config.json and checkpoints (`FineTuning`). Everything it does is either
derived from (config, epoch), so a resumed run recomputes it, or kept in the training checkpoint (the EMA's
weights and count), so a resume continues it exactly. best.pt keeps the EMA's weights in an epoch where they
validated better than the model's (`ema_val_acc` in metrics.csv).
"""

from __future__ import annotations

import dataclasses

from ...deferred import deferred
from ...devkit.atomic import CheckpointError
from .. import Plugin

# Its settings and flags are read before torch loads (ARCHITECTURE.md, "Flags first, then torch"); the controls
# themselves load when the run first uses them
checkpoint = deferred("...devkit.checkpoint", __package__)
loop = deferred("...training.loop", __package__)
state_check = deferred("...training.state_check", __package__)
controls = deferred(".controls", __package__)


@dataclasses.dataclass
class FineTuning:
    """The fine-tuning settings (TrainConfig fields in a project with this answer); the defaults change nothing."""

    freeze_backbone: bool = False  # train the head only: backbone weights and BatchNorm statistics stay as loaded
    unfreeze_at: int | None = None  # with freeze_backbone: the epoch from which the whole model trains
    backbone_lr_scale: float = 1.0  # the backbone learns at lr * this, the head at lr
    ema: float | None = None  # decay of an exponential moving average of the weights (e.g. 0.999); None: off
    mixup: float = 0.0  # MixUp alpha (torchvision.transforms.v2.MixUp); 0: off
    cutmix: float = 0.0  # CutMix alpha (torchvision.transforms.v2.CutMix); 0: off


class FineTuningPlugin(Plugin):
    """The fine-tuning controls, told of the run through the hooks train.py calls."""

    name = "fine_tuning"
    settings = FineTuning

    def __init__(self):
        self.ema: controls.DeviceEMA | None = None
        self.used = False  # any setting away from its default: checkpoints say so, for a project without it

    def flags(self, parser) -> None:
        """--freeze-backbone, --unfreeze-at, --backbone-lr-scale, --ema, --mixup and --cutmix."""
        g = parser.add_argument_group("fine-tuning")
        g.add_argument("--freeze-backbone", action="store_true",
                       help="train the head only; the backbone's weights and BatchNorm statistics stay as loaded")
        g.add_argument("--unfreeze-at", type=int, metavar="EPOCH",
                       help="with --freeze-backbone: train the whole model from this epoch on")
        g.add_argument("--backbone-lr-scale", type=float, metavar="F", help="the backbone learns at lr * F, the "
                       f"head at lr (default: {FineTuning.backbone_lr_scale})")
        g.add_argument("--ema", type=float, metavar="DECAY",
                       help="keep an exponential moving average of the weights (e.g. 0.999), validated each epoch")
        g.add_argument("--mixup", type=float, metavar="ALPHA", help="MixUp alpha (0: off)")
        g.add_argument("--cutmix", type=float, metavar="ALPHA", help="CutMix alpha (0: off)")

    def problems(self, cfg) -> list[str]:
        """Values the controls cannot use."""
        problems = []
        if cfg.unfreeze_at is not None and (not cfg.freeze_backbone or cfg.unfreeze_at < 2):
            problems.append("--unfreeze-at needs --freeze-backbone and an epoch of at least 2")
        if cfg.ema is not None and not 0.0 < cfg.ema < 1.0:
            problems.append(f"--ema is a decay between 0 and 1 (e.g. 0.999), got {cfg.ema}")
        for flag, value in (("--backbone-lr-scale", cfg.backbone_lr_scale), ("--mixup", cfg.mixup),
                            ("--cutmix", cfg.cutmix)):
            if value < 0:
                problems.append(f"{flag} must not be negative, got {value}")
        return problems

    def build(self, run) -> None:
        """The two learning rates, the batch mixer, the EMA (of the starting weights) and epoch 1's freezing."""
        cfg = run.cfg
        own = {field.name: getattr(cfg, field.name) for field in dataclasses.fields(FineTuning)}
        self.used = FineTuning(**own) != FineTuning()
        run.parameter_groups = controls.parameter_groups(run.model, cfg.lr, cfg.backbone_lr_scale)
        run.mix = controls.batch_mixer(cfg.mixup, cfg.cutmix, len(run.class_names))
        self.ema = controls.DeviceEMA(run.model, cfg.ema) if cfg.ema else None
        controls.freeze_backbone(run.model, controls.backbone_frozen(1, cfg.freeze_backbone, cfg.unfreeze_at))

    def before_epoch(self, run, epoch: int) -> None:
        """Unfreeze at --unfreeze-at (a resumed run freezes as its epoch says)."""
        frozen = controls.backbone_frozen(epoch, run.cfg.freeze_backbone, run.cfg.unfreeze_at)
        if controls.freeze_backbone(run.model, frozen):
            run.wrap()  # DDP and torch.compile take note of which parameters train when they wrap: wrap again

    def after_step(self, run, epoch: int, step: int) -> None:
        """The EMA follows every optimizer step (on the device, no host read)."""
        if self.ema is not None:
            self.ema.update_parameters(run.model)

    def validated(self, run, row: dict) -> None:
        """The EMA's weights validated too: `ema_val_loss` and `ema_val_acc`."""
        if self.ema is not None:
            progress = run.cfg.progress if run.processes.is_main() else "none"
            stats = loop.evaluate(self.ema.module, run.loss_fn, run.val_loader, run.hw, progress=progress)
            row.update(ema_val_loss=round(stats.loss, 6), ema_val_acc=round(stats.acc, 6))

    def weights(self, name: str) -> dict | None:
        """The EMA's weights, for a best.pt where they validated better."""
        return checkpoint.model_state(self.ema.module) if name == "ema" and self.ema is not None else None

    def state_dict(self) -> dict:
        """The EMA's weights and update count; {} when no setting is used (the checkpoint then needs no plugin)."""
        if not self.used:
            return {}
        averaged = None if self.ema is None else {"model": checkpoint.model_state(self.ema.module),
                                                  "n_averaged": int(self.ema.n_averaged)}
        return {"ema": averaged}

    def load_state_dict(self, run, state: dict, source: str) -> None:
        """The saved EMA, checked like the model's weights (CheckpointError naming `source`)."""
        saved = state.get("ema")
        if self.ema is None or not saved:
            return  # --ema is a setting of the run: a resumed run has it exactly when its checkpoint does
        count = saved.get("n_averaged") if isinstance(saved, dict) else None
        if type(count) is not int or count < 0 or not isinstance(saved.get("model"), dict):  # a bool is no count
            raise CheckpointError(f"{source}: plugins.fine_tuning.ema is not the EMA's model weights and update count")
        state_check.check_weights(saved["model"], "plugins.fine_tuning.ema.model", source)
        checkpoint.load_model_state(self.ema.module, saved["model"], f"{source} (EMA)")
        self.ema.n_averaged.fill_(saved["n_averaged"])


PLUGIN = FineTuningPlugin()
