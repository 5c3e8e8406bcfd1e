"""One pass over the training data, and one over validation data.

Both take the run's hardware (device, precision, scaler, memory format) as one argument. Running
totals stay on the device and are read back once per logging interval, because every `.item()`
is a host-device synchronisation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from ..metrics import update_confusion
from .distributed import earliest_step, reduce_sums, sum_over_ranks
from .hardware import Hardware


@dataclasses.dataclass
class EpochStats:
    """Mean loss, accuracy and throughput of one pass."""

    loss: float
    acc: float
    images: int
    seconds: float

    @property
    def images_per_s(self) -> float:
        """Images processed per second of wall time."""
        return self.images / max(self.seconds, 1e-9)


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

    def saved(self) -> dict:
        """The sums over every rank as plain values (a collective under ddp: every rank calls it)."""
        loss_sum, correct, seen = reduce_sums(self.loss_sum, self.correct, self.seen)
        return {"loss_sum": float(loss_sum.item()), "correct": int(correct.item()), "seen": seen,
                "seconds": self.seconds_before + time.perf_counter() - self.started}


@dataclasses.dataclass(frozen=True)
class StepRecipe:
    """What an optimizer step does besides stepping: gradient accumulation and clipping, EMA, MixUp/CutMix."""

    accum_steps: int = 1  # batches whose gradients add up to one optimizer step
    clip_grad: float | None = None  # clip the gradients' total norm to this; None: no clipping
    ema: nn.Module | None = None  # an AveragedModel updated after every optimizer step
    mix: Callable | None = None  # mix(images, labels) -> (images, (B, C) targets): MixUp/CutMix


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the weights after that step are not worth saving."""


def _check_finite(bad_step: torch.Tensor, epoch: int) -> None:
    """Raise NonFiniteLossError naming the first bad step recorded on the device (one host sync).

    Under ddp the ranks compare (a collective): a NaN on one rank stops every rank at the same check.
    """
    step = earliest_step(bad_step)
    if step > 0:
        raise NonFiniteLossError(f"non-finite loss at epoch {epoch} step {step}; "
                                 "training stopped, the checkpoint of the last completed epoch is kept")


def _summary(loss_sum: torch.Tensor, correct: torch.Tensor, seen: int) -> dict[str, float]:
    """Mean loss and accuracy so far (one host sync)."""
    return {"loss": loss_sum.item() / max(seen, 1), "acc": correct.item() / max(seen, 1)}


def train_one_epoch(model: nn.Module, loss_fn: nn.Module, optimizer: torch.optim.Optimizer, train_loader,
                    hw: Hardware, *, scheduler=None, epoch: int = 0, recipe: StepRecipe = StepRecipe(),
                    after_step: Callable[[int, RunningTotals], None] | None = None,
                    start_step: int = 0, totals: RunningTotals | None = None,
                    step_losses: list[torch.Tensor] | None = None, progress: bool = True,
                    log_every: int = 10) -> EpochStats:
    """Train for one epoch and return its mean loss, accuracy and throughput.

    Optimizer steps count from 1; each adds up the gradients of `recipe.accum_steps` batches (the last
    may have fewer), clipped to a total norm of `recipe.clip_grad` if given, then updates `recipe.ema`
    (an AveragedModel). `recipe.mix(images, targets)` (MixUp/CutMix) turns targets into (B, C)
    probabilities; accuracy is still measured against the original labels. `after_step(step, totals)` runs
    after each optimizer step and may raise to stop (train.py's stop request does). A NaN/inf loss raises
    NonFiniteLossError naming its step. `step_losses`, when given, receives each optimizer step's mean loss as
    a device scalar (read once per epoch). A run resumed mid-epoch passes the optimizer steps already done
    (`start_step`; its loader skips their `start_step * accum_steps` batches) and the `totals` saved with
    them.
    """
    model.train()
    device, accum_steps = hw.device, recipe.accum_steps
    totals = totals or RunningTotals.start(device)
    loss_sum, correct = totals.loss_sum, totals.correct  # updated in place: `totals` sees every step
    bad_step = torch.zeros((), device=device, dtype=torch.long)  # first step with a non-finite loss, 0: none
    start, step = time.perf_counter(), start_step
    first_batch = start_step * accum_steps
    last_batch = first_batch + len(train_loader)
    group_losses: list[torch.Tensor] = []  # this optimizer step's batch losses, for step_losses
    optimizer.zero_grad(set_to_none=True)
    bar = tqdm(train_loader, desc=f"epoch {epoch} train", disable=not progress, leave=False)
    for batch, (images, labels) in enumerate(bar, start=first_batch + 1):
        images, labels = hw.batch(images, labels)  # (B, 3, H, W), (B,)
        images, targets = recipe.mix(images, labels) if recipe.mix is not None else (images, labels)  # (B,) or (B, C)
        completes_group = batch % accum_steps == 0 or batch >= last_batch
        with contextlib.nullcontext() if completes_group else no_sync(model):
            with hw.autocast():
                logits = model(images)  # (B, C)
            loss = loss_fn(logits, targets)
            hw.scaler.scale(loss / accum_steps).backward()
        loss_sum += loss.detach() * labels.size(0)
        correct += (logits.argmax(dim=1) == labels).sum()
        totals.seen += labels.size(0)
        if step_losses is not None:
            group_losses.append(loss.detach())
        # Recorded on the device and read only every log_every steps: no host sync per step.
        bad_step = torch.where((bad_step == 0) & ~torch.isfinite(loss.detach()), step + 1, bad_step)
        if not completes_group:
            continue  # gradients add up until the group is complete
        _optimizer_step(model, optimizer, hw.scaler, recipe.clip_grad)
        if recipe.ema is not None:
            recipe.ema.update_parameters(model)
        if scheduler is not None:
            scheduler.step()
        step += 1
        if step_losses is not None:
            step_losses.append(torch.stack(group_losses).mean())
            group_losses.clear()
        if (step - 1) % log_every == 0:
            _check_finite(bad_step, epoch)
            if progress:
                bar.set_postfix({**_summary(loss_sum, correct, totals.seen),
                                 "img/s": f"{totals.seen / (time.perf_counter() - start):.0f}"})
        if after_step is not None:
            after_step(step, totals)
    _check_finite(bad_step, epoch)
    loss_sum, correct, seen = reduce_sums(loss_sum, correct, totals.seen)  # over every rank under ddp
    means = _summary(loss_sum, correct, seen)
    return EpochStats(means["loss"], means["acc"], seen, totals.seconds_before + time.perf_counter() - start)


def no_sync(model: nn.Module) -> contextlib.AbstractContextManager:
    """DDP's no_sync() for a micro-batch whose gradients only add up locally (a no-op without DDP).

    Under DDP every backward all-reduces the gradients; with --accum-steps N only the group's last
    micro-batch needs to, so the others skip N - 1 of every N all-reduces. torch.compile's wrapper
    (`_orig_mod`) is looked through.
    """
    inner = getattr(model, "_orig_mod", model)
    return inner.no_sync() if isinstance(inner, DistributedDataParallel) else contextlib.nullcontext()


def _optimizer_step(model: nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                    clip_grad: float | None) -> None:
    """One optimizer step from the accumulated gradients, clipped first if asked; then clear them."""
    if clip_grad is not None:
        scaler.unscale_(optimizer)  # clip the true gradients, not the fp16-scaled ones
        nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


@torch.inference_mode()
def evaluate(model: nn.Module, loss_fn: nn.Module, val_loader, hw: Hardware, *, progress: bool = True,
             confusion: torch.Tensor | None = None,
             on_batch: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None] | None = None) -> EpochStats:
    """Mean loss and accuracy of `model` over `val_loader`, without gradients.

    The one evaluation loop: training's validation and evaluate.py both run it, so their numbers
    agree. Pass a (C, C) `confusion` matrix (metrics.new_confusion) to also count predictions in it (summed
over every rank under ddp), and
    `on_batch(images, targets, logits)` to see every batch (e.g. metrics.ConfidentMistakes).
    """
    model.eval()
    device = hw.device
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    seen, start = 0, time.perf_counter()
    for images, targets in tqdm(val_loader, desc="validate", disable=not progress, leave=False):
        images, targets = hw.batch(images, targets)
        with hw.autocast():
            logits = model(images)
        predictions = logits.argmax(dim=1)  # (B,)
        loss_sum += loss_fn(logits, targets) * targets.size(0)
        correct += (predictions == targets).sum()
        seen += targets.size(0)
        if confusion is not None:
            update_confusion(confusion, predictions, targets)
        if on_batch is not None:
            on_batch(images, targets, logits)
    loss_sum, correct, seen = reduce_sums(loss_sum, correct, seen)  # over every rank under ddp
    if confusion is not None:
        sum_over_ranks(confusion)  # every rank's counts: the figures cover the whole split
    totals = _summary(loss_sum, correct, seen)
    return EpochStats(totals["loss"], totals["acc"], seen, time.perf_counter() - start)
