"""One pass over the training data, and one over validation data.

Both take the run's hardware (device, precision, scaler, memory format, the processes training together)
as one argument. Running totals stay on the device and are read back once per logging interval, because
every `.item()` is a host-device synchronisation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable

import torch
from torch import nn

from .. import task
from .hardware import Hardware
from .progress import Progress


@dataclasses.dataclass
class EpochStats:
    """Mean loss, accuracy and throughput of one pass; a validation's figures (task.Metrics.compute) by name."""

    loss: float
    acc: float
    images: int
    seconds: float
    figures: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RunningTotals:
    """An epoch's sums so far, kept on the device; a mid-epoch checkpoint records them to finish the epoch's row."""

    loss_sum: torch.Tensor
    correct: torch.Tensor
    seen: int = 0
    seconds_before: float = 0.0  # wall time spent on this epoch before a resume
    started: float = dataclasses.field(default_factory=time.perf_counter)

    @classmethod
    def start(cls, device: torch.device, saved: dict | None = None) -> RunningTotals:
        """Zeros, or the sums a checkpoint saved (see `saved`)."""
        saved = saved or {}
        return cls(torch.tensor(float(saved.get("loss_sum", 0.0)), device=device),
                   torch.tensor(int(saved.get("correct", 0)), device=device), int(saved.get("seen", 0)),
                   float(saved.get("seconds", 0.0)))

    def saved(self, hw: Hardware) -> dict:
        """The sums over every process as plain values, for a mid-epoch checkpoint: one host read (a collective
        under ddp: every process calls it)."""
        sums = torch.stack([self.loss_sum.double(), self.correct.double(),
                            self.loss_sum.new_tensor(self.seen, dtype=torch.float64)])
        loss_sum, correct, seen = hw.processes.total(sums).tolist()  # (3,) summed over processes
        return {"loss_sum": loss_sum, "correct": int(correct), "seen": int(seen),
                "seconds": self.seconds_before + time.perf_counter() - self.started}

    def stats(self, hw: Hardware) -> EpochStats:
        """The pass's mean loss, accuracy and throughput over every process (a collective, as `saved`)."""
        sums = self.saved(hw)
        seen = max(sums["seen"], 1)
        return EpochStats(sums["loss_sum"] / seen, sums["correct"] / seen, sums["seen"], sums["seconds"])


@dataclasses.dataclass(frozen=True)
class StepRecipe:
    """What an optimizer step does besides stepping: accumulation, clipping, batch mixing, the schedule."""

    accum_steps: int = 1  # batches whose gradients add up to one optimizer step
    clip_grad: float | None = None  # clip the gradients' total norm to this; None: no clipping
    mix: Callable | None = None  # mix(images, labels) -> (images, (B, C) targets): MixUp/CutMix
    scheduler: object | None = None  # stepped after every optimizer step


@dataclasses.dataclass
class EpochPlan:
    """Which epoch runs, from which optimizer step (a resume), and who hears of each step."""

    number: int = 0
    start_step: int = 0  # optimizer steps done before a mid-epoch resume (its loader skips their batches)
    totals: RunningTotals | None = None  # the sums saved with them
    after_step: Callable[[int, RunningTotals], None] | None = None  # may raise to stop (a stop request does)
    step_losses: list[torch.Tensor] | None = None  # receives each step's mean loss, a device scalar
    log_every: int = 10  # steps between reads of the device (the bar, the non-finite check)


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the weights after that step are not worth saving."""


def _check_finite(bad_step: torch.Tensor, epoch: int, hw: Hardware) -> None:
    """Raise NonFiniteLossError naming the first bad step over every process (one host read; all processes call)."""
    steps = [step for step in hw.processes.gather(int(bad_step.item())) if step]
    if steps:
        raise NonFiniteLossError(f"non-finite loss at epoch {epoch} step {min(steps)}; "
                                 "training stopped, the checkpoint of the last completed epoch is kept")


def train_one_epoch(model: nn.Module, loss_fn: nn.Module, optimizer: torch.optim.Optimizer, train_loader,
                    hw: Hardware, *, recipe: StepRecipe = StepRecipe(), epoch: int | EpochPlan = 0,
                    progress: bool | str = True) -> EpochStats:
    """Train for one epoch and return its mean loss, accuracy and throughput.

    Optimizer steps count from 1; each adds up the gradients of `recipe.accum_steps` batches (the last may have
    fewer), clipped to `recipe.clip_grad`, then steps `recipe.scheduler`. With `recipe.mix` (MixUp/CutMix)
    targets become (B, C) probabilities; accuracy still counts the labels. A NaN/inf loss raises
    NonFiniteLossError naming its step. `epoch` (an EpochPlan) says where a resumed epoch starts.
    """
    plan = epoch if isinstance(epoch, EpochPlan) else EpochPlan(epoch)
    model.train()
    totals = plan.totals or RunningTotals.start(hw.device)
    bad_step = torch.zeros((), device=hw.device, dtype=torch.long)  # first step with a non-finite loss, 0: none
    first_batch, step, group_losses = plan.start_step * recipe.accum_steps, plan.start_step, []
    last_batch = first_batch + len(train_loader)
    optimizer.zero_grad(set_to_none=True)
    with Progress(train_loader, f"epoch {plan.number} train", progress) as bar:
        for batch, (images, labels) in enumerate(bar, start=first_batch + 1):
            completes = batch % recipe.accum_steps == 0 or batch >= last_batch
            loss = _forward_backward(model, loss_fn, hw, recipe, images, labels, totals, sync=completes)
            group_losses.append(loss)
            bad_step = torch.where((bad_step == 0) & ~torch.isfinite(loss), step + 1, bad_step)  # no host read
            if not completes:
                continue  # gradients add up until the group is complete
            _optimizer_step(model, optimizer, hw, recipe)
            step += 1
            if plan.step_losses is not None:
                plan.step_losses.append(torch.stack(group_losses).mean())
            group_losses.clear()
            if (step - 1) % plan.log_every == 0:
                _check_finite(bad_step, plan.number, hw)
                seconds = time.perf_counter() - totals.started
                bar.show(batch - first_batch, loss=f"{totals.loss_sum.item() / max(totals.seen, 1):.4f}",
                         img_s=f"{totals.seen / max(seconds, 1e-9):.0f}")
            if plan.after_step is not None:
                plan.after_step(step, totals)
    _check_finite(bad_step, plan.number, hw)
    return totals.stats(hw)


def _forward_backward(model: nn.Module, loss_fn: nn.Module, hw: Hardware, recipe: StepRecipe, images, labels,
                      totals: RunningTotals, sync: bool) -> torch.Tensor:
    """One micro-batch: its loss's gradients added up, its sums counted; the detached loss, on the device."""
    images, labels = hw.batch(images, labels)  # (B, 3, H, W), (B,)
    images, targets = recipe.mix(images, labels) if recipe.mix is not None else (images, labels)  # (B,) or (B, C)
    with contextlib.nullcontext() if sync else hw.processes.no_sync(model):
        with hw.policy.autocast():  # a no-op under fp32
            logits = model(images)  # (B, C)
        loss = loss_fn(logits, targets)
        hw.scaler.scale(loss / recipe.accum_steps).backward()
    totals.loss_sum += loss.detach() * labels.size(0)
    totals.correct += task.hits(logits, labels)  # the labels, also under MixUp/CutMix
    totals.seen += labels.size(0)
    return loss.detach()


def _optimizer_step(model: nn.Module, optimizer: torch.optim.Optimizer, hw: Hardware, recipe: StepRecipe) -> None:
    """One optimizer step from the accumulated gradients, clipped first if asked; then the schedule."""
    if recipe.clip_grad is not None:
        hw.scaler.unscale_(optimizer)  # clip the true gradients, not the fp16-scaled ones
        nn.utils.clip_grad_norm_(model.parameters(), recipe.clip_grad)
    hw.scaler.step(optimizer)
    hw.scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if recipe.scheduler is not None:
        recipe.scheduler.step()


@torch.inference_mode()
def evaluate(model: nn.Module, loss_fn: nn.Module, val_loader, hw: Hardware, *, progress: bool | str = True,
             metrics=None, on_batch: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None] | None = None
             ) -> EpochStats:
    """Mean loss and accuracy of `model` over `val_loader`, without gradients; with `metrics` (a task.Metrics)
    their figures too, over every process.

    The one evaluation loop: training's validation and evaluate.py both run it, with the loss and metrics of
    task.py, so their numbers agree. `on_batch(images, targets, logits)` sees every batch (plots.ConfidentMistakes).
    """
    model.eval()
    totals = RunningTotals.start(hw.device)
    with Progress(val_loader, "validate", progress) as bar:
        for images, targets in bar:
            images, targets = hw.batch(images, targets)
            with hw.policy.autocast():  # a no-op under fp32
                logits = model(images)
            totals.loss_sum += loss_fn(logits, targets) * targets.size(0)
            totals.correct += task.hits(logits, targets)
            totals.seen += targets.size(0)
            if metrics is not None:
                metrics.update(logits, targets)
            if on_batch is not None:
                on_batch(images, targets, logits)
    stats = totals.stats(hw)
    if metrics is not None:
        stats.figures = metrics.compute(hw.processes.total)  # every process's counts: the whole split
    return stats
