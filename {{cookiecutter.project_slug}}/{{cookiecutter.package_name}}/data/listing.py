"""The one listing of image files on disk, used by training, evaluate.py, predict.py and the data check alike.

Rules, the same everywhere:
- image files are those with an extension torchvision's ImageFolder reads (IMG_EXTENSIONS);
- names starting with a dot (files and folders: `.DS_Store`, `._photo.jpg`, `.ipynb_checkpoints/`) are
  skipped and named in the listing's note;
- directory links inside a class folder are not followed (a link `train/a/loop -> ..` would list the
  tree again, under the wrong class); file links are read. A class folder itself may be a link (to
  data kept elsewhere), but two class folders that are the same directory, or one inside the
  other, are refused: they would train two classes on the same images.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from torchvision.datasets.folder import IMG_EXTENSIONS

from .errors import DataError

SHOWN = 5  # names shown in a note; the rest are counted


def is_image_name(name: str) -> bool:
    """Whether a file name has an image extension and is not hidden."""
    return not name.startswith(".") and name.lower().endswith(IMG_EXTENSIONS)


@dataclasses.dataclass
class Listing:
    """Image files in class order, their class indices, and what was left out (hidden names, directory links)."""

    classes: list[str]
    paths: list[str]
    targets: list[int]
    hidden: list[str] = dataclasses.field(default_factory=list)
    links: list[str] = dataclasses.field(default_factory=list)

    def note(self) -> str:
        """One line naming what was left out, or ""."""
        parts = [f"{len(names)} {what}: {', '.join(names[:SHOWN])}{' ...' if len(names) > SHOWN else ''}"
                 for what, names in (("hidden files or folders", self.hidden),
                                     ("directory links (not followed)", self.links)) if names]
        return f"note: skipped {'; '.join(parts)}" if parts else ""


def walk_images(folder: Path, hidden: list[str], links: list[str]) -> list[str]:
    """Image files under `folder` (sorted), not following directory links; hidden names and links are appended."""
    found = []
    for top, dirs, files in os.walk(folder, followlinks=False):
        for name in sorted(dirs):
            path = os.path.join(top, name)
            if name.startswith("."):
                hidden.append(path)
            elif os.path.islink(path):
                links.append(path)
        dirs[:] = sorted(name for name in dirs if not name.startswith("."))  # links: os.walk does not enter them
        hidden.extend(os.path.join(top, name) for name in sorted(files) if name.startswith("."))
        found.extend(os.path.join(top, name) for name in sorted(files) if is_image_name(name)
                     and os.path.isfile(os.path.join(top, name)))
    return found


def image_files(folder: Path) -> Listing:
    """Every image under `folder`, by the listing's rules, without classes (predict.py's folders)."""
    listing = Listing([], [], [])
    listing.paths = walk_images(Path(folder), listing.hidden, listing.links)
    return listing


def class_folders(folder: Path) -> list[str]:
    """The class folder names of `folder` (hidden ones left out), sorted."""
    try:
        entries = list(os.scandir(folder))
    except OSError as error:
        raise DataError(f"cannot list {folder}: {error.strerror or error}") from None
    return sorted(entry.name for entry in entries if entry.is_dir() and not entry.name.startswith("."))


def check_not_aliased(folders: list[Path]) -> None:
    """Refuse class folders that are one directory, or one inside another (DataError naming both)."""
    # Sorted by their parts, a folder's descendants follow it at once: comparing neighbours finds every alias.
    real = sorted((Path(os.path.realpath(folder)).parts, str(folder)) for folder in folders)
    for (one, one_name), (other, other_name) in zip(real, real[1:]):
        if other[:len(one)] == one:
            raise DataError(f"class folders {one_name} and {other_name} are the same directory (a link or "
                            f"nested): each image would train two classes; keep one of them")


def check_apart(train_folder: Path, val_folder: Path) -> None:
    """Refuse a val/ whose class folders are train's (a link): it would validate on the images it trains on."""
    def real_classes(folder: Path) -> dict[str, str]:
        return {os.path.realpath(folder / name): str(folder / name) for name in class_folders(folder)}

    train, val = real_classes(train_folder), real_classes(val_folder)
    shared = sorted(set(train) & set(val))
    if shared:
        raise DataError(f"{val[shared[0]]} is the same directory as {train[shared[0]]}: validation would measure "
                        "the images it trains on")


def list_classes(folder: Path) -> Listing:
    """The images of a folder of class folders, labelled by folder, by the listing's rules."""
    folder = Path(folder)
    listing = Listing(class_folders(folder), [], [])
    listing.hidden = sorted(str(folder / entry.name) for entry in os.scandir(folder) if entry.name.startswith("."))
    check_not_aliased([folder / name for name in listing.classes])
    tree = Path(os.path.realpath(folder))
    for index, name in enumerate(listing.classes):
        real = Path(os.path.realpath(folder / name))
        if real == tree or real in tree.parents:
            raise DataError(f"class folder {folder / name} is a link to {real}, which holds the data folder itself; "
                            "its images would be listed again under another class")
        files = walk_images(folder / name, listing.hidden, listing.links)
        listing.paths += files
        listing.targets += [index] * len(files)
    return listing
