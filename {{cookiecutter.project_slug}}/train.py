"""Train the image classifier.

    python train.py --device cuda:1 --epochs 10 --out runs/exp1

The device is resolved once (`config.configure_device`) and passed down to every piece.
Exit codes: 0 done, 1 failure, 2 bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from pathlib import Path

import torch

from {{ cookiecutter.package_name }} import __version__, backbones, config
from {{ cookiecutter.package_name }}.cache import cache_splits
from {{ cookiecutter.package_name }}.checkpoint import (
    CheckpointError, load_checkpoint, load_model_state, model_state, remove_partial_writes, save_checkpoint, to_cpu,
)
from {{ cookiecutter.package_name }}.cli import run_cli
from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.data import (
    DEMO_IMAGE_SIZE, DEMO_ROOT, DataError, build_loader, class_counts, load_splits, write_demo_dataset,
)
from {{ cookiecutter.package_name }}.devices import DeviceGuard, describe_device, device_report
from {{ cookiecutter.package_name }}.engine import evaluate, train_one_epoch
from {{ cookiecutter.package_name }}.interrupts import StopRequest, TrainingInterrupted, pause_point
from {{ cookiecutter.package_name }}.loss import WeightedCrossEntropy, balanced_class_weights
from {{ cookiecutter.package_name }}.model import build_model
from {{ cookiecutter.package_name }}.outputs import plot_curves, read_metrics, run_environment, write_json, write_metrics
from {{ cookiecutter.package_name }}.parallel import (check_replicas_agree, eval_shard, first_on_any_rank, for_evaluation,
                                     is_distributed, is_main_process, main_process_first, print_main, resolve_parallel,
                                     start_distributed, stop_distributed, train_sampler, world_size, wrap_model)
from {{ cookiecutter.package_name }}.precision import make_policy, resolve_precision
from {{ cookiecutter.package_name }}.reproducibility import rng_state, seed_epoch, seed_everything, set_rng_state


def get_args_parser() -> argparse.ArgumentParser:
    """The training flags; defaults come from TrainConfig."""
    d = TrainConfig()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=d.data, help="ImageFolder root with train/ and val/ (default: built-in demo data)")
    p.add_argument("--device", default=d.device,
                   help=f"auto, cpu, cuda, cuda:N, mps, xpu (default: ${config.DEVICE_ENV_VAR}, else {config.DEFAULT_DEVICE})")
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--workers", type=int, default=d.workers, help="DataLoader worker processes")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--image-size", type=int, default=d.image_size,
                   help=f"default: {DEMO_IMAGE_SIZE} for the demo data, else what the backbone expects")
    p.add_argument("--backbone", default=d.backbone, help="any torchvision classification model name")
    # None = not given: the project default then applies, falling back with a note where it cannot run
    p.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default=None,
                   help=f"autocast dtype; fp16 adds a GradScaler on CUDA (default: {d.precision})")
    p.add_argument("--parallel", choices=("none", "dp", "ddp"), default=None,
                   help=f"dp: DataParallel over the visible GPUs; ddp: one process per device under torchrun "
                        f"(default: {d.parallel})")
    p.add_argument("--channels-last", action="store_true", default=d.channels_last,
                   help="NHWC memory format for the model and its inputs (faster convolutions on tensor cores)")
    p.add_argument("--cache-images", action="store_true", default=d.cache_images,
                   help="decode the data once into memory (uint8, resized) so small runs are compute-bound")
    p.add_argument("--cache-budget-mb", type=int, default=d.cache_budget_mb,
                   help="memory --cache-images may use; larger datasets are refused (default: %(default)s)")
    p.add_argument("--compile", action="store_true", default=d.compile, help="torch.compile the model")
    p.add_argument("--pretrained", action=argparse.BooleanOptionalAction, default=d.pretrained,
                   help="start from ImageNet weights (needs a download or a cached file)")
    p.add_argument("--label-smoothing", type=float, default=d.label_smoothing)
    p.add_argument("--out", default=d.out, help="run directory for checkpoints, metrics and plots")
    p.add_argument("--resume", default=d.resume, help="a checkpoint file or a run directory to continue")
    p.add_argument("--verbose", action="store_true", help="print the model's device report, and tracebacks on failure")
    p.add_argument("--debug-devices", action="store_true",
                   help="guard every submodule: a misplaced input names the submodule and both devices")
    return p


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig named by the parsed flags."""
    names = {field.name for field in dataclasses.fields(TrainConfig)}
    return TrainConfig(**{key: value for key, value in vars(args).items() if key in names})


def check_numbers(cfg: TrainConfig) -> None:
    """Refuse sizes and counts that cannot work, before anything is built."""
    for name in ("epochs", "batch_size"):
        if getattr(cfg, name) < 1:
            raise DataError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(cfg, name)}")
    if cfg.workers < 0 or (cfg.image_size is not None and cfg.image_size < 16):
        raise DataError("--workers must be >= 0 and --image-size >= 16")
    backbones.check_backbone(cfg.backbone)
    if cfg.image_size:
        backbones.check_image_size(cfg.backbone, cfg.image_size)


def default_image_size(cfg: TrainConfig) -> int:
    """The demo's native size (or the nearest the backbone takes), else the backbone's own size."""
    if cfg.image_size:
        return cfg.image_size
    if cfg.data is None:
        return backbones.fit_image_size(cfg.backbone, DEMO_IMAGE_SIZE)
    return backbones.default_image_size(cfg.backbone)  # its weights' crop size: 224 for most, 299 for inception_v3


class Run:
    """Everything one training run builds, on one device, before the first epoch."""

    def __init__(self, cfg: TrainConfig, device: torch.device):
        self.cfg, self.device = cfg, device
        self.policy = make_policy(cfg.precision, device)
        with main_process_first():  # under ddp, one rank writes the demo data
            root = Path(cfg.data) if cfg.data else write_demo_dataset(DEMO_ROOT)
        self.image_size = default_image_size(cfg)
        train_set, val_set = load_splits(root, self.image_size)
        if cfg.cache_images:  # decode once: small runs become compute-bound (see cache.py)
            train_set, val_set = cache_splits(train_set, val_set, self.image_size, cfg.cache_budget_mb, cfg.workers)
        self.class_names = train_set.classes
        self.train_loader = build_loader(train_set, cfg.batch_size, device, train=True, workers=cfg.workers,
                                         seed=cfg.seed, sampler=train_sampler(train_set, cfg.seed))
        self.val_loader = build_loader(val_set, cfg.batch_size, device, train=False, workers=cfg.workers,
                                       sampler=eval_shard(val_set))
        self.model = build_model(cfg.backbone, len(self.class_names), pretrained=cfg.pretrained, device=device,
                                 image_size=self.image_size)
        self.memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
        self.model = self.model.to(memory_format=self.memory_format)
        self.loss_fn = WeightedCrossEntropy(balanced_class_weights(class_counts(train_set)),
                                            cfg.label_smoothing).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        steps = cfg.epochs * len(self.train_loader)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=max(steps, 1))
        self.scaler = self.policy.grad_scaler()
        self.net = wrap_model(self.model, cfg.parallel, device, compile=cfg.compile)
        self.start_epoch, self.best_acc, self.rows = 1, -1.0, []
        self.stop = StopRequest()  # flagged by SIGINT/SIGTERM once train() installs it

    def state(self, epoch: int) -> dict:
        """A checkpoint of this run after `epoch`: CPU tensors and plain values only."""
        return {
            "model": model_state(self.model),
            "optimizer": to_cpu(self.optimizer.state_dict()),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "epoch": epoch,
            "best_val_acc": self.best_acc,
            "config": self.cfg.to_dict(),
            "class_names": list(self.class_names),
            "image_size": self.image_size,
            "version": __version__,
            "rng": rng_state(),
            "metrics": [dict(row) for row in self.rows],  # resume restores metrics.csv from here
        }

    def resume(self, path: str) -> None:
        """Continue after the last completed epoch of a checkpoint."""
        state = load_checkpoint(path, map_location=self.device)
        load_model_state(self.model, state["model"], path)
        if state.get("class_names", self.class_names) != list(self.class_names):
            raise CheckpointError(f"{path} was trained on classes {state['class_names']}, the data has {self.class_names}")
        self.optimizer.load_state_dict(state["optimizer"])  # moves its state to the params' device
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        if "rng" in state:
            set_rng_state(state["rng"])
        self.start_epoch, self.best_acc = state["epoch"] + 1, state["best_val_acc"]
        rows = state.get("metrics") or read_metrics(Path(self.cfg.out) / "metrics.csv")
        self.rows = [row for row in rows if row["epoch"] <= state["epoch"]]


def begin_epoch(run: Run, epoch: int) -> None:
    """Derive the epoch's randomness from (seed, epoch) alone, so a resumed run redraws it exactly."""
    seed_epoch(run.cfg.seed, epoch)
    run.train_loader.sampler.set_epoch(epoch)


def run_epoch(run: Run, epoch: int) -> dict:
    """Train and validate once; return the epoch's metrics row."""
    begin_epoch(run, epoch)
    # Under ddp the stop request is settled between epochs (all ranks must agree), not per step.
    after_step = None if is_distributed() else functools.partial(run.stop.check, epoch)
    train = train_one_epoch(run.net, run.loss_fn, run.optimizer, run.train_loader, run.device,
                            policy=run.policy, scaler=run.scaler, scheduler=run.scheduler, epoch=epoch,
                            progress=is_main_process(), memory_format=run.memory_format, after_step=after_step)
    pause_point(f"validate:{epoch}")
    val = evaluate(for_evaluation(run.net), run.loss_fn, run.val_loader, run.device, policy=run.policy,
                   progress=is_main_process(), memory_format=run.memory_format)
    return {"epoch": epoch, "train_loss": round(train.loss, 6), "train_acc": round(train.acc, 6),
            "val_loss": round(val.loss, 6), "val_acc": round(val.acc, 6),
            "lr": run.optimizer.param_groups[0]["lr"], "epoch_time_s": round(train.seconds + val.seconds, 3),
            "images_per_s": round(train.images_per_s, 1)}


def save_epoch(run: Run, row: dict, out: Path) -> None:
    """Write last.pt, best.pt when validation improved, metrics.csv and curves.png."""
    run.rows.append(row)
    improved = row["val_acc"] > run.best_acc
    run.best_acc = max(run.best_acc, row["val_acc"])
    if not is_main_process():  # under ddp, rank 0 alone writes
        return
    state = run.state(row["epoch"])
    write_metrics(out / "metrics.csv", run.rows)
    plot_curves(out / "curves.png", run.rows)
    # last.pt is written last: it is the commit point that --resume continues from, so a kill
    # before it only repeats this epoch (and rewrites the same metrics and best.pt).
    for name in ("best.pt", "last.pt") if improved else ("last.pt",):
        save_checkpoint(out / name, state, before_replace=functools.partial(pause_point, f"save:{name}:{row['epoch']}"))


def resolve_modes(cfg: TrainConfig, device: torch.device) -> TrainConfig:
    """Settle --parallel and --precision: explicit values must run here, defaults may fall back."""
    defaults = TrainConfig()  # the template's answers
    return dataclasses.replace(cfg, parallel=resolve_parallel(cfg.parallel, defaults.parallel, device),
                               precision=resolve_precision(cfg.precision, defaults.precision, device))


def train(cfg: TrainConfig, *, verbose: bool = False, debug_devices: bool = False) -> int:
    """Build everything, then train; nothing is written until all inputs have been checked."""
    check_numbers(cfg)
    device = config.configure_device(cfg.device)
    cfg = resolve_modes(cfg, device)
    start_distributed(cfg.parallel, device)  # stopped in main()'s finally
    ranks = f", one of {world_size()} ddp ranks" if cfg.parallel == "ddp" else ""
    print_main(f"device: {describe_device(device)}{ranks}")
    seed_everything(cfg.seed)  # the initial weights too: same seed, same run
    run = Run(cfg, device)
    if verbose:
        print_main(device_report(run.model))
    if debug_devices:
        DeviceGuard(run.model)  # lives as long as the model: its hooks are the model's
    if cfg.resume:
        run.resume(cfg.resume)
    out = Path(cfg.out)
    if is_main_process():
        write_json(out / "config.json", {**cfg.to_dict(), "resolved_device": str(device),
                                         "image_size": run.image_size, "class_names": run.class_names,
                                         "environment": run_environment()})  # versions and command, to rerun it
        if cfg.resume:  # what a kill mid-write left behind
            remove_partial_writes(out)
        else:  # epoch 0: even a run killed in its first epoch can be resumed
            save_checkpoint(out / "last.pt", run.state(0))
    with run.stop.installed():
        try:
            signum = train_epochs(run, out)
        except TrainingInterrupted as stop:
            print(f"stopped by {stop}: {out / 'last.pt'} holds epoch {stop.epoch - 1}; "
                  f"continue with --resume {out}", file=sys.stderr, flush=True)
            return stop.exit_code
    if signum is not None:  # the signal came during the last validation or save: both finished
        print(f"stopped: {out / 'last.pt'} holds epoch {cfg.epochs}", file=sys.stderr, flush=True)
        return 128 + signum
    if cfg.parallel == "ddp":
        print_main(f"ddp: weights identical on every rank (sha256 {check_replicas_agree(run.net)[:12]})")
    print_main(f"done: {out / 'last.pt'} (best val_acc {run.best_acc:.3f})")
    return 0


def train_epochs(run: Run, out: Path) -> int | None:
    """Train from run.start_epoch to the last epoch, saving each; stop between epochs on request.

    Returns the stop signal that arrived during the last epoch (None if none), agreed by all ranks.
    """
    cfg = run.cfg
    signum = first_on_any_rank(run.stop.signum)  # also the answer when no epoch is left to run
    for epoch in range(run.start_epoch, cfg.epochs + 1):
        row = run_epoch(run, epoch)
        save_epoch(run, row, out)
        print_main(f"epoch {epoch}/{cfg.epochs}  train_loss {row['train_loss']:.4f}  train_acc {row['train_acc']:.3f}  "
                   f"val_loss {row['val_loss']:.4f}  val_acc {row['val_acc']:.3f}  {row['images_per_s']:.0f} img/s")
        signum = first_on_any_rank(run.stop.signum)
        if signum is not None and epoch < cfg.epochs:
            raise TrainingInterrupted(signum, epoch + 1, 0)
    return signum


def main(argv: list[str] | None = None) -> int:
    """Parse flags and train; returns the exit code."""
    args = get_args_parser().parse_args(argv)
    try:
        return run_cli(lambda: train(config_from_args(args), verbose=args.verbose, debug_devices=args.debug_devices),
                       verbose=args.verbose)
    finally:
        stop_distributed()  # on success and on error alike


if __name__ == "__main__":
    sys.exit(main())
