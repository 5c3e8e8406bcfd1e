"""Train the image classifier.

    python train.py --device cuda:1 --epochs 10 --out runs/exp1

The flags are settled once (`settings.settle`) and the device is resolved once
(`config.configure_device`); both are passed down to every piece.
Exit codes: 0 done, 1 failure, 2 bad input.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import torch

from {{ cookiecutter.package_name }} import cli, config, devkit, model, outputs, settings
from {{ cookiecutter.package_name }}.devkit import checkpoint, precision
from {{ cookiecutter.package_name }}.errors import ConfigError
from {{ cookiecutter.package_name }}.training import distributed, epochs, run_folder, run_state, seeding, stopping, tracking, wrapping
from {{ cookiecutter.package_name }}.training.rendezvous import loopback_host_note
from {{ cookiecutter.package_name }}.training.run import Run
from {{ cookiecutter.package_name }}.training.shared_checkpoint import checkpoint_file, rank0_copy

T = TypeVar("T")


def get_args_parser():
    """train.py's flags (settings.py declares them), for scripts that reuse them."""
    return settings.get_args_parser()


def resolve_modes(settled: settings.Settled, device: torch.device) -> tuple[str, str, list[str]]:
    """--parallel and --precision on this device: explicit values must run here, defaults may fall back (notes)."""
    cfg, explicit = settled.cfg, settled.explicit
    parallel_mode, parallel_note = wrapping.resolve_parallel(cfg.parallel if "parallel" in explicit else None,
                                                             cfg.parallel, device)
    wrapping.check_combination(parallel_mode, cfg.compile)  # before anything is built or written
    precision_name, precision_note = precision.resolve_precision(
        cfg.precision if "precision" in explicit else None, cfg.precision, device)
    return parallel_mode, precision_name, [note for note in (parallel_note, precision_note) if note]


def resolve_weights(settled: settings.Settled, resuming: bool) -> tuple[bool, str | None]:
    """--pretrained: a resumed run or --init-from brings its own weights; a default may fall back offline."""
    cfg = settled.cfg
    requested = cfg.pretrained and not (resuming or cfg.init_from)
    return model.resolve_pretrained(cfg.backbone, requested, "pretrained" in settled.explicit)


def decided_on_rank0(decide: Callable[[], T]) -> T:
    """Rank 0's `decide()`, the same on every rank; a ConfigError it raises is every rank's RunDirError alike."""
    decision: T | str = ""
    if distributed.is_main_process():
        try:
            decision = decide()
        except ConfigError as error:
            decision = str(error)
    decision = distributed.from_main(decision)
    if isinstance(decision, str):  # every rank refuses alike
        raise run_folder.RunDirError(decision)
    return decision


def plan_out(cfg: config.TrainConfig) -> run_folder.Plan:
    """The run folder and the checkpoint to continue from, decided by rank 0 for every rank."""
    return decided_on_rank0(lambda: run_folder.plan(cfg.out, cfg.resume, cfg.overwrite))


@contextlib.contextmanager
def claim_out(plan: run_folder.Plan, overwrite: bool) -> Iterator[Path]:
    """Rank 0 creates and locks the run folder while the block runs; every rank learns the folder or the refusal."""
    with contextlib.ExitStack() as held:
        yield decided_on_rank0(lambda: held.enter_context(run_folder.claim(plan, overwrite)))


def settle_resumed(settled: settings.Settled) -> tuple[settings.Settled, list[str]]:
    """With --resume: the settings of the run it continues (its checkpoint's config, read once here), with notes."""
    source = run_folder.resume_source(settled.cfg.out, settled.cfg.resume)
    if source is None or (distributed.rank() != 0 and not checkpoint_file(source).is_file()):
        return settled, []  # not here (a node-local disk): settled again once rank 0 has sent its copy
    cfg = settled.cfg  # its import paths were typed, or came from a --config file that passed this same check
    trusted = config.trusted_imports(cfg.backbone, cfg.data, *cfg.allow_import)
    state = run_state.read(source, trusted=trusted)
    if "data" not in settled.explicit:  # the run goes on reading the data its checkpoint names
        config.check_imports(state["config"], trusted, f"{source}: config", keys=("data",))
    return settings.resumed(settled, state["config"], source, state["image_size"])


def prepare_out(run: Run, out: Path, device: torch.device, plan: run_folder.Plan) -> None:
    """config.json, runs/latest, and the state --resume starts from; on rank 0 only."""
    cfg = run.cfg
    if not distributed.is_main_process():
        return
    out.mkdir(parents=True, exist_ok=True)
    checkpoint.remove_partial_writes(out)  # what a kill mid-write left behind
    if cfg.overwrite:
        run_folder.clear_run_files(out)
    if plan.link_latest:
        note = run_folder.link_latest(out)
        if note:
            print(note, file=sys.stderr)
    outputs.write_json(out / "config.json", {**cfg.to_dict(), "resolved_device": str(device),
                                             "device_identity": devkit.device_identity(device),  # which card
                                             "image_size": run.image_size, "class_names": run.class_names,
                                             "preprocessing": run.preprocessing.to_dict(),
                                             "split": run.split,  # the --val-split record (data/splits.py)
                                             "machine": run.machine(),  # workers, threads, decode, tf32, channels_last
                                             "environment": outputs.run_environment()})  # to rerun it
    if plan.resume and run.rows:  # as the checkpoint holds them: a save stopped before metrics.csv left it behind
        outputs.write_metrics(out / "metrics.csv", run.rows)
    if not plan.resume:  # epoch 0: even a run killed in its first epoch can be resumed
        run_state.save(out / "last.pt", run.state(0))


def warn_loopback_host() -> None:
    """One line per node (its first process) when gloo would advertise a loopback address to other nodes."""
    note = loopback_host_note()
    if note and os.environ.get("LOCAL_RANK", "0") == "0":
        print(note, file=sys.stderr, flush=True)


def settle_for_run(settled: settings.Settled, device: torch.device) -> tuple[config.TrainConfig, run_folder.Plan,
                                                                          list[str]]:
    """The TrainConfig this run uses on `device`: a resumed run's settings, modes, run folder and weights decided.

    Returns it with the run folder's plan and the notes to print.
    """
    typed = settled
    settled, resume_notes = settle_resumed(typed)
    tracking.check_available(settled.cfg.logger)
    parallel_mode, precision_name, notes = resolve_modes(settled, device)
    if parallel_mode == "ddp":
        warn_loopback_host()
    distributed.start_distributed(parallel_mode, device)  # stopped in main()'s finally
    plan = plan_out(settled.cfg)
    run_folder.check_outside_data(plan.out, settled.cfg.data)
    sent_note = None
    if plan.resume:  # rank 0's checkpoint on every rank, also on a node that cannot read it
        source, sent_note = rank0_copy(plan.resume)
        if source != plan.resume:  # this rank settled without it: again, from rank 0's copy
            settled, resume_notes = settle_resumed(dataclasses.replace(typed, cfg=dataclasses.replace(
                typed.cfg, resume=source)))
            parallel_mode, precision_name, notes = resolve_modes(settled, device)
        plan = dataclasses.replace(plan, resume=source)
    notes = [*resume_notes, *notes, sent_note]
    pretrained, weights_note = resolve_weights(settled, resuming=plan.resume is not None)
    # --resume auto becomes the checkpoint it found (or None): what the rest of the run continues from; no
    # --threads, the count the machine's idle cores suggest now (a resumed run has its own: settings.resumed)
    cfg = dataclasses.replace(settled.cfg, parallel=parallel_mode, precision=precision_name, out=str(plan.out),
                              resume=plan.resume, pretrained=pretrained,
                              threads=settled.cfg.threads or config.default_threads())
    return cfg, plan, [note for note in (*notes, plan.note, weights_note) if note]


def report_start(run: Run, device: torch.device, notes: list[str], verbose: bool) -> None:
    """What the run is about to do: the device, the notes, the image size, the weights' source."""
    cfg = run.cfg
    ranks = f", one of {distributed.world_size()} ddp ranks" if cfg.parallel == "ddp" else ""
    distributed.print_main(f"device: {devkit.describe_device(device)}{ranks}")
    for note in filter(None, [devkit.index_order_warning(), *notes]):  # cuda:N may not be nvidia-smi's GPU N
        distributed.print_main(note)
    distributed.print_main(f"image size: {run.image_size} px, {run.preprocessing.reason}")
    for note in run.machine_notes():
        distributed.print_main(note)
    if cfg.init_from:
        fresh = f"; a fresh {', '.join(run.fresh)}" if run.fresh else ""
        distributed.print_main(f"init: weights from {cfg.init_from}{fresh}")
    if verbose:
        distributed.print_main(devkit.device_report(run.model))


def train(settled: settings.Settled) -> int:
    """Build everything, then train; nothing is written until all inputs have been checked."""
    device = config.configure_device(settled.cfg.device)
    if device.type == "meta":
        raise ConfigError("--device meta holds no data: it can build a model, not train one; use cpu or an accelerator")
    cfg, plan, notes = settle_for_run(settled, device)
    # After --resume is settled: a resumed run keeps its own count, as thread counts change CPU sums' last bits
    torch.set_num_threads(cfg.threads)
    seeding.seed_everything(cfg.seed)  # the initial weights too: same seed, same run
    with contextlib.closing(Run(cfg, device)) as run:  # its loader workers end with the run
        report_start(run, device, notes, settled.verbose)
        if settled.debug_devices:
            devkit.DeviceGuard(run.model)  # lives as long as the model: its hooks are the model's
        with claim_out(plan, cfg.overwrite) as out:  # held until the run ends: a second run here is refused
            run.cfg = cfg = dataclasses.replace(run.cfg, out=str(out))  # a runs/<timestamp> taken meanwhile: a suffix
            return train_in(run, out, device, plan)


def train_in(run: Run, out: Path, device: torch.device, plan: run_folder.Plan) -> int:
    """Resume if asked, write the run's first files into `out` (claimed), and train."""
    cfg = run.cfg
    if plan.resume:
        run.resume(plan.resume)
        for note in run.resume_notes:
            distributed.print_main(note)
    epochs.open_logger(run, out)  # before the first checkpoint: a tracker that cannot start leaves no last.pt
    prepare_out(run, out, device, plan)
    with run.stop.installed():
        try:
            epochs.train_epochs(run, out)
        except stopping.TrainingInterrupted as stop:
            held = f"epoch {stop.epoch} step {stop.step}" if stop.step else f"epoch {stop.epoch - 1}"
            distributed.print_main(f"stopped by {stop}: {out / 'last.pt'} holds {held}; "
                                   f"continue with --resume {out} (or --resume auto --out {out})", file=sys.stderr)
            return stop.exit_code
        finally:
            run.logger.close()
    if cfg.parallel == "ddp":
        digest = distributed.check_replicas_agree(run.wrapped_model)
        distributed.print_main(f"ddp: weights identical on every rank (sha256 {digest[:12]})")
    distributed.print_main(f"done: {out / 'last.pt'} (best val_acc {run.best_acc:.3f})")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse and settle the flags, then train; returns the exit code."""
    verbose = "--verbose" in (sys.argv[1:] if argv is None else argv)
    try:
        return cli.run_cli(lambda: train(settings.settle(argv)), verbose=verbose)
    finally:
        distributed.stop_distributed()  # on success and on error alike


if __name__ == "__main__":
    sys.exit(main())
