"""A run's epochs: train and validate each, save it, tell the plugins; and what happens at each step boundary.

A stop request ends a run one way: TrainingInterrupted, agreed by every process, raised after a step
(its mid-epoch checkpoint written) or after an epoch's checkpoint is written.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from pathlib import Path

import torch

from .. import outputs, task
from ..devkit.atomic import atomic_link
from ..errors import one_line
from . import loop, plugin_calls, recipe, run_state, seeding, stopping
from .run import Run


def at_step_boundary(run: Run, out: Path, epoch: int, step: int, totals: loop.RunningTotals) -> None:
    """After each optimizer step: the plugins hear of it; save a mid-epoch last.pt when a signal came or the clock
    says so, and stop.

    With several processes every one takes the same decision at the same step (one small agreement of host
    values, never waiting for the device), so they stop together and the checkpoint holds a step all completed.
    """
    failure = plugin_calls.tell(run, "after_step", epoch, step)  # a plugin that failed: saved as a signal would be
    signum, save_due, failed = run.processes.max([run.stop.signum or 0, int(run.save_clock.due()),
                                                  int(failure is not None)])
    if signum or save_due or failed:
        epoch_totals = totals.saved(run.hw)  # a collective with several processes: every one calls it
        if run.processes.is_main():
            run_state.save(out / "last.pt", run.state(epoch, step, epoch_totals))
        run.save_clock.reset()
    if failed:
        raise plugin_calls.PluginFailed(failure, "after_step", epoch, step)
    if signum:
        raise stopping.TrainingInterrupted(signum, epoch, step)


def _metrics_row(run: Run, epoch: int, train_stats: loop.EpochStats, val_stats: loop.EpochStats) -> dict:
    """metrics.csv's row for an epoch (the fixed columns first, then task.py's figures as `val_<name>`); every
    column reaches every plugin."""
    return {"epoch": epoch, "train_loss": round(train_stats.loss, 6), "train_acc": round(train_stats.acc, 6),
            "val_loss": round(val_stats.loss, 6), "val_acc": round(val_stats.acc, 6),
            "lr": run.optimizer.param_groups[-1]["lr"],  # the last group's: the head's where a plugin made groups
            "epoch_time_s": round(train_stats.seconds + val_stats.seconds, 3),
            "images_per_s": round(train_stats.images / max(train_stats.seconds, 1e-9), 1),
            "unreadable_images": run.unreadable.count(),
            **{f"val_{name}": round(value, 6) for name, value in val_stats.figures.items()}}


def run_epoch(run: Run, epoch: int, out: Path) -> dict:
    """Train and validate once (the rest of the epoch, after a mid-epoch resume); return its metrics row."""
    cfg = run.cfg
    start_step = run.start_step if epoch == run.start_epoch else 0
    if not start_step:
        # The epoch's randomness derives from (seed, epoch) alone, so a resumed run redraws it exactly.
        # Mid-epoch, the checkpoint restored the RNG states of that step boundary instead.
        seeding.seed_epoch(cfg.seed, epoch)
    # start_step counts optimizer steps; each took --accum-steps batches
    run.train_loader.sampler.set_epoch(epoch, start=start_step * cfg.accum_steps * cfg.batch_size)
    failure = plugin_calls.tell(run, "before_epoch", epoch)
    if plugin_calls.agreed(run, failure):  # last.pt holds where this epoch starts
        raise plugin_calls.PluginFailed(failure, "before_epoch", epoch, start_step)
    collect = any(getattr(plugin, "wants_step_losses", False) for plugin in run.plugins)
    plan = loop.EpochPlan(epoch, start_step, loop.RunningTotals.start(run.device, run.resumed_totals
                                                                     if start_step else None),
                          functools.partial(at_step_boundary, run, out, epoch), [] if collect else None)
    progress = run.cfg.progress if run.processes.is_main() else "none"
    train_stats = loop.train_one_epoch(run.wrapped_model, run.loss_fn, run.optimizer, run.train_loader, run.hw,
                                       recipe=run.step_recipe, epoch=plan, progress=progress)
    run.step_losses = torch.stack(plan.step_losses) if plan.step_losses else None  # on the device
    val_stats = loop.evaluate(run.processes.for_evaluation(run.wrapped_model), run.loss_fn, run.val_loader, run.hw,
                              progress=progress, metrics=task.Metrics(len(run.class_names), run.device))
    run.unreadable.pool(run.processes)
    run.unreadable.check()  # too many unreadable files: stop (exit 2) rather than train on what is left
    row = _metrics_row(run, epoch, train_stats, val_stats)
    # other weights validated too (the EMA's): best.pt keeps whichever is better
    failure = plugin_calls.tell(run, "validated", row)
    if plugin_calls.agreed(run, failure):  # the epoch is trained and validated: kept, as a signal would keep it
        save_epoch(run, row, out)
        raise plugin_calls.PluginFailed(failure, "validated", epoch + 1, 0)
    return row


def save_epoch(run: Run, row: dict, out: Path) -> None:
    """Write best.pt when validation improved, last.pt, then metrics.csv and curves.png."""
    from .. import plots  # matplotlib only loads when a run gets this far (not for --help or a refused flag)

    run.rows.append(row)
    score, weights = recipe.epoch_score(row)
    improved = score > run.best_acc
    run.best_acc = max(run.best_acc, score)
    if not run.processes.is_main():  # one process writes
        return
    state = run.state(row["epoch"])
    best = state if weights == "model" else run.state(row["epoch"], weights=weights)
    # last.pt is the commit point that --resume continues from, so a kill before it only repeats this
    # epoch (and rewrites the same best.pt). metrics.csv and curves.png follow it: they never show an
    # epoch that no checkpoint holds (a full disk stops the run at the checkpoint, before them).
    if improved:
        run_state.save(out / "best.pt", best)
    if improved and best is state:  # the same state: its bytes once, not a second serialisation and write
        atomic_link(out / "best.pt", out / "last.pt")
    else:
        run_state.save(out / "last.pt", state)
    outputs.write_metrics(out / "metrics.csv", run.rows)
    plots.save_figure(plots.curves_figure(run.rows), out / "curves.png")
    run.save_clock.reset()


def tell_epoch(run: Run, plugin, row: dict) -> None:
    """A saved epoch to a plugin; an optional one that fails (a tracker) is a warning, and the run goes on."""
    try:
        plugin.after_epoch(run, row)
    except Exception as error:  # a corrupted store, a killed service, a full disk on the tracker's side
        if not plugin.optional:  # the epoch is saved: the run ends there
            raise plugin_calls.PluginFailed((plugin.name, "after_epoch", error), "after_epoch", row["epoch"] + 1,
                                            0) from error
        reason = one_line(error)[:200]
        print(f"warning: {plugin.name} failed at epoch {row['epoch']} ({type(error).__name__}: {reason}); "
              "metrics.csv and the checkpoints go on without it", file=sys.stderr, flush=True)
        with contextlib.suppress(Exception):
            plugin.close(run)
        run.plugins.remove(plugin)


def train_epochs(run: Run, out: Path) -> None:
    """Train from run.start_epoch to the last epoch, saving each; TrainingInterrupted on a stop request."""
    cfg = run.cfg
    for epoch in range(run.start_epoch, cfg.epochs + 1):
        row = run_epoch(run, epoch, out)
        save_epoch(run, row, out)  # first: the epoch is kept whatever a plugin does after
        for plugin in list(run.plugins):
            tell_epoch(run, plugin, row)
        others = "".join(f"  {key} {value:.3f}" for key, value in row.items() if key.endswith("_val_acc"))  # plugins'
        run.processes.print(f"epoch {epoch}/{cfg.epochs}  train_loss {row['train_loss']:.4f}  train_acc "
                            f"{row['train_acc']:.3f}  val_loss {row['val_loss']:.4f}  val_acc {row['val_acc']:.3f}  "
                            f"{row['images_per_s']:.0f} img/s{others}")
        signum = run.processes.max([run.stop.signum or 0])[0]
        if signum:
            raise stopping.TrainingInterrupted(signum, epoch + 1, 0)
        if cfg.patience and recipe.epochs_without_improvement(run.rows) >= cfg.patience:
            run.processes.print(f"early stop: val_acc has not improved for {cfg.patience} epochs "
                                f"(best {run.best_acc:.3f})")
            return
