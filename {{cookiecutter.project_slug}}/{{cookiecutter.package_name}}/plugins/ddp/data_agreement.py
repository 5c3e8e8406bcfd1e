"""Before training under ddp, every rank checks that it sees the data rank 0 sees.

Ranks whose `--data` differ (another copy on a node-local disk, a folder still being synced) would
shard different lists, run out of batches at different steps and wait for each other forever. Each
rank describes its data in a few plain values (classes, split sizes, a digest of its file list with
paths relative to the data root, so the same data mounted at another path agrees); the ranks gather
them and all refuse alike, with one line naming the first rank that differs and how.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ...data.errors import DataError


def fingerprint(root: Path, train_set, val_set) -> dict:
    """Classes, split sizes and a digest of (relative path, label) of every sample, as plain values."""
    digest = hashlib.sha256()
    for split in (train_set, val_set):
        for name, target in getattr(split, "samples", ()):  # a dataset without a file list: its sizes only
            relative = os.path.relpath(name, root) if os.path.isabs(name) else name
            digest.update(f"{relative}\t{target}\n".encode())
        digest.update(b"\0")  # the same files, split differently, differ
    return {"classes": list(train_set.classes), "train": len(train_set), "val": len(val_set),
            "files": digest.hexdigest()[:16]}


def disagreement(fingerprints: list[dict]) -> str | None:
    """One line naming the first rank whose data differs from rank 0's, and how; None when all agree."""
    first = fingerprints[0]
    for rank, other in enumerate(fingerprints[1:], start=1):
        if other == first:
            continue
        if other["classes"] != first["classes"]:
            how = f"classes {other['classes']} (rank 0: {first['classes']})"
        elif (other["train"], other["val"]) != (first["train"], first["val"]):
            how = (f"{other['train']} training and {other['val']} validation images (rank 0: {first['train']} "
                   f"and {first['val']})")
        else:
            how = "the same number of images but other files"
        return (f"ranks see different data: rank {rank} of {len(fingerprints)} has {how}; every rank needs the "
                "same --data (a shared filesystem, or identical copies)")
    return None


def check_ranks_agree(processes, root: Path, train_set, val_set) -> None:
    """Raise DataError on every rank alike unless every rank's data matches rank 0's."""
    problem = disagreement(processes.gather(fingerprint(root, train_set, val_set)))
    if problem:
        raise DataError(problem)
