"""Train the image classifier.

    python train.py --device cuda:1 --epochs 10 --out runs/exp1

Check the flags first, without torch (settings.parse: a typo or --help answers at once), then settle every
setting once (startup.settle: the device, a resumed run's own settings, the run folder), build the run, train
it, report. What the project's answers added (the
plugins/ folder: ddp, a tracker, ...) is installed here and told of the run through its hooks.
Exit codes: 0 done, 1 failure, 2 bad input.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from pathlib import Path

from {{ cookiecutter.package_name }} import cli, devkit, settings
from {{ cookiecutter.package_name }}.deferred import deferred
from {{ cookiecutter.package_name }}.plugins import Plugin, load_plugins

# What the run is built from: torch and the rest load when first used, once the flags passed (ARCHITECTURE.md)
torch, startup = deferred("torch"), deferred("{{ cookiecutter.package_name }}.startup")
epochs, run_folder = deferred("{{ cookiecutter.package_name }}.training.epochs"), deferred("{{ cookiecutter.package_name }}.training.run_folder")
seeding, stopping = deferred("{{ cookiecutter.package_name }}.training.seeding"), deferred("{{ cookiecutter.package_name }}.training.stopping")
training_run = deferred("{{ cookiecutter.package_name }}.training.run")
plugin_calls = deferred("{{ cookiecutter.package_name }}.training.plugin_calls")


def report_start(run: training_run.Run, start: startup.Start) -> None:
    """What the run is about to do: the device, the notes, the image size, the weights' source."""
    say = run.processes.print
    ranks = f", one of {run.processes.world_size} processes" if run.processes.world_size > 1 else ""
    say(f"device: {devkit.describe_device(run.device)}{ranks}")
    for note in filter(None, [devkit.index_order_warning(), *start.notes]):  # cuda:N may not be nvidia-smi's GPU N
        say(note)
    for note in run.notes:  # what the listing left out: hidden names, directory links
        say(note, file=sys.stderr)
    say(f"image size: {run.image_size} px, {run.preprocessing.reason}")
    for note in [*run.machine_notes(), *run.resume_notes]:
        say(note)
    if run.cfg.init_from:
        fresh = f"; a fresh {', '.join(run.fresh)}" if run.fresh else ""
        say(f"init: weights from {run.cfg.init_from}{fresh}")
    if start.verbose:
        say(devkit.device_report(run.model))


def train(typed: settings.Settled, installed: list[Plugin]) -> int:
    """Settle, build, then train; nothing is written until every input has been checked."""
    start = startup.settle(typed, installed)
    with contextlib.ExitStack() as held:  # closed in reverse: the folder's claim (lock), the run, the processes
        held.callback(start.processes.close)
        torch.set_num_threads(start.cfg.threads)  # a resumed run's own count: it changes CPU sums' last bits
        seeding.seed_everything(start.cfg.seed)  # the initial weights too: same seed, same run
        run = held.enter_context(contextlib.closing(training_run.Run(start.cfg, start.device, start.processes,
                                                                     installed, start.checkpoint)))
        if start.plan.resume:
            run.resume(start.checkpoint, start.plan.resume)
        report_start(run, start)
        if start.debug_devices:
            devkit.DeviceGuard(run.model)  # lives as long as the model: its hooks are the model's
        out = run.processes.decide(lambda: held.enter_context(run_folder.claim(start.plan, run.cfg.overwrite)))
        run.cfg = dataclasses.replace(run.cfg, out=str(out))  # a runs/<timestamp> taken meanwhile: a suffix
        return train_in(run, out, start)


def train_in(run: training_run.Run, out: Path, start: startup.Start) -> int:
    """Write the run's first files into `out` (claimed), train, and say how it ended."""
    for plugin in run.plugins:  # before the first file: a tracker that cannot start leaves no last.pt
        plugin.start(run, out)
    try:
        startup.prepare_out(run, out, start.plan)
        with run.stop.installed():
            epochs.train_epochs(run, out)
    except (stopping.TrainingInterrupted, plugin_calls.PluginFailed) as stop:
        return stopped(run, out, start, stop)
    finally:
        plugin_calls.close_all(run)  # a plugin failing here is a warning: the run's files are written
    said = run.processes.finish(run.wrapped_model)
    if said:
        run.processes.print(said)
    run.processes.print(f"done: {out / 'last.pt'} (best val_acc {run.best_acc:.3f})")
    return 0


def stopped(run: training_run.Run, out: Path, start: startup.Start, stop: Exception) -> int:
    """What a stop request or a plugin's failure left in `out` (saved at that point), and how to go on."""
    held = f"epoch {stop.epoch} step {stop.step}" if stop.step else f"epoch {stop.epoch - 1}"
    if isinstance(stop, stopping.TrainingInterrupted):
        run.processes.print(f"stopped by {stop}: {out / 'last.pt'} holds {held}; continue with --resume {out} "
                            f"(or --resume auto --out {out})", file=sys.stderr)
        return stop.exit_code
    if start.plan.resume or (stop.epoch, stop.step) != (1, 0):
        run.processes.print(f"error: {stop}; {out / 'last.pt'} holds {held}; continue with --resume {out}",
                            file=sys.stderr)
    else:  # nothing trained: the same command starts again in this folder
        if run.processes.is_main():
            run_folder.clear_run_files(out)
        run.processes.print(f"error: {stop}; nothing was trained", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None, plugins: list[Plugin] | None = None) -> int:
    """Check the flags (no torch), then settle and train; returns the exit code. `plugins`: your own, beside the
    project's."""
    # Read before the flags are parsed (loading the plugins may fail); exact, as the parser takes no abbreviations
    verbose = "--verbose" in (sys.argv[1:] if argv is None else argv)

    def parse_then_train() -> int:
        installed = [*load_plugins(), *(plugins or [])]
        return train(settings.parse(argv, installed), installed)

    return cli.run_cli(parse_then_train, verbose=verbose)


if __name__ == "__main__":
    cli.best_effort_output()  # this process's streams, not an in-process caller's: a closed one loses only text
    sys.exit(main())
