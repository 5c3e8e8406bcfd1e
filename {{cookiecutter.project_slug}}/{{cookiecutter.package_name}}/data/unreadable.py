"""Unreadable images during training: skipped, reported once, counted, and fatal only in bulk.

An image that cannot be
decoded is replaced by the next readable image of its split (index + 1, + 2, ...), transformed
under the same per-sample seed, so batches keep their size (ddp ranks stay in step) and the run
stays a function of (seed, epoch, index): exact resume holds. Each sample carries the skipped
file's path and reason to the main process, which warns once per file, counts the files in
metrics.csv and stops the run (DataError, exit 2) once more than `--max-bad-fraction` of a split
is unreadable. The fraction is checked at each epoch's end, when the ranks have pooled their
findings; a long run of unreadable files (a folder of non-images) stops it at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from torch.utils.data import Dataset

from .errors import DataError

MAX_IN_A_ROW = 32  # this many unreadable images one after another: the data is broken, not a file or two


class SkipUnreadable(Dataset):
    """A Decoded dataset whose unreadable images are replaced by the next readable: (image, target, path, reason).

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
                    skipped = self.dataset.name(position)
                    reason = str(error).removeprefix(f"cannot read image {skipped}: ")
                continue
            return image, target, skipped, reason
        raise DataError(f"{MAX_IN_A_ROW} unreadable images in a row from {self.dataset.name(index)}; "
                        f"see python -m {__package__} check DATA")


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

    def close(self) -> None:
        """End the loader's worker processes now rather than whenever the garbage collector frees them."""
        # Freed by a collection (a run's objects refer to each other), a loader's queues are closed
        # before its persistent workers hear the shutdown: each is then waited for 5 s and killed.
        # Dropping the last reference ends them at once.
        self.loader = None

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

    def pool(self, processes) -> None:
        """Every process's findings in every process (each reads its own share): all processes call it."""
        for state in processes.gather(self.state()):
            for split, paths in state.items():
                self.found[split].update(paths)

    def check(self) -> None:
        """Raise DataError when more than the allowed fraction of a split is unreadable."""
        for split, paths in self.found.items():
            if len(paths) > self.max_fraction * self.sizes[split]:
                raise DataError(f"{len(paths)} of {self.sizes[split]} images in {split}/ are unreadable, more than "
                                f"--max-bad-fraction {self.max_fraction:g} allows; see python -m "
                                f"{__package__} check DATA")
