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

import os
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from PIL import Image
from torch.utils.data import Dataset

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


class Subset:
    """The images of `dataset` at `indices`: an ImageDataset (a --val-split side)."""

    def __init__(self, dataset: ImageDataset, indices: Sequence[int]):
        self.dataset, self.indices = dataset, list(indices)
        self.classes = list(dataset.classes)
        self.targets = [dataset.targets[i] for i in self.indices]
        paths = getattr(dataset, "paths", None)
        if paths is not None:
            self.paths = [paths[i] for i in self.indices]

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int):
        return self.dataset[self.indices[index]]


def check_dataset(dataset, name: str) -> None:
    """Refuse (DataError) a dataset that does not implement ImageDataset, or whose targets do not fit its classes."""
    if not isinstance(dataset, ImageDataset):
        raise DataError(f"{name}: a dataset needs classes, targets, __len__ and __getitem__ "
                        "(data/dataset.py ImageDataset)")
    if len(dataset.targets) != len(dataset):
        raise DataError(f"{name}: {len(dataset.targets)} targets for {len(dataset)} images")
    if len(set(dataset.classes)) != len(dataset.classes):
        raise DataError(f"{name}: class names repeat: {list(dataset.classes)}")
    if any(not 0 <= target < len(dataset.classes) for target in dataset.targets):
        raise DataError(f"{name}: a target is not an index into its {len(dataset.classes)} classes")
    item = dataset[0][0] if len(dataset) else None
    if item is not None and not isinstance(item, (str, os.PathLike, Image.Image)):
        raise DataError(f"{name}: dataset[0] gives a {type(item).__name__}; give a file path or a PIL image")


class Decoded(Dataset):
    """An ImageDataset's images opened, checked against the memory budget and transformed: (tensor, target).

    `transform` may be replaced (the pipeline sets the uint8 one; the cache a resize-only one).
    `short_side`: the size images are resized to, for the budget (data/images.py).
    """

    def __init__(self, source: ImageDataset, transform: Callable | None, short_side: int | None = None):
        self.source, self.transform, self.short_side = source, transform, short_side
        self.classes = list(source.classes)
        self.class_to_idx = {name: index for index, name in enumerate(self.classes)}
        self.root = getattr(source, "root", "")

    @property
    def targets(self) -> list[int]:
        """One class index per image."""
        return list(self.source.targets)

    @property
    def samples(self) -> list[tuple[str, int]]:
        """(name, target) per image, as ImageFolder's `samples` (names: `paths`, else the index)."""
        return [(self.name(index), target) for index, target in enumerate(self.source.targets)]

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
