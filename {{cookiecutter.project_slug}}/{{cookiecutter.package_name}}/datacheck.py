"""Unreadable images: skipped during training, and found up front by `python -m {{ cookiecutter.package_name }}.data check DATA`.

During training (`SkipUnreadable`, `ReportingLoader`, `UnreadableLog`): an image that cannot be
decoded is replaced by the next readable image of its split (index + 1, + 2, ...), transformed
under the same per-sample seed, so batches keep their size (ddp ranks stay in step) and the run
stays a function of (seed, epoch, index): exact resume holds. Each sample carries the skipped
file's path and reason to the main process, which warns once per file, counts the files in
metrics.csv and stops the run (DataError, exit 2) once more than `--max-bad-fraction` of a split
is unreadable. The fraction is checked at each epoch's end, when the ranks have pooled their
findings; a long run of unreadable files (a folder of non-images) stops it at once.

Before training (`scan`, `main`): every image of train/ and val/ is decoded in worker processes
with a progress bar; the report lists unreadable files, empty classes, class balance and image
sizes, and the exit code is 1 when anything in it would stop a run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import torch.distributed as dist
from torch.utils.data import Dataset
from torchvision.datasets.folder import IMG_EXTENSIONS
from tqdm import tqdm

from . import parallel
from .data import DataError, load_rgb

MAX_IN_A_ROW = 32  # this many unreadable images one after another: the data is broken, not a file or two
SPLITS = ("train", "val")


class SkipUnreadable(Dataset):
    """An ImageFolder whose unreadable images are replaced by the next readable one: (image, target, path, reason).

    `path` and `reason` name the skipped file ("" when the image at `index` was readable).
    """

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        skipped, reason = "", ""
        for offset in range(MAX_IN_A_ROW):
            position = (index + offset) % len(self.dataset)
            try:  # the loader fails before any transform draws a random number: the substitute's draws are exact
                image, target = self.dataset[position]
            except DataError as error:
                if offset == 0:
                    skipped = self.dataset.samples[position][0]
                    reason = str(error).removeprefix(f"cannot read image {skipped}: ")
                continue
            return image, target, skipped, reason
        raise DataError(f"{MAX_IN_A_ROW} unreadable images in a row from {self.dataset.samples[index][0]}; "
                        f"see python -m {__package__}.data check DATA")


class ReportingLoader:
    """Iterates a loader over SkipUnreadable samples as (images, targets), handing skipped files to `report`."""

    def __init__(self, loader, report: Callable[[str, str], None]):
        self.loader, self.report = loader, report

    @property
    def sampler(self):
        """The wrapped loader's sampler (train.py sets its epoch)."""
        return self.loader.sampler

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator:
        for batch in self.loader:
            if len(batch) == 4:  # (images, targets, paths, reasons); a cached dataset has no files to skip
                for path, reason in zip(batch[2], batch[3]):
                    if path:
                        self.report(path, reason)
                batch = batch[:2]
            yield batch


class UnreadableLog:
    """The files of each split found unreadable so far (kept in checkpoints), and the limit on them."""

    def __init__(self, split_sizes: dict[str, int], max_fraction: float, saved: dict[str, list[str]] | None = None):
        self.sizes, self.max_fraction = split_sizes, max_fraction
        self.found = {split: set((saved or {}).get(split, [])) for split in split_sizes}

    def add(self, split: str, path: str) -> bool:
        """Record `path`; True the first time it is seen (the caller warns then)."""
        new = path not in self.found[split]
        self.found[split].add(path)
        return new

    def count(self) -> int:
        """Unreadable files found so far, all splits together."""
        return sum(len(paths) for paths in self.found.values())

    def state(self) -> dict[str, list[str]]:
        """Plain lists, for a checkpoint."""
        return {split: sorted(paths) for split, paths in self.found.items()}

    def pool_ranks(self) -> None:
        """Every rank's findings on every rank (a collective under ddp; each rank reads its own shard)."""
        if not parallel.is_distributed():
            return
        gathered: list = [None] * parallel.world_size()
        dist.all_gather_object(gathered, self.state())
        for state in gathered:
            for split, paths in state.items():
                self.found[split].update(paths)

    def check(self) -> None:
        """Raise DataError when more than the allowed fraction of a split is unreadable."""
        for split, paths in self.found.items():
            if len(paths) > self.max_fraction * self.sizes[split]:
                raise DataError(f"{len(paths)} of {self.sizes[split]} images in {split}/ are unreadable, more than "
                                f"--max-bad-fraction {self.max_fraction:g} allows; see python -m "
                                f"{__package__}.data check DATA")


# ---- the up-front scan ---------------------------------------------------------------------------------------------

def _image_files(split_dir: Path) -> dict[str, list[str]]:
    """class name -> its image files, as ImageFolder would list them (empty classes included)."""
    classes = sorted(entry.name for entry in os.scandir(split_dir) if entry.is_dir())
    return {name: sorted(str(path) for path in (split_dir / name).rglob("*")
                         if path.is_file() and path.suffix.lower() in IMG_EXTENSIONS) for name in classes}


def _probe(path: str) -> tuple[str, tuple[int, int] | None, str]:
    """(path, (width, height) or None, reason): decoded exactly as training decodes it."""
    try:
        return path, load_rgb(path).size, ""
    except DataError as error:
        return path, None, str(error).removeprefix(f"cannot read image {path}: ")


def scan(root: Path, workers: int, max_fraction: float, progress: bool = True) -> tuple[list[str], list[str]]:
    """Decode every image of root/train and root/val; return (report lines, problems that would stop a run)."""
    lines, problems, classes_of = [], [], {}
    for split in SPLITS:
        folder = Path(root) / split
        if not folder.is_dir():
            problems.append(f"{folder} is missing: expected {root}/{split}/<class>/<image>")
            continue
        files = _image_files(folder)
        classes_of[split] = list(files)
        paths = [path for names in files.values() for path in names]
        with multiprocessing.Pool(workers) as pool:
            results = list(tqdm(pool.imap(_probe, paths, chunksize=16), total=len(paths), desc=f"check {split}",
                                disable=not progress, leave=False))
        bad = [(path, reason) for path, size, reason in results if size is None]
        sizes = [size for _, size, _ in results if size is not None]
        lines.append(f"{split}: {len(paths)} images, {len(files)} classes, {len(bad)} unreadable")
        for name, names in files.items():
            lines.append(f"  {name}: {len(names)} ({len(names) / max(len(paths), 1):.1%})")
            if not names:
                problems.append(f"{split}/{name} holds no images")
        if sizes:
            widths, heights = [w for w, _ in sizes], [h for _, h in sizes]
            lines.append(f"  sizes: width {min(widths)}..{max(widths)} (median {statistics.median(widths):g}), "
                         f"height {min(heights)}..{max(heights)} (median {statistics.median(heights):g})")
        lines.extend(f"  unreadable: {path}: {reason}" for path, reason in bad)
        if len(bad) > max_fraction * len(paths):
            problems.append(f"{len(bad)} of {len(paths)} images in {split}/ are unreadable "
                            f"(--max-bad-fraction {max_fraction:g})")
    if len(classes_of) == 2 and classes_of["train"] != classes_of["val"]:
        problems.append(f"train/ classes {classes_of['train']} differ from val/ classes {classes_of['val']}")
    return lines, problems


def main(argv: list[str] | None = None) -> int:
    """`python -m <package>.data check DATA`: print the report; exit 0 fine, 1 a run would stop, 2 bad input."""
    from .config import TrainConfig

    p = argparse.ArgumentParser(prog=f"python -m {__package__}.data", description="Check an ImageFolder dataset.")
    sub = p.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="decode every image of DATA/train and DATA/val and report problems")
    check.add_argument("data", help="ImageFolder root with train/ and val/")
    check.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="decoding processes")
    check.add_argument("--max-bad-fraction", type=float, default=TrainConfig().max_bad_fraction)
    args = p.parse_args(argv)
    if not Path(args.data).is_dir() or args.workers < 1:
        print(f"error: {args.data} is not a directory" if args.workers >= 1 else "error: --workers must be >= 1",
              file=sys.stderr)
        return 2
    lines, problems = scan(Path(args.data), args.workers, args.max_bad_fraction, progress=sys.stderr.isatty())
    print("\n".join(lines))
    for problem in problems:
        print(f"problem: {problem}")
    print("would stop a run: yes" if problems else "ok: nothing here would stop a run")
    return 1 if problems else 0


if __name__ == "__main__":
    import importlib

    # The imported module's main, not this copy's: worker processes find _probe under its real name.
    sys.exit(importlib.import_module(__spec__.name).main())
