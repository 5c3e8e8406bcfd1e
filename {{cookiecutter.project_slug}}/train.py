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
import tqdm

from {{ cookiecutter.package_name }} import (
    backbones,
    cache,
    checkpoint,
    cli,
    config,
    data,
    datacheck,
    devices,
    engine,
    finetune,
    interrupts,
    loss,
    model,
    outputs,
    parallel,
    plots,
    precision,
    replay,
    reproducibility,
    run_checkpoint,
    rundir,
    tracking,
)
from {{ cookiecutter.package_name }}.errors import ConfigError


def get_args_parser() -> argparse.ArgumentParser:
    """The training flags; defaults come from TrainConfig."""
    d = config.TrainConfig()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=d.data,
                   help="ImageFolder root with train/ and val/, or class folders split by --val-split "
                        "(default: built-in demo data)")
    p.add_argument("--device", default=d.device,
                   help=f"auto, cpu, cuda, cuda:N, mps, xpu "
                        f"(default: ${config.DEVICE_ENV_VAR}, else {config.DEFAULT_DEVICE})")
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--workers", type=int, default=d.workers, help="DataLoader worker processes")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--image-size", type=int, default=d.image_size,
                   help=f"default: {data.DEMO_IMAGE_SIZE} for the demo data; the weights' crop when pretrained; "
                        "else the data's typical image size")
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
    # None = not given: the project default then applies, falling back to scratch with a note when offline
    p.add_argument("--pretrained", action=argparse.BooleanOptionalAction, default=None,
                   help=f"start from ImageNet weights (needs a download or a cached file; default: {d.pretrained})")
    p.add_argument("--label-smoothing", type=float, default=d.label_smoothing)
    p.add_argument("--out", default=d.out,
                   help="run directory for checkpoints, metrics and plots (default: a new runs/<timestamp>, "
                        "linked as runs/latest)")
    p.add_argument("--resume", default=d.resume,
                   help="a checkpoint file or a run directory to continue; auto: OUT/last.pt if it exists, "
                        "else start fresh (for restarted and requeued jobs)")
    p.add_argument("--overwrite", action="store_true", default=d.overwrite,
                   help="start afresh in an --out that holds another run's checkpoints, replacing them")
    p.add_argument("--max-bad-fraction", type=float, default=d.max_bad_fraction,
                   help="unreadable images are skipped (with a warning); more than this fraction of a split "
                        "stops the run (default: %(default)s)")
    p.add_argument("--save-every-minutes", type=float, default=d.save_every_minutes,
                   help="also save a mid-epoch last.pt this often, so a kill -9 loses at most that much "
                        "(default: at epoch ends and on SIGINT/SIGTERM only)")
    p.add_argument("--logger", choices=tracking.LOGGERS, default=d.logger,
                   help="tensorboard: event files in --out (needs pip install -e '.[tensorboard]')")
    p.add_argument("--config", metavar="FILE",
                   help="a run's config.json: replay its settings (flags given beside it win; --out is not taken)")
    p.add_argument("--verbose", action="store_true", help="print the model's device report, and tracebacks on failure")
    p.add_argument("--debug-devices", action="store_true",
                   help="guard every submodule: a misplaced input names the submodule and both devices")
    finetune.add_arguments(p, d)
    return p


def config_from_args(args: argparse.Namespace) -> config.TrainConfig:
    """The TrainConfig named by the parsed flags."""
    names = {field.name for field in dataclasses.fields(config.TrainConfig)}
    return config.TrainConfig(**{key: value for key, value in vars(args).items() if key in names})


def with_config_file(parser: argparse.ArgumentParser, args: argparse.Namespace,
                     argv: list[str] | None) -> argparse.Namespace:
    """The flags parsed again on top of --config FILE's values, so that flags given on the command line win."""
    if not args.config:
        return args
    choices = {action.dest: action.choices for action in parser._actions if action.choices}
    parser.set_defaults(**replay.read_config_file(args.config, choices))
    return parser.parse_args(argv)


def check_numbers(cfg: config.TrainConfig) -> None:
    """Refuse sizes and counts that cannot work, before anything is built."""
    for name in ("epochs", "batch_size"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(cfg, name)}")
    if cfg.workers < 0 or (cfg.image_size is not None and cfg.image_size < 16):
        raise ConfigError("--workers must be >= 0 and --image-size >= 16")
    if cfg.save_every_minutes < 0 or not 0 <= cfg.max_bad_fraction < 1:
        raise ConfigError("--save-every-minutes must be >= 0 and --max-bad-fraction in [0, 1)")
    backbones.check_backbone(cfg.backbone)
    if cfg.image_size:
        backbones.check_image_size(cfg.backbone, cfg.image_size)
    for problem in finetune.check_config(cfg):
        raise ConfigError(problem)


def resolve_modes(cfg: config.TrainConfig, device: torch.device) -> tuple[config.TrainConfig, list[str]]:
    """Settle --parallel and --precision: explicit values must run here, defaults may fall back (with notes)."""
    defaults = config.TrainConfig()  # the template's answers
    parallel_mode, parallel_note = parallel.resolve_parallel(cfg.parallel, defaults.parallel, device)
    precision_name, precision_note = precision.resolve_precision(cfg.precision, defaults.precision, device)
    notes = [note for note in (parallel_note, precision_note) if note]
    return dataclasses.replace(cfg, parallel=parallel_mode, precision=precision_name), notes


def resolve_weights(cfg: config.TrainConfig, resuming: bool) -> tuple[config.TrainConfig, str | None]:
    """Settle --pretrained: a resumed run or --init-from brings its own weights; a default may fall back offline."""
    explicit = cfg.pretrained is not None
    requested = (cfg.pretrained if explicit else config.TrainConfig().pretrained) and not (resuming or cfg.init_from)
    pretrained, note = model.resolve_pretrained(cfg.backbone, requested, explicit)
    return dataclasses.replace(cfg, pretrained=pretrained), note


class Run:
    """Everything one training run builds, on one device, before the first epoch.

    `model` is the plain model: checkpoints are saved from it and loaded into it. `wrapped_model`
    is what the steps run through: the same model inside DataParallel, DDP and/or torch.compile.
    """

    def __init__(self, cfg: config.TrainConfig, device: torch.device):
        self.cfg, self.device = cfg, device
        self.policy = precision.make_policy(cfg.precision, device)
        with parallel.main_process_first():  # under ddp, one rank writes the demo data
            root = Path(cfg.data) if cfg.data else data.write_demo_dataset(data.DEMO_ROOT)
        # The weights' own preprocessing: a checkpoint's when continuing or starting from one
        source = run_checkpoint.read(cfg.resume or cfg.init_from) if cfg.resume or cfg.init_from else None
        if source and not cfg.image_size:
            self.preprocessing = run_checkpoint.preprocessing(source)
        else:
            self.preprocessing = data.choose_preprocessing(cfg.backbone, cfg.data and root, cfg.image_size,
                                                           cfg.pretrained)
        self.image_size = self.preprocessing.image_size
        train_set, val_set = data.load_splits(root, self.preprocessing, val_split=cfg.val_split, seed=cfg.seed)
        if cfg.cache_images:  # decode once: small runs become compute-bound (see cache.py)
            train_set, val_set = cache.cache_splits(train_set, val_set, self.image_size, cfg.cache_budget_mb,
                                                    cfg.workers)
        self.class_names = train_set.classes
        # Unreadable images are skipped, reported once and counted, not fatal (datacheck.py); cached data has none.
        self.unreadable = datacheck.UnreadableLog({"train": len(train_set), "val": len(val_set)}, cfg.max_bad_fraction)
        train_source, val_source = ((train_set, val_set) if cfg.cache_images else
                                    (datacheck.SkipUnreadable(train_set), datacheck.SkipUnreadable(val_set)))
        self.train_loader = datacheck.ReportingLoader(
            data.build_loader(train_source, cfg.batch_size, device, train=True, workers=cfg.workers, seed=cfg.seed,
                              sampler=parallel.train_sampler(train_set, cfg.seed)),
            functools.partial(self.note_unreadable, "train"))
        self.val_loader = datacheck.ReportingLoader(
            data.build_loader(val_source, cfg.batch_size, device, train=False, workers=cfg.workers,
                              sampler=parallel.eval_shard(val_set)),
            functools.partial(self.note_unreadable, "val"))
        self.memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
        self.model = model.build_model(cfg.backbone, len(self.class_names), pretrained=cfg.pretrained,
                                       device=device, image_size=self.image_size).to(memory_format=self.memory_format)
        if cfg.init_from:  # a fresh head where the classes differ
            self.fresh = run_checkpoint.init_model_from(source, self.model, cfg.init_from)
        class_weights = loss.balanced_class_weights(data.class_counts(train_set))
        self.loss_fn = loss.WeightedCrossEntropy(class_weights, cfg.label_smoothing).to(device)
        self.optimizer = finetune.make_optimizer(self.model, cfg)
        self.scheduler = finetune.make_scheduler(self.optimizer, cfg, len(self.train_loader))
        self.scaler = self.policy.grad_scaler()
        self.ema = finetune.make_ema(self.model, cfg.ema) if cfg.ema else None
        self.mix = finetune.batch_mixer(cfg.mixup, cfg.cutmix, len(self.class_names))
        finetune.freeze_backbone(self.model, finetune.backbone_frozen(1, cfg.freeze_backbone, cfg.unfreeze_at))
        self.wrapped_model = parallel.wrap_model(self.model, cfg.parallel, device, compile=cfg.compile)
        self.start_epoch, self.start_step, self.best_acc, self.rows = 1, 0, -1.0, []
        self.resumed_totals: dict | None = None  # a mid-epoch checkpoint's sums for the epoch it continues
        self.stop = interrupts.StopRequest()  # flagged by SIGINT/SIGTERM once train() installs it
        self.logger, self.step_losses = tracking.Logger(), None  # open_logger() replaces the no-op logger
        self.save_clock = interrupts.SaveClock(cfg.save_every_minutes)

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps in one epoch (batches grouped by --accum-steps): the logger's step axis."""
        return finetune.optimizer_steps_per_epoch(len(self.train_loader), self.cfg.accum_steps)

    def state(self, epoch: int, step: int = 0, epoch_totals: dict | None = None, weights: str = "model") -> dict:
        """A checkpoint after `step` optimizer steps of `epoch`, 0: the whole epoch (layout: run_checkpoint.py).

        `weights="ema"`: the averaged weights go under `model` (a best.pt where they validated better).
        """
        return run_checkpoint.training_state(
            model=self.model, optimizer=self.optimizer, scheduler=self.scheduler, scaler=self.scaler,
            loss_fn=self.loss_fn, epoch=epoch, best_val_acc=self.best_acc, config=self.cfg.to_dict(),
            class_names=self.class_names, image_size=self.image_size, metrics=self.rows,
            preprocessing=self.preprocessing, ema=self.ema, weights=weights, step=step,
            epoch_totals=epoch_totals, unreadable=self.unreadable.state())

    def note_unreadable(self, split: str, path: str, reason: str) -> None:
        """Warn the first time an image turns out unreadable (on the rank that read it)."""
        if self.unreadable.add(split, path):
            tqdm.tqdm.write(f"warning: skipping unreadable image {path}: {reason}", file=sys.stderr)  # above the bar

    def resume(self, path: str) -> None:
        """Continue where a checkpoint stopped: after its epoch, or at its step inside the epoch."""
        state = run_checkpoint.read(path, map_location=self.device)
        run_checkpoint.check_classes(state, self.class_names, path)
        run_checkpoint.restore_training(state, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler,
                                        scaler=self.scaler, source=path, ema=self.ema)
        self.start_epoch, self.start_step = run_checkpoint.resume_position(state)
        # The saved sums are every rank's together: rank 0 alone carries them on.
        self.resumed_totals = state.get("epoch_totals") if self.start_step and parallel.is_main_process() else None
        self.best_acc = state["best_val_acc"]
        self.unreadable.found.update({split: set(paths) for split, paths in state.get("unreadable", {}).items()})
        self.rows = run_checkpoint.metrics_until_epoch(state, outputs.read_metrics(Path(self.cfg.out) / "metrics.csv"))


def at_step_boundary(run: Run, out: Path, epoch: int, step: int, totals: engine.RunningTotals) -> None:
    """After each optimizer step: save a mid-epoch last.pt when a signal came or the clock says so, and stop.

    Under ddp every rank takes the same decision at the same step (one small all-reduce), so the
    ranks stop together and the checkpoint holds a step every rank completed.
    """
    interrupts.pause_point(f"step:{epoch}:{step}", until=run.stop)
    signum, save_due = parallel.max_on_any_rank([run.stop.signum or 0, int(run.save_clock.due())], run.device)
    if signum or save_due:
        epoch_totals = totals.saved()  # a collective under ddp: every rank calls it
        if parallel.is_main_process():
            pause = functools.partial(interrupts.pause_point, f"save:last.pt:{epoch}:{step}")
            run_checkpoint.save(out / "last.pt", run.state(epoch, step, epoch_totals), before_replace=pause)
        run.save_clock.reset()
    if signum:
        raise interrupts.TrainingInterrupted(signum, epoch, step)


def run_epoch(run: Run, epoch: int, out: Path) -> dict:
    """Train and validate once (the rest of the epoch, after a mid-epoch resume); return its metrics row."""
    start_step = run.start_step if epoch == run.start_epoch else 0
    if not start_step:
        # The epoch's randomness derives from (seed, epoch) alone, so a resumed run redraws it exactly.
        # Mid-epoch, the checkpoint restored the RNG states of that step boundary instead.
        reproducibility.seed_epoch(run.cfg.seed, epoch)
    # start_step counts optimizer steps; each took --accum-steps batches
    run.train_loader.sampler.set_epoch(epoch, start=start_step * run.cfg.accum_steps * run.cfg.batch_size)
    totals = engine.RunningTotals.start(run.device, run.resumed_totals if start_step else None)
    progress = parallel.is_main_process()
    cfg = run.cfg
    if finetune.freeze_backbone(run.model, finetune.backbone_frozen(epoch, cfg.freeze_backbone, cfg.unfreeze_at)):
        # DDP and torch.compile take note of which parameters train when they wrap: wrap again
        run.wrapped_model = parallel.wrap_model(run.model, cfg.parallel, run.device, compile=cfg.compile)
    step_losses = [] if run.logger.wants_step_losses else None
    train_stats = engine.train_one_epoch(run.wrapped_model, run.loss_fn, run.optimizer, run.train_loader, run.device,
                                         policy=run.policy, scaler=run.scaler, scheduler=run.scheduler, epoch=epoch,
                                         progress=progress, memory_format=run.memory_format,
                                         after_step=functools.partial(at_step_boundary, run, out, epoch),
                                         start_step=start_step, totals=totals, accum_steps=cfg.accum_steps,
                                         clip_grad=cfg.clip_grad, ema=run.ema, mix=run.mix, step_losses=step_losses)
    run.step_losses = torch.stack(step_losses) if step_losses else None  # on the device; logged per epoch
    interrupts.pause_point(f"validate:{epoch}")
    val_stats = engine.evaluate(parallel.for_evaluation(run.wrapped_model), run.loss_fn, run.val_loader, run.device,
                                policy=run.policy, progress=progress, memory_format=run.memory_format)
    run.unreadable.pool_ranks()
    run.unreadable.check()  # too many unreadable files: stop (exit 2) rather than train on what is left
    row = {"epoch": epoch, "train_loss": round(train_stats.loss, 6), "train_acc": round(train_stats.acc, 6),
           "val_loss": round(val_stats.loss, 6), "val_acc": round(val_stats.acc, 6),
           "lr": run.optimizer.param_groups[-1]["lr"],  # the head's (the backbone's is lr * --backbone-lr-scale)
           "epoch_time_s": round(train_stats.seconds + val_stats.seconds, 3),
           "images_per_s": round(train_stats.images_per_s, 1), "unreadable_images": run.unreadable.count()}
    if run.ema is not None:  # the averaged weights are validated too: best.pt keeps whichever is better
        ema_stats = engine.evaluate(run.ema.module, run.loss_fn, run.val_loader, run.device, policy=run.policy,
                                    progress=progress, memory_format=run.memory_format)
        row.update(ema_val_loss=round(ema_stats.loss, 6), ema_val_acc=round(ema_stats.acc, 6))
    return row


def log_epoch(run: Run, row: dict) -> None:
    """Report the epoch to the logger, before its checkpoint: a resume from the one before purges and redoes it."""
    run.logger.log_epoch(row, run.step_losses, last_step=row["epoch"] * run.steps_per_epoch)


def open_logger(run: Run, out: Path) -> None:
    """The run's logger on rank 0; on resume it drops what the interrupted run logged after its checkpoint."""
    if parallel.is_main_process():
        # global optimizer steps count from 1; a mid-epoch checkpoint already holds start_step of its epoch
        first_step = (run.start_epoch - 1) * run.steps_per_epoch + run.start_step + 1
        run.logger = tracking.open_logger(run.cfg.logger, out, purge_step=first_step, hparams=run.cfg.to_dict())


def save_epoch(run: Run, row: dict, out: Path) -> None:
    """Write last.pt, best.pt when validation improved, metrics.csv and curves.png."""
    run.rows.append(row)
    score, weights = finetune.epoch_score(row)
    improved = score > run.best_acc
    run.best_acc = max(run.best_acc, score)
    if not parallel.is_main_process():  # under ddp, rank 0 alone writes
        return
    state = run.state(row["epoch"])
    best = state if weights == "model" else run.state(row["epoch"], weights=weights)
    outputs.write_metrics(out / "metrics.csv", run.rows)
    plots.save_figure(plots.curves_figure(run.rows), out / "curves.png")
    # last.pt is written last: it is the commit point that --resume continues from, so a kill
    # before it only repeats this epoch (and rewrites the same metrics and best.pt).
    for name in ("best.pt", "last.pt") if improved else ("last.pt",):
        pause = functools.partial(interrupts.pause_point, f"save:{name}:{row['epoch']}")
        run_checkpoint.save(out / name, best if name == "best.pt" else state, before_replace=pause)
    run.save_clock.reset()


def train_epochs(run: Run, out: Path) -> None:
    """Train from run.start_epoch to the last epoch, saving each.

    A stop request ends the run one way: TrainingInterrupted, agreed by every rank, raised after a
    step (its mid-epoch checkpoint written) or after an epoch's checkpoint is written.
    """
    cfg = run.cfg
    for epoch in range(run.start_epoch, cfg.epochs + 1):
        row = run_epoch(run, epoch, out)
        log_epoch(run, row)
        save_epoch(run, row, out)
        parallel.print_main(f"epoch {epoch}/{cfg.epochs}  train_loss {row['train_loss']:.4f}  "
                            f"train_acc {row['train_acc']:.3f}  val_loss {row['val_loss']:.4f}  "
                            f"val_acc {row['val_acc']:.3f}  {row['images_per_s']:.0f} img/s"
                            + (f"  ema_val_acc {row['ema_val_acc']:.3f}" if "ema_val_acc" in row else ""))
        signum = parallel.first_on_any_rank(run.stop.signum)
        if signum is not None:
            raise interrupts.TrainingInterrupted(signum, epoch + 1, 0)
        if cfg.patience and finetune.epochs_without_improvement(run.rows) >= cfg.patience:
            parallel.print_main(f"early stop: val_acc has not improved for {cfg.patience} epochs "
                                f"(best {run.best_acc:.3f})")
            return


def plan_out(cfg: config.TrainConfig) -> tuple[config.TrainConfig, rundir.Plan]:
    """The run folder and the checkpoint to continue from, decided by rank 0 for every rank."""
    decision: rundir.Plan | str = ""
    if parallel.is_main_process():
        try:
            decision = rundir.plan(cfg.out, cfg.resume, cfg.overwrite)
        except ConfigError as error:
            decision = str(error)
    decision = parallel.from_main(decision)
    if isinstance(decision, str):  # every rank refuses alike
        raise rundir.RunDirError(decision)
    # --resume auto becomes the checkpoint it found (or None): what the rest of the run continues from
    return dataclasses.replace(cfg, out=str(decision.out), resume=decision.resume), decision


def prepare_out(run: Run, out: Path, device: torch.device, plan: rundir.Plan) -> None:
    """config.json, runs/latest, and the state --resume starts from; on rank 0 only."""
    cfg = run.cfg
    if not parallel.is_main_process():
        return
    out.mkdir(parents=True, exist_ok=True)
    checkpoint.remove_partial_writes(out)  # what a kill mid-write left behind
    if cfg.overwrite:
        rundir.clear_run_files(out)
    if plan.link_latest:
        note = rundir.link_latest(out)
        if note:
            print(note, file=sys.stderr)
    outputs.write_json(out / "config.json", {**cfg.to_dict(), "resolved_device": str(device),
                                             "device_identity": devices.device_identity(device),  # which card
                                             "image_size": run.image_size, "class_names": run.class_names,
                                             "preprocessing": run.preprocessing.to_dict(),
                                             "environment": outputs.run_environment()})  # to rerun it
    if not plan.resume:  # epoch 0: even a run killed in its first epoch can be resumed
        run_checkpoint.save(out / "last.pt", run.state(0))


def train(cfg: config.TrainConfig, *, verbose: bool = False, debug_devices: bool = False) -> int:
    """Build everything, then train; nothing is written until all inputs have been checked."""
    check_numbers(cfg)
    tracking.check_available(cfg.logger)
    device = config.configure_device(cfg.device)
    cfg, notes = resolve_modes(cfg, device)
    parallel.start_distributed(cfg.parallel, device)  # stopped in main()'s finally
    cfg, plan = plan_out(cfg)
    cfg, weights_note = resolve_weights(cfg, resuming=plan.resume is not None)
    ranks = f", one of {parallel.world_size()} ddp ranks" if cfg.parallel == "ddp" else ""
    parallel.print_main(f"device: {devices.describe_device(device)}{ranks}")
    if warning := devices.index_order_warning():  # cuda:N may not be nvidia-smi's GPU N
        parallel.print_main(warning)
    for note in [*notes, plan.note, weights_note]:
        if note:
            parallel.print_main(note)
    reproducibility.seed_everything(cfg.seed)  # the initial weights too: same seed, same run
    run = Run(cfg, device)
    parallel.print_main(f"image size: {run.image_size} px, {run.preprocessing.reason}")
    if cfg.init_from:
        fresh = f"; a fresh {', '.join(run.fresh)}" if run.fresh else ""
        parallel.print_main(f"init: weights from {cfg.init_from}{fresh}")
    if verbose:
        parallel.print_main(devices.device_report(run.model))
    if debug_devices:
        devices.DeviceGuard(run.model)  # lives as long as the model: its hooks are the model's
    if plan.resume:
        run.resume(plan.resume)
    out = Path(cfg.out)
    prepare_out(run, out, device, plan)
    open_logger(run, out)
    with run.stop.installed():
        try:
            train_epochs(run, out)
        except interrupts.TrainingInterrupted as stop:
            held = f"epoch {stop.epoch} step {stop.step}" if stop.step else f"epoch {stop.epoch - 1}"
            parallel.print_main(f"stopped by {stop}: {out / 'last.pt'} holds {held}; "
                                f"continue with --resume {out} (or --resume auto --out {out})", file=sys.stderr)
            return stop.exit_code
        finally:
            run.logger.close()
    if cfg.parallel == "ddp":
        digest = parallel.check_replicas_agree(run.wrapped_model)
        parallel.print_main(f"ddp: weights identical on every rank (sha256 {digest[:12]})")
    parallel.print_main(f"done: {out / 'last.pt'} (best val_acc {run.best_acc:.3f})")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse flags and train; returns the exit code."""
    parser = get_args_parser()
    args = parser.parse_args(argv)
    try:
        return cli.run_cli(lambda: train(config_from_args(with_config_file(parser, args, argv)), verbose=args.verbose,
                                         debug_devices=args.debug_devices), verbose=args.verbose)
    finally:
        parallel.stop_distributed()  # on success and on error alike


if __name__ == "__main__":
    sys.exit(main())
