"""The --val-split division of one dataset, and the record of it a run keeps.

The split is a function of the data, the fraction and the seed: add one image per class and it moves, so
most validation images would be ones the model trained on. A run therefore records the split (the rule,
the fraction, the seed, the number of images and a digest of every image's name and class) in its
checkpoints and config.json; `--resume` and evaluate.py refuse data that no longer matches it (one line,
exit 2) unless told `--resplit`. Names are relative to the data's root, so a moved data folder still matches.
"""

from __future__ import annotations

import hashlib
import json
import os
import random

from .errors import DataError


def split_indices(targets: list[int], val_split: float, seed: int) -> tuple[list[int], list[int]]:
    """A stratified, seeded split: `val_split` of each class (at least one image where it has two) to val."""
    if not 0.0 < val_split < 1.0:
        raise DataError(f"--val-split must be between 0 and 1, got {val_split}")
    rng = random.Random(seed)
    train_indices, val_indices = [], []
    by_class: dict[int, list[int]] = {}
    for index, target in enumerate(targets):  # one pass: a class per image, not an image scan per class
        by_class.setdefault(int(target), []).append(index)
    for label in sorted(by_class):
        indices = by_class[label]
        rng.shuffle(indices)
        count = min(max(round(len(indices) * val_split), 1), len(indices) - 1) if len(indices) > 1 else 0
        val_indices += indices[:count]
        train_indices += indices[count:]
    return sorted(train_indices), sorted(val_indices)


def digest(dataset) -> str:
    """sha256 of the dataset's classes and every image's name (relative to its root) and class."""
    paths, root = getattr(dataset, "paths", None), str(getattr(dataset, "root", "") or "")
    names = ([os.path.relpath(path, root) if root else str(path) for path in paths] if paths is not None
             else list(range(len(dataset))))
    text = json.dumps([list(dataset.classes), [[name, int(t)] for name, t in zip(names, dataset.targets)]])
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def record(dataset, val_split: float, seed: int) -> dict:
    """What a run keeps of its --val-split division of `dataset` (plain values, for checkpoints and JSON)."""
    return {"rule": "val_split", "val_split": val_split, "seed": seed, "images": len(dataset),
            "digest": digest(dataset)}


def check_matches(recorded: dict | None, current: dict | None, data: str) -> None:
    """Refuse (DataError) data whose --val-split division is not the one a run recorded."""
    if not recorded or recorded.get("rule") != "val_split":
        return  # split folders or a split column: the data names its own split
    same = current and all(current.get(key) == recorded.get(key) for key in ("val_split", "seed", "digest"))
    if not same:
        now = f"{current['images']} images now" if current else "it is not divided by --val-split now"
        raise DataError(f"{data} has changed since the run divided it with --val-split {recorded['val_split']} "
                        f"(seed {recorded['seed']}, {recorded['images']} images then, {now}): validation would "
                        "include images it trained on; restore the data, or pass --resplit to divide it anew")
