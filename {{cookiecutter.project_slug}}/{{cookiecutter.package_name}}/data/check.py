"""`python -m {{ cookiecutter.package_name }}.data check DATA`: find what would stop a run before it starts.

Every image of train/ and val/ is decoded in worker processes with a progress bar; the report
lists unreadable files, empty classes, class balance and image sizes, and the exit code is 1
when anything in it would stop a run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
from pathlib import Path

from torchvision.datasets.folder import IMG_EXTENSIONS
from tqdm import tqdm

from .folders import DataError, load_rgb

SPLITS = ("train", "val")


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
    from ..config import TrainConfig

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
