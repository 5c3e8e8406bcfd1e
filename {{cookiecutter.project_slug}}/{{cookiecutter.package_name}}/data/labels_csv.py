"""A labels file: a CSV of `path,label` rows (and an optional `split` column) beside a folder of images.

    path,label,split
    images/0001.jpg,cat,train
    images/0002.jpg,dog,val

`--data` names the CSV file itself, or a folder holding `labels.csv`. Paths are relative to the
CSV's folder (or absolute). Classes are the labels, sorted. With a `split` column its values name the
splits (train, val, and any other for evaluate.py --split); without one, --val-split divides the rows.
A row naming a missing file, a file listed twice or an empty label is refused with the row's number.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from .. import files
from .dataset import FileImages, Subset
from .errors import DataError

LABELS_FILE = "labels.csv"  # what a --data folder holds to be read as a labels file
COLUMNS = ("path", "label")
MAX_BYTES = files.GiB  # ImageNet's 1.28 M rows take about 60 MB


def labels_file(data: str | os.PathLike) -> Path | None:
    """The labels file `data` names (a .csv, or a folder holding labels.csv, whatever that entry is), else None."""
    path = Path(data)
    if path.suffix.lower() == ".csv" and os.path.lexists(path) and not path.is_dir():
        return path
    return path / LABELS_FILE if path.is_dir() and os.path.lexists(path / LABELS_FILE) else None


def read_rows(csv_path: Path, within: Path | None = None) -> list[dict[str, str]]:
    """The CSV's rows as dicts, checked for its columns (DataError naming what is missing); a labels.csv in a
    folder (`within`) is a regular file there (files.FileRefused: no FIFO, device or link out of it)."""
    try:  # -sig (files.read_text): a spreadsheet's byte-order mark
        reader = csv.DictReader(io.StringIO(files.read_text(csv_path, MAX_BYTES, within=within), newline=""))
        missing = [name for name in COLUMNS if name not in (reader.fieldnames or [])]
        if missing:
            raise DataError(f"{csv_path}: no column {', '.join(missing)}; the header must name path,label "
                            f"(and optionally split), found {','.join(reader.fieldnames or [])}")
        return list(reader)
    except (OSError, csv.Error) as error:
        raise DataError(f"cannot read {csv_path}: {error}") from None


def check_rows(rows: list[dict[str, str]], csv_path: Path, has_split: bool) -> list[str]:
    """Every row's file as a path (relative to the CSV's folder); DataError at the first bad row."""
    folder, seen, paths = csv_path.parent, {}, []
    for number, row in enumerate(rows, start=2):  # row 1 is the header
        name, label = (row.get("path") or "").strip(), (row.get("label") or "").strip()
        if not name or not label or (has_split and not (row.get("split") or "").strip()):
            raise DataError(f"{csv_path} row {number}: an empty path, label{' or split' if has_split else ''}")
        if not label.isprintable():  # a quoted newline or tab: a class name nobody can type or print in a table
            raise DataError(f"{csv_path} row {number}: the label {label!r} holds a line break or control character")
        path = str(folder / name)
        if not os.path.isfile(path):
            raise DataError(f"{csv_path} row {number}: {name} is not a file (paths are relative to {folder})")
        stat = os.stat(path)  # the file itself: images/../images/a.png, an absolute path, a linked folder alike
        if (stat.st_dev, stat.st_ino) in seen:
            raise DataError(f"{csv_path} row {number}: {name} is the image of row {seen[stat.st_dev, stat.st_ino]} "
                            "again; it would be counted twice, or in two splits")
        seen[stat.st_dev, stat.st_ino] = number
        paths.append(path)
    return paths


def read_labels(csv_path: Path, within: Path | None = None) -> tuple[dict[str, Subset], FileImages | None]:
    """(split name -> its images, when the CSV has a split column; else {}, and all images to divide)."""
    rows = read_rows(csv_path, within)
    has_split = bool(rows) and "split" in rows[0]
    paths = check_rows(rows, csv_path, has_split)
    if not paths:
        raise DataError(f"{csv_path} lists no images")
    classes = sorted({row["label"].strip() for row in rows})
    index = {name: i for i, name in enumerate(classes)}
    targets = [index[row["label"].strip()] for row in rows]
    whole = FileImages(paths, targets, classes, str(csv_path.parent))
    if not has_split:
        return {}, whole
    splits = [row["split"].strip() for row in rows]
    named = {split: Subset(whole, [i for i, name in enumerate(splits) if name == split])
             for split in dict.fromkeys(splits)}
    check_splits(named, classes, csv_path)
    return named, None


def check_splits(named: dict[str, Subset], classes: list[str], csv_path: Path) -> None:
    """A split column that names train and val as training reads them, and no class without training rows."""
    odd = sorted(split for split in named if split.lower() in ("train", "val") and split not in ("train", "val"))
    if odd:  # Train or VAL: read as two other splits, training would look for train/ and val/ folders instead
        raise DataError(f"{csv_path}: the split column holds {', '.join(odd)}; the splits training reads are "
                        "named train and val (lower case)")
    if "train" in named:
        trained = set(named["train"].targets)
        missing = [name for index, name in enumerate(classes) if index not in trained]
        if missing:
            raise DataError(f"{csv_path}: label(s) {', '.join(missing[:5])} have no train rows; a class the model "
                            "never trains on cannot be learnt")
