"""Everything one training run builds before its first epoch, and the checkpoint it writes and resumes from."""

from __future__ import annotations

import dataclasses
import sys

import torch
import tqdm

from .. import model, task
from ..config import TrainConfig
from ..data import build_loaders
from ..data.loaders import PREFETCH_BATCHES
from ..processes import Processes
from . import optimization, recipe, run_state, stopping, wrapping
from .hardware import Hardware
from .loop import StepRecipe


class Run:
    """One training run on one device: data, model, loss, optimizer, schedule and the run's progress.

    `model` is the plain model: checkpoints are saved from it and loaded into it. `wrapped_model` is what the
    steps run through: the same model inside DataParallel, DDP and/or torch.compile. `plugins` are what the
    project's answers added (plugins/); `processes` the processes training together (one by default).
    `source`: the checkpoint cfg.resume or cfg.init_from names, read and checked (startup.settle reads it once);
    its preprocessing is the run's, its weights the start of --init-from (--resume: `resume`).
    """

    def __init__(self, cfg: TrainConfig, device: torch.device, processes: Processes | None = None, plugins=(),
                 source: dict | None = None):
        self.cfg, self.device, self.plugins = cfg, device, list(plugins)
        self.processes = processes or Processes()
        self._build_data(source)
        self.hw = Hardware.create(device, self.cfg.precision, self.cfg.channels_last, mean=self.preprocessing.mean,
                                  std=self.preprocessing.std, processes=self.processes)
        self._build_model(source)
        self.start_epoch, self.start_step, self.best_acc, self.rows = 1, 0, -1.0, []
        self.resumed_totals: dict | None = None  # a mid-epoch checkpoint's sums for the epoch it continues
        self.resume_notes: list[str] = []  # what a resume under another layout changes
        self.stop = stopping.StopRequest()  # flagged by SIGINT/SIGTERM once train() installs it
        self.save_clock = stopping.SaveClock(self.cfg.save_every_minutes)
        self.step_losses = None  # the last epoch's per-step losses on the device, for a tracker plugin

    def _build_data(self, source: dict | None) -> None:
        cfg = self.cfg
        data = build_loaders(cfg, self.device, saved=run_state.preprocessing(source) if source else None,
                             on_unreadable=self.note_unreadable, processes=self.processes, plugins=self.plugins,
                             recorded_split=source.get("split") if cfg.resume else None)  # refused if moved
        self.split = data.split  # recorded in every checkpoint and config.json (data/splits.py)
        self.notes = data.notes  # what the listing left out: hidden names, directory links
        self.train_loader, self.val_loader, self.class_names = data.train_loader, data.val_loader, data.class_names
        self.preprocessing, self.unreadable, self.class_counts = data.preprocessing, data.unreadable, data.class_counts
        self.decode, self.decode_reason = data.decode, data.decode_reason
        # A resumed run augments as its checkpoint did (build_loaders took its preprocessing); record that recipe.
        # --resplit acts once, here: what checkpoints and config.json record is the new split, not the flag
        self.cfg = dataclasses.replace(cfg, augment=self.preprocessing.augment, resplit=False)
        self.image_size = self.preprocessing.image_size

    def _build_model(self, source: dict | None) -> None:
        cfg, device = self.cfg, self.device
        self.model = model.build_model(cfg.backbone, len(self.class_names), pretrained=cfg.pretrained, device=device,
                                       image_size=self.image_size, pretrained_file=cfg.pretrained_file
                                       ).to(memory_format=self.hw.memory_format)
        self.fresh = recipe.init_from_state(self.model, source["model"], cfg.init_from) if cfg.init_from else []
        self.loss_fn = task.build_loss(self.class_counts, cfg.label_smoothing, device)
        # None: every parameter at cfg.lr, no batch mixing; a plugin's build may change both (fine-tuning's)
        self.parameter_groups, self.mix = None, None
        for plugin in self.plugins:
            plugin.build(self)
        self.optimizer = optimization.make_optimizer(self.model, cfg, self.parameter_groups)
        self.scheduler = optimization.make_scheduler(self.optimizer, cfg, self.steps_per_epoch)
        self.step_recipe = StepRecipe(cfg.accum_steps, cfg.clip_grad, self.mix, self.scheduler)
        self.wrap()

    def wrap(self) -> None:
        """(Re)build what the steps run through (DDP and torch.compile note which parameters train when they wrap)."""
        self.wrapped_model = wrapping.wrap_model(self.model, self.cfg.parallel, self.device, compile=self.cfg.compile,
                                                 processes=self.processes)

    def machine(self) -> dict:
        """How this process feeds and runs the device (config.json's `machine`): loader workers and prefetch,
        where images are decoded and why, torch's CPU threads, TF32 and channels_last as in force."""
        return {"workers": self.cfg.workers, "prefetch": PREFETCH_BATCHES if self.cfg.workers else 0,
                "threads": torch.get_num_threads(),
                "decode": self.decode, "decode_reason": self.decode_reason, "tf32": self.hw.tf32,
                "channels_last": self.hw.channels_last}

    def machine_notes(self) -> list[str]:
        """The start-up lines that say how the device is fed and what runs by default."""
        machine, on = self.machine(), {True: "on", False: "off"}
        return [f"loader: {machine['workers']} workers, {machine['prefetch']} batches prefetched each; images decoded "
                f"on the {machine['decode']} ({machine['decode_reason']})",
                f"torch threads: {machine['threads']}; tf32 matmuls: {on[machine['tf32']]}; "
                f"channels_last: {on[machine['channels_last']]}"]

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps in one epoch (batches grouped by --accum-steps): the logger's step axis."""
        return optimization.optimizer_steps_per_epoch(len(self.train_loader), self.cfg.accum_steps)

    def layout(self) -> dict:
        """How this run cuts an epoch into optimizer steps (recorded in checkpoints)."""
        return self.processes.layout(self.cfg.batch_size, self.cfg.accum_steps, self.steps_per_epoch)

    def state(self, epoch: int, step: int = 0, epoch_totals: dict | None = None, weights: str = "model") -> dict:
        """A checkpoint after `step` optimizer steps of `epoch`, 0: the whole epoch (layout: run_state.py).

        `weights`: another name a plugin validated (e.g. "ema") puts those weights under `model` (a best.pt).
        """
        return run_state.training_state(self, epoch, step=step, epoch_totals=epoch_totals, weights=weights)

    def close(self) -> None:
        """End the loaders' worker processes (train.py closes every Run, on success and on error alike)."""
        self.train_loader.close()
        self.val_loader.close()

    def note_unreadable(self, split: str, path: str, reason: str) -> None:
        """Warn the first time an image turns out unreadable (in the process that read it)."""
        if self.unreadable.add(split, path):
            tqdm.tqdm.write(f"warning: skipping unreadable image {path}: {reason}", file=sys.stderr)  # above the bar

    def resume(self, state: dict, path: str) -> None:
        """Continue where the checkpoint `state` (read from `path` and checked, run_state.read) stopped: after its
        epoch, or at its step inside the epoch."""
        # Read onto the CPU: load_state_dict places weights and optimizer moments on the parameters'
        # device, keeps AdamW's `step` counters on the CPU where torch wants them, and the RNG
        # states stay host tensors (a CUDA one cannot become a NumPy array).
        run_state.continue_run(state, run=self, source=path)
