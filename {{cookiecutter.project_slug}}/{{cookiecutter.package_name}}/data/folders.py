"""What `--data` names, opened the one way training, evaluate.py and the data check share, and divided into splits.

`--data` is one of:
- a folder of split folders (train/, val/, any other for evaluate.py --split) of class folders;
- a folder of class folders, divided by --val-split (data/splits.py; the division is recorded);
- a labels file: a .csv, or a folder holding labels.csv (data/labels_csv.py);
- `module:function`, an import path to the user's own dataset: the function returns an ImageDataset
  (data/dataset.py), divided by --val-split, or a dict of them by split name.
Folders are listed by data/listing.py (no directory links followed, hidden names skipped and noted,
aliased class folders refused).
"""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

import torch

from .dataset import Decoded, FileImages, ImageDataset, Subset, check_dataset
from .errors import DataError
from .images import DECODE_ERRORS, load_rgb
from .labels_csv import LABELS_FILE, labels_file, read_labels
from .listing import IMG_EXTENSIONS, check_apart, list_classes
from .splits import record, split_indices
from .transforms import Preprocessing, build_transforms

__all__ = ["DECODE_ERRORS", "DataError", "load_rgb", "split_indices", "image_folder", "load_splits", "class_counts",
           "open_data"]

IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # package.module:function


def _from_import_path(spec: str) -> tuple[dict[str, ImageDataset], ImageDataset | None]:
    """The user's own dataset: `module:function` called with no arguments."""
    try:  # the user's code: its own errors (a syntax error, a sys.exit) are one line here, not a traceback
        made = pkgutil.resolve_name(spec)
        if isinstance(made, type) or (callable(made) and not isinstance(made, ImageDataset)):  # a class or function
            made = made()
    except (Exception, SystemExit) as error:
        reason = (str(error).strip().splitlines() or [""])[0]
        raise DataError(f"--data {spec}: importing or calling it failed ({type(error).__name__}: {reason})") from None
    if isinstance(made, dict):
        return {split: check_dataset(dataset, f"--data {spec} [{split!r}]") for split, dataset in made.items()}, None
    return {}, check_dataset(made, f"--data {spec}")


class DataSource:
    """What `--data` names, opened once: its named splits (listed when asked for), or one dataset to divide."""

    def __init__(self, data: str | Path, allow_empty: bool = False):
        self.data, path, self.allow_empty = str(data), Path(data), allow_empty  # allow_empty: the check reports them
        self.named: dict[str, ImageDataset] = {}
        self.whole: ImageDataset | None = None
        self.folder: Path | None = None  # a folder whose split folders are listed on demand
        self.notes: list[str] = []
        csv_path = labels_file(path)
        if csv_path is not None:
            self.named, self.whole = read_labels(csv_path, within=path if path.is_dir() else None)
        elif path.is_dir():
            self.folder = path if (path / "train").is_dir() or (path / "val").is_dir() else None  # else: --val-split
            self.whole = None if self.folder else self._listed(path)
        elif IMPORT_PATH.match(self.data) and not path.exists():
            self.named, self.whole = _from_import_path(self.data)
        else:
            raise DataError(f"--data {data}: not a folder, a .csv labels file or a module:function dataset")

    def _listed(self, folder: Path) -> FileImages:
        listing = list_classes(folder)
        if not listing.classes:
            layouts = "" if folder != Path(self.data) else (f", {folder}/train/<class>/<image> and val/, or "
                                                            f"{folder}/{LABELS_FILE}")
            raise DataError(f"{folder} holds no class folders: expected {folder}/<class>/<image>{layouts}")
        present = set(listing.targets)
        empty = [name for index, name in enumerate(listing.classes) if index not in present]
        if empty and not self.allow_empty:
            raise DataError(f"{folder}: class folder(s) {', '.join(empty)} hold no images (extensions: "
                            f"{', '.join(IMG_EXTENSIONS)})")
        if listing.note():
            self.notes.append(listing.note())
        return FileImages(listing.paths, listing.targets, listing.classes, str(folder))

    def split(self, split: str) -> ImageDataset | None:
        """The named split `split` (a split folder, a split column's value, a factory's key), or None."""
        if self.folder is not None and split not in self.named and (self.folder / split).is_dir():
            self.named[split] = self._listed(self.folder / split)
        return self.named.get(split)


def open_data(data: str | Path, allow_empty: bool = False) -> DataSource:
    """Open `--data` (see the module docstring); DataError when it is none of those, or (unless `allow_empty`)
    when a class folder holds no image."""
    return DataSource(data, allow_empty)


def short_side(prep: Preprocessing) -> int:
    """The size images are resized to (their shorter side) before the crop: what the memory budget checks."""
    return max(prep.resize_size or prep.image_size, prep.image_size)


def decoded(source: DataSource, split: str, image_size: int | Preprocessing, train: bool,
            val_split: float | None, seed: int) -> Decoded:
    """Split `split` as (tensor, target) samples, with `split_record` (how it was chosen: {"rule": "named"}, or the
    --val-split record) and `notes` attached."""
    prep = image_size if isinstance(image_size, Preprocessing) else Preprocessing(image_size)
    dataset, how = source.split(split), {"rule": "named"}
    if dataset is None:
        if source.whole is None or split not in ("train", "val") or not val_split:
            raise DataError(f"{source.data}: no split named {split!r}: expected {source.data}/{split}/<class>/<image>, "
                            f"{source.data}/<class>/<image> divided by --val-split, or a labels.csv whose split column "
                            f"holds {split!r}")
        train_indices, val_indices = split_indices(list(source.whole.targets), val_split, seed)
        dataset = Subset(source.whole, val_indices if split == "val" else train_indices)
        how = record(source.whole, val_split, seed)
    elif len(dataset) == 0:
        raise DataError(f"{source.data}: split {split!r} holds no images")
    samples = Decoded(dataset, build_transforms(prep, train), short_side(prep))
    samples.split_record, samples.notes = how, list(source.notes)
    return samples


def image_folder(root: Path | str, split: str, image_size: int | Preprocessing, train: bool, *,
                 val_split: float | None = None, seed: int = 0) -> Decoded:
    """One split of `--data` (any kind: see the module docstring), with a DataError when it is missing or empty."""
    return decoded(open_data(root), split, image_size, train, val_split, seed)


def load_splits(root: Path | str, image_size: int | Preprocessing, *, val_split: float | None = None,
                seed: int = 0, allow_empty: bool = False) -> tuple[Decoded, Decoded]:
    """The train and val splits of `--data` (opened once), checked to share one list of classes."""
    source = open_data(root, allow_empty)
    val_set = decoded(source, "val", image_size, False, val_split, seed)  # first: a missing val/ is named as such
    train_set = decoded(source, "train", image_size, True, val_split, seed)
    if source.folder is not None:
        check_apart(source.folder / "train", source.folder / "val")
    if train_set.classes != val_set.classes:
        raise DataError(f"{root}: train/ classes {train_set.classes} differ from val/ classes {val_set.classes}")
    return train_set, val_set


def class_counts(dataset) -> torch.Tensor:
    """Images per class, as a float tensor of shape (num_classes,)."""
    return torch.bincount(torch.tensor(dataset.targets, dtype=torch.long), minlength=len(dataset.classes)).float()
