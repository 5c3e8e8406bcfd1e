"""The dataset interface: what any dataset implements to get splitting, sizing, unreadable-image handling,
evaluate.py and predict.py, and the two datasets built on it.

    class ImageDataset(Protocol):
        classes: Sequence[str]   # class names; a target is an index into them
        targets: Sequence[int]   # one class index per image, readable without decoding (splitting, class weights)
        def __len__(self) -> int
        def __getitem__(self, index) -> tuple[str | os.PathLike | PIL.Image.Image, int]   # (image, target)

An image given as a file path is opened by the pipeline (data/images.load_rgb: EXIF orientation,
16-bit grey, the memory budget, unreadable files skipped and counted); one given as a PIL image
is checked against the same budget. An optional `paths` (one name per image) makes the recorded
--val-split (data/splits.py) name the files; without it the split is recorded by count and targets.
Class folders (data/listing.py) and labels files (data/labels_csv.py) are both `FileImages`.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import torch.utils.data
from PIL import Image

from .errors import DataError
from .images import as_rgb


@runtime_checkable
class ImageDataset(Protocol):
    """Labelled images: `classes`, `targets`, and (image path or PIL image, target) per index."""

    classes: Sequence[str]
    targets: Sequence[int]

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> tuple[str | os.PathLike | Image.Image, int]: ...


class FileImages:
    """Image files and their class indices: an ImageDataset (class folders and labels files both build one)."""

    def __init__(self, paths: Sequence[str], targets: Sequence[int], classes: Sequence[str], root: str = ""):
        self.paths, self.targets, self.classes, self.root = list(paths), list(targets), list(classes), root

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[str, int]:
        return self.paths[index], self.targets[index]


class Subset(torch.utils.data.Subset):
    """The images of `dataset` at `indices`: an ImageDataset (a --val-split side)."""

    def __init__(self, dataset: ImageDataset, indices: Sequence[int]):
        super().__init__(dataset, list(indices))
        self.classes = list(dataset.classes)
        self.targets = [dataset.targets[i] for i in self.indices]
        paths = getattr(dataset, "paths", None)
        if paths is not None:
            self.paths = [paths[i] for i in self.indices]


class Checked:
    """Your dataset as the pipeline reads it: `classes` as a list of names, `targets` as Python ints.

    torchvision's own datasets keep targets in a tensor (MNIST) and some keep numbers as classes; the
    split, the class weights and the checkpoint all need plain values, so they are converted once, here.
    Items are still read from your dataset; one whose target disagrees with `targets` is a DataError.
    """

    def __init__(self, dataset: ImageDataset, classes: list[str], targets: list[int], name: str):
        self.dataset, self.classes, self.targets, self.name = dataset, classes, targets, name
        for attribute in ("paths", "root"):
            if hasattr(dataset, attribute):
                setattr(self, attribute, getattr(dataset, attribute))

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int):
        try:
            item, target = self.dataset[index]
        except IndexError:
            raise DataError(f"{self.name}: dataset[{index}] raised IndexError, but its targets count "
                            f"{len(self.targets)} images") from None
        if _plain_int(target) != self.targets[index]:
            raise DataError(f"{self.name}: dataset[{index}] gives target {target!r}, but targets[{index}] is "
                            f"{self.targets[index]}")
        return item, self.targets[index]


def _plain_int(value) -> int | None:
    """A whole-number target as an int (Python, NumPy or a 0-dim tensor); None for anything else."""
    if isinstance(value, (bool, float)):
        return None
    try:
        return operator.index(value.item() if hasattr(value, "item") and not isinstance(value, int) else value)
    except (TypeError, ValueError, RuntimeError):
        return None


def _class_names(classes, name: str) -> list[str]:
    """classes as distinct names: strings kept, whole numbers written out; a set (no order) refused."""
    if isinstance(classes, (set, frozenset, dict)) or not isinstance(classes, Sequence):
        raise DataError(f"{name}: classes is a {type(classes).__name__}; give a list (its order numbers the "
                        "targets)")
    names = [str(c) if isinstance(c, str) or _plain_int(c) is not None else None for c in classes]
    odd = next((c for c, named in zip(classes, names) if named is None or not named.strip()), None)
    if odd is not None or not names:
        raise DataError(f"{name}: classes holds {odd!r}; expected class names (strings)")
    if len(set(names)) != len(names):
        raise DataError(f"{name}: class names repeat: {names}")
    return names


def check_dataset(dataset, name: str) -> Checked:
    """Your dataset with classes and targets checked and made plain (Checked); DataError, naming what is wrong,
    for a dataset that does not implement ImageDataset or whose targets do not fit its classes."""
    if not isinstance(dataset, ImageDataset):
        raise DataError(f"{name}: a dataset needs classes, targets, __len__ and __getitem__ "
                        "(data/dataset.py ImageDataset)")
    classes = _class_names(dataset.classes, name)
    raw = dataset.targets.tolist() if hasattr(dataset.targets, "tolist") else list(dataset.targets)
    targets = [_plain_int(target) for target in raw]
    if len(targets) != len(dataset):
        raise DataError(f"{name}: {len(targets)} targets for {len(dataset)} images")
    bad = next((index for index, target in enumerate(targets) if target is None or not 0 <= target < len(classes)),
               None)
    if bad is not None:
        raise DataError(f"{name}: targets[{bad}] is {raw[bad]!r}, not a class index (0..{len(classes) - 1})")
    checked = Checked(dataset, classes, targets, name)
    item = checked[0][0] if len(checked) else None
    if item is not None and not isinstance(item, (str, os.PathLike, Image.Image)):
        raise DataError(f"{name}: dataset[0] gives a {type(item).__name__}; give a file path or a PIL image")
    return checked


class Decoded(torch.utils.data.Dataset):
    """An ImageDataset's images opened, checked against the memory budget and transformed: (tensor, target).

    `transform` may be replaced (the pipeline sets the uint8 one; the cache a resize-only one).
    `short_side`: the size images are resized to, for the budget (data/images.py).
    """

    def __init__(self, source: ImageDataset, transform: Callable | None, short_side: int | None = None):
        self.source, self.transform, self.short_side = source, transform, short_side
        self.classes, self.targets = list(source.classes), list(source.targets)  # a target: a class index

    @property
    def samples(self) -> list[tuple[str, int]]:
        """(name, target) per image, as ImageFolder's `samples` (names: `paths`, else the index)."""
        return [(self.name(index), target) for index, target in enumerate(self.targets)]

    def name(self, index: int) -> str:
        """What warnings call image `index`: its path, else its index."""
        paths = getattr(self.source, "paths", None)
        return str(paths[index]) if paths is not None else f"image {index}"

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int):
        item, target = self.source[index]
        image = as_rgb(item, self.short_side, self.name(index))  # DataError when unreadable
        return (self.transform(image) if self.transform else image), int(target)
