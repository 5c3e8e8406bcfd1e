"""Measure a trained checkpoint on a split of its data: accuracy, per-class table, confusion matrix.

    python evaluate.py runs/latest/best.pt                     # the data, split and preprocessing it trained on
    python evaluate.py runs/exp1/best.pt --data other/data --split test

Prints accuracy and loss, every figure of the run's validation metrics (task.py) under its metrics.csv name
(`val_loss`, `val_acc`, `val_macro_f1`, ...; `<split>_` for another split), a precision/recall table per class,
and writes the confusion
matrix as a PNG (default: confusion_<split>.png beside the checkpoint, or --out) and a grid of
the most confident wrong predictions (default: mistakes_<split>.png beside it, or --mistakes). The numbers
come from the same loop, loss, precision, memory format and batch size as the run's validation,
so they equal the val_loss and metrics that metrics.csv recorded for the checkpoint's epoch.
A figure that cannot be written (a read-only run folder) is a note on stderr, not a failure.
Exit codes: 0 done, 1 failure, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from {{ cookiecutter.package_name }} import cli, config, data
from {{ cookiecutter.package_name }}.data.splits import check_matches
from {{ cookiecutter.package_name }}.deferred import deferred
from {{ cookiecutter.package_name }}.errors import ConfigError

# What the evaluation runs with: torch and the rest load when first used, once the flags passed (ARCHITECTURE.md)
model_folder = deferred("{{ cookiecutter.package_name }}.model_folder")
task = deferred("{{ cookiecutter.package_name }}.task")
unreadable_data = deferred("{{ cookiecutter.package_name }}.data.unreadable")
precision = deferred("{{ cookiecutter.package_name }}.devkit.precision")
loop = deferred("{{ cookiecutter.package_name }}.training.loop")
run_state = deferred("{{ cookiecutter.package_name }}.training.run_state")
hardware = deferred("{{ cookiecutter.package_name }}.training.hardware")

MAX_MISTAKES = 256  # a grid beyond this is unreadable, and every image is held on the device until the end


def get_args_parser() -> argparse.ArgumentParser:
    """The evaluation flags."""
    p = cli.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoint", help="a .pt file written by train.py, or its run directory (uses last.pt)")
    p.add_argument("--data", default=None, help="what train.py's --data takes (default: the data the checkpoint was "
                                                "trained on, as its config records it; the demo data for a demo run)")
    p.add_argument("--split", default="val", help="split of --data to measure: a sub-folder, a labels file's split "
                                                  "value, or train/val as the run divided it (default: val)")
    p.add_argument("--resplit", action="store_true", help="measure data that changed since the run recorded its "
                                                          "--val-split, divided anew (val may hold trained images)")
    p.add_argument("--batch-size", type=int, default=None, help="default: the training run's batch size")
    p.add_argument("--workers", type=int, default=config.default_workers(),
                   help="DataLoader worker processes (default: the cores this process may use, less one: "
                        "%(default)s here)")
    p.add_argument("--device", default=None, help=f"default: ${config.DEVICE_ENV_VAR}, else {config.DEFAULT_DEVICE}")
    p.add_argument("--out", default=None,
                   help="confusion-matrix PNG (default: confusion_<split>.png beside the checkpoint)")
    p.add_argument("--mistakes", default=None,
                   help="PNG of the most confident wrong predictions (default: mistakes_<split>.png beside it)")
    p.add_argument("--mistakes-count", type=int, default=16, metavar="N",
                   help=f"images in that grid (default: 16, at most {MAX_MISTAKES})")
    cli.add_allow_import(p)
    p.add_argument("--verbose", action="store_true", help="print tracebacks on failure")
    return p


def default_png(checkpoint: str, split: str, kind: str = "confusion") -> Path:
    """<kind>_<split>.png in the checkpoint's run directory (beside a model folder: the folder stays as shared)."""
    path = Path(checkpoint)
    inside = path.is_dir() and not model_folder.is_model_folder(path)
    return (path if inside else path.parent) / f"{kind}_{split}.png"


def report_unreadable(found: set[str], path: str, reason: str) -> None:
    """Warn on stderr the first time an image turns out unreadable, and remember it."""
    if path not in found:
        found.add(path)
        print(f"warning: skipping unreadable image {path}: {reason}", file=sys.stderr)


def measured_precision(recorded: str, device) -> tuple[str, str | None]:
    """The run's own precision even where it is only emulated (its numbers then equal metrics.csv's); one that
    cannot run here at all falls back. With the note to print (on stderr: stdout's first line is the result)."""
    if precision.why_not(recorded, device):  # cannot run here: the fallback and note resolve_precision gives
        return precision.resolve_precision(None, recorded, device)
    emulated = precision.why_emulated(recorded, device)
    return recorded, emulated and f"precision: {emulated}; measured in {recorded} as trained"


def split_to_measure(args: argparse.Namespace, state: dict, prep) -> data.Decoded:
    """The split of the data, its preprocessing and the --val-split division as training had them (or a refusal)."""
    trained = state["config"]
    # --data if given, else the data the checkpoint's run trained on, else (a demo run) the demo data
    root = Path(args.data or trained.get("data") or data.DEMO_ROOT)
    dataset = data.image_folder(root, args.split, prep, train=False, val_split=run_state.val_split(state),
                                seed=trained.get("seed", 0))
    if not args.resplit:  # the run's own division of its data, or a refusal (data/splits.py)
        check_matches(state.get("split"), dataset.split_record, str(root))
    dataset.transform = data.build_transforms(prep, train=False, normalize=False)
    if dataset.classes != list(state["class_names"]):
        raise data.DataError(f"{args.split}/ holds classes {dataset.classes}, but the checkpoint knows "
                             f"{list(state['class_names'])}")
    return dataset


def read_checkpoint(args: argparse.Namespace) -> dict:
    """The checkpoint, checked; the data it names allowed only as the command line says (--allow-import)."""
    trusted = config.trusted_imports(*args.allow_import)
    if args.data is None and model_folder.is_model_folder(args.checkpoint):
        raise ConfigError(f"{args.checkpoint} is a model folder, which records no data: pass --data")
    # without --data the run's own data, as its checkpoint names it, is what will be opened: its import path too
    imports = ("backbone",) if args.data is not None else ("backbone", "data")
    return model_folder.read_any(args.checkpoint, trusted=trusted, imports=imports)


def check_flags(args: argparse.Namespace) -> argparse.Namespace:
    """The flags, refused (one line, exit 2) with the standard library only: before torch loads."""
    if (args.batch_size is not None and args.batch_size < 1) or args.workers < 0 or args.mistakes_count < 0:
        raise ConfigError("--batch-size must be at least 1, --workers and --mistakes-count at least 0")
    if args.mistakes_count > MAX_MISTAKES:  # each is an image kept on the device and a panel of one figure
        raise ConfigError(f"--mistakes-count must be at most {MAX_MISTAKES}, got {args.mistakes_count}")
    cli.check_checkpoint(args.checkpoint)
    if args.data is not None:
        cli.check_data(args.data)
    cli.check_device(args.device)
    return args


def run(args: argparse.Namespace) -> int:
    """Print accuracy, loss and the per-class table; write the confusion-matrix and mistakes PNGs."""
    from {{ cookiecutter.package_name }}.plots import ConfidentMistakes, confusion_figure, mistakes_figure

    device = config.compute_device(args.device)
    state = read_checkpoint(args)
    trained, class_names, prep = state["config"], list(state["class_names"]), run_state.preprocessing(state)
    # Measured as training measured it: the same loss, precision, memory format, uint8 batches normalised there
    precision_name, note = measured_precision(trained.get("precision", "fp32"), device)
    hw = hardware.Hardware.create(device, precision_name, trained.get("channels_last"), mean=prep.mean, std=prep.std)
    model = run_state.model_from_state(state, device, args.checkpoint).to(memory_format=hw.memory_format)
    dataset = split_to_measure(args, state, prep)
    for line in [*dataset.notes, note]:  # after the checks: a refusal stays one line
        if line:
            print(line, file=sys.stderr)
    # An unreadable image is skipped as training's validation skips it (its place goes to the next
    # readable image), so the numbers still equal metrics.csv's; each is named once and counted.
    unreadable: set[str] = set()
    batch_size = args.batch_size or trained.get("batch_size", 64)
    loader = unreadable_data.ReportingLoader(data.build_loader(unreadable_data.SkipUnreadable(dataset), batch_size,
                                                               device, train=False, workers=args.workers),
                                             lambda path, reason: report_unreadable(unreadable, path, reason))
    measured, mistakes = task.Metrics(len(class_names), device), ConfidentMistakes(args.mistakes_count)
    stats = loop.evaluate(model, run_state.loss_from_state(state, device), loader, hw, progress=False,
                          metrics=measured, on_batch=mistakes)
    matrix = measured.confusion
    # The figures first, then the report: a reader that stops early (| head) still gets both files
    found = mistakes.result()  # (images, targets, predictions, probabilities)
    grid = mistakes_figure(*found, class_names, mean=prep.mean, std=prep.std)
    written = [save_png(confusion_figure(matrix, class_names), args.out or default_png(args.checkpoint, args.split),
                        "confusion matrix", "--out"),
               save_png(grid, args.mistakes or default_png(args.checkpoint, args.split, "mistakes"),
                        f"most confident mistakes ({len(found[1])})", "--mistakes")]
    skipped = f", {len(unreadable)} unreadable skipped" if unreadable else ""
    print(f"{args.split}: accuracy {stats.acc:.6f}  loss {stats.loss:.6f}  "
          f"({stats.images} images, {len(class_names)} classes, device {device}{skipped})")
    figures = {"loss": stats.loss, "acc": stats.acc, **stats.figures}  # metrics.csv's val_ columns for an epoch
    print("  ".join(f"{args.split}_{name} {value:.6f}" for name, value in figures.items()))
    print(task.format_report(task.class_report(matrix), class_names))
    for line in filter(None, written):
        print(line)
    return 0


def save_png(figure, path: Path | str, what: str, flag: str) -> str | None:
    """Write a figure and return the line that says where; where it cannot be written (a read-only folder, a full
    disk), say so on stderr and return None. A plot that cannot be saved is a note, not a failure.
    """
    from {{ cookiecutter.package_name }}.plots import save_figure

    try:
        return f"{what}: {save_figure(figure, path)}"
    except OSError as error:
        print(f"note: {what} not written: cannot write {path} ({error.strerror or error}); "
              f"choose another place with {flag}", file=sys.stderr)
        return None


def main(argv: list[str] | None = None) -> int:
    """Parse and check the flags (no torch yet), then evaluate; returns the exit code."""
    args = get_args_parser().parse_args(argv)
    return cli.run_cli(lambda: run(check_flags(args)), verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
