"""`python -m {{ cookiecutter.package_name }}.data check DATA`: find what would stop a run before it starts.

DATA is read exactly as train.py reads it (data/folders.py: the same listing, layout rules and
--val-split division) and every image of its train and val splits is decoded in worker processes,
as training decodes it, with a progress bar; the report lists unreadable files, empty classes,
class balance and image sizes, and the exit code is 1 when anything in it would stop a run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
from pathlib import Path

from tqdm import tqdm

from ..config import is_import_path
from ..deferred import deferred
from ..devkit.edge import ArgumentParser
from .errors import DataError

# The data as train.py reads it: torch loads with it, when first used, once the flags passed (ARCHITECTURE.md)
folders = deferred(".folders", __package__)

SPLITS = ("train", "val")
CHECK_SIZE = 224  # the image size the memory budget is checked at when --image-size is not given
_dataset = None  # the split a worker process decodes (set by _start)


def _start(dataset) -> None:
    """Pool initializer: keep the split to decode in this worker."""
    global _dataset
    _dataset = dataset


def _probe(index: int) -> tuple[str, tuple[int, int] | None, str]:
    """(name, (width, height) or None, reason): decoded exactly as training decodes it."""
    name = _dataset.name(index)
    try:
        return name, _dataset[index][0].size, ""
    except DataError as error:
        return name, None, str(error).removeprefix(f"cannot read image {name}: ")


def _decode(dataset, split: str, workers: int, progress: bool) -> list[tuple[str, tuple[int, int] | None, str]]:
    """Every image of `dataset`, probed in `workers` processes."""
    with multiprocessing.Pool(workers, initializer=_start, initargs=(dataset,)) as pool:
        return list(tqdm(pool.imap(_probe, range(len(dataset)), chunksize=16), total=len(dataset),
                         desc=f"check {split}", disable=not progress, leave=False))


def report_split(dataset, split: str, workers: int, max_fraction: float, progress: bool) -> tuple[list[str], list[str]]:
    """Decode one split; return (report lines, problems that would stop a run)."""
    dataset.transform = None  # PIL images: their size is the report's
    results = _decode(dataset, split, workers, progress)
    bad = [(name, reason) for name, size, reason in results if size is None]
    sizes = [size for _, size, _ in results if size is not None]
    lines = [f"{split}: {len(results)} images, {len(dataset.classes)} classes, {len(bad)} unreadable"]
    counts = dict(zip(dataset.classes, folders.class_counts(dataset).int().tolist()))
    problems = [f"{split}/{name} holds no images" for name, count in counts.items() if not count]
    lines += [f"  {name}: {count} ({count / max(len(results), 1):.1%})" for name, count in counts.items()]
    if sizes:
        widths, heights = [w for w, _ in sizes], [h for _, h in sizes]
        lines.append(f"  sizes: width {min(widths)}..{max(widths)} (median {statistics.median(widths):g}), "
                     f"height {min(heights)}..{max(heights)} (median {statistics.median(heights):g})")
    lines.extend(f"  unreadable: {name}: {reason}" for name, reason in bad)
    if len(bad) > max_fraction * len(results):
        problems.append(f"{len(bad)} of {len(results)} images in {split}/ are unreadable "
                        f"(--max-bad-fraction {max_fraction:g})")
    return lines, problems


def scan(root: Path, workers: int, max_fraction: float, progress: bool = True, *, val_split: float | None = None,
         seed: int = 0, image_size: int = CHECK_SIZE) -> tuple[list[str], list[str]]:
    """Read DATA as training does and decode its train and val splits; return (report lines, problems)."""
    try:
        splits = folders.load_splits(root, image_size, val_split=val_split, seed=seed, allow_empty=True)
    except DataError as error:
        return [], [str(error)]
    lines, problems = list(dict.fromkeys(splits[0].notes + splits[1].notes)), []
    if splits[0].split_record.get("rule") == "val_split":
        lines.append(f"divided by --val-split {val_split} (seed {seed}): no train/ and val/ folders")
    for split, dataset in zip(SPLITS, splits):
        split_lines, split_problems = report_split(dataset, split, workers, max_fraction, progress)
        lines += split_lines
        problems += split_problems
    return lines, problems


def get_args_parser() -> argparse.ArgumentParser:
    """The data check's flags (the data flags train.py would use take the same defaults)."""
    from ..config import TrainConfig

    defaults = TrainConfig()
    p = ArgumentParser(prog=f"python -m {__package__}", description="Check a dataset as train.py reads it.")
    sub = p.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="decode every image of DATA's train and val splits and report problems")
    check.add_argument("data", help="what train.py's --data takes: train/ and val/ of class folders, class "
                                    "folders divided by --val-split, a labels .csv, or module:function")
    check.add_argument("--val-split", type=float, default=defaults.val_split,
                       help="as train.py's (default: %(default)s)")
    check.add_argument("--seed", type=int, default=defaults.seed, help="as train.py's (default: %(default)s)")
    check.add_argument("--image-size", type=int, default=CHECK_SIZE,
                       help="the size a run resizes to, for the memory budget of data/images.py (default: %(default)s)")
    check.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="decoding processes")
    check.add_argument("--max-bad-fraction", type=float, default=defaults.max_bad_fraction)
    return p


def main(argv: list[str] | None = None) -> int:
    """`python -m <package>.data check DATA`: print the report; exit 0 fine, 1 a run would stop, 2 bad input."""
    args = get_args_parser().parse_args(argv)
    if args.workers < 1 or args.image_size < 1:
        print("error: --workers and --image-size must be >= 1", file=sys.stderr)
        return 2
    if not Path(args.data).exists() and not is_import_path(args.data, "data"):  # what it holds is the report's
        print(f"error: {args.data} does not exist (nor is it a module:function dataset)", file=sys.stderr)
        return 2
    lines, problems = scan(args.data, args.workers, args.max_bad_fraction, progress=sys.stderr.isatty(),
                           val_split=args.val_split, seed=args.seed, image_size=args.image_size)
    print("\n".join(lines))
    for problem in problems:
        print(f"problem: {problem}")
    print("would stop a run: yes" if problems else "ok: nothing here would stop a run")
    return 1 if problems else 0
