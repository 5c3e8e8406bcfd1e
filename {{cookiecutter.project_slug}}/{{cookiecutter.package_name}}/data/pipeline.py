"""The data pipeline behind one call: `build_loaders(cfg, device)` returns the loaders and what they hold.

It writes the demo data when no `--data` is given (one process of several), chooses the preprocessing
(data/preprocessing.py), loads the splits, decodes them into memory with `--cache-images`, skips
unreadable images (data/unreadable.py), and builds seeded, pinned loaders, each process reading its share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import torch

from ..processes import Processes
from .cache import cache_splits
from .demo import DEMO_IMAGE_SIZE, DEMO_ROOT, write_demo_dataset
from .folders import DataError, class_counts, load_splits, short_side
from .loaders import build_loader
from .preprocessing import choose_preprocessing
from .splits import check_matches
from .transforms import Preprocessing, build_transforms
from .unreadable import ReportingLoader, SkipUnreadable, UnreadableLog


@dataclasses.dataclass
class ReadPlan:
    """How the loaders will read each split, which a plugin may change (`Plugin.loaders`: the gpu_decode answer
    has the workers hand over JPEG bytes for the device to decode)."""

    cfg: object  # the run's TrainConfig
    device: torch.device
    datasets: dict[bool, object]  # train (True) and val (False), each possibly inside SkipUnreadable
    geometry: Preprocessing  # the sizes and augmentation the loaders apply
    collate: dict[bool, Callable] = dataclasses.field(default_factory=dict)  # per split; absent: torch's default
    decode: str = "cpu"  # where images are decoded, and why: what the start-up line and config.json say
    decode_reason: str = "in the loader workers"


@dataclasses.dataclass
class Loaders:
    """What `build_loaders` returns: both loaders, the classes, and the preprocessing (with its reason)."""

    train_loader: ReportingLoader
    val_loader: ReportingLoader
    class_names: list[str]
    class_counts: torch.Tensor  # (C,) training images per class, for balanced loss weights
    preprocessing: Preprocessing
    unreadable: UnreadableLog  # unreadable files found so far, per split; saved in checkpoints
    split: dict  # how train and val were chosen: {"rule": "named"} or the --val-split record (data/splits.py)
    notes: list[str]  # what the listing left out (hidden names, directory links), for the CLI to print
    decode: str = "cpu"  # where JPEGs are decoded: cpu (in the loader workers) | device (a plugin: gpu_decode)
    decode_reason: str = ""


def check_trainable(root: Path, train_set, val_set) -> None:
    """Refuse data a classifier cannot learn or be measured on (DataError), before anything is written.

    One class trains to loss 0 and accuracy 1.0; an empty validation split reports val_loss 0.0 and
    keeps a best.pt chosen on nothing.
    """
    if len(train_set.classes) < 2:
        raise DataError(f"{root} holds {len(train_set.classes)} class ({', '.join(train_set.classes)}); "
                        "a classifier needs at least two class folders")
    if len(val_set) == 0:
        raise DataError(f"{root}: the validation split is empty; add images to val/ (or use --val-split on a "
                        "folder of class folders with at least two images per class)")
    if len(train_set) < 2:
        raise DataError(f"{root}: the training split holds {len(train_set)} image(s); training needs at least two")


def build_loaders(cfg, device: torch.device, *, saved: Preprocessing | None = None,
                  on_unreadable: Callable[[str, str, str], None] | None = None, recorded_split: dict | None = None,
                  processes: Processes | None = None, plugins=()) -> Loaders:
    """The run's training and validation loaders for `cfg` (a TrainConfig) on `device`.

    `saved`: the preprocessing of the checkpoint the weights come from (it wins unless --image-size is given).
    `on_unreadable(split, path, reason)` hears of each unreadable image as it is skipped. `recorded_split`: the
    split of the run being resumed; data that no longer matches it is refused (DataError) unless `cfg.resplit`.
    `processes` share the data out (one by default); a plugin may change how images are read (ReadPlan).
    """
    processes = processes or Processes()
    with processes.main_first():  # one process writes the demo data
        root = Path(cfg.data) if cfg.data else write_demo_dataset(DEMO_ROOT)
    train_set, val_set = load_splits(root, DEMO_IMAGE_SIZE, val_split=cfg.val_split, seed=cfg.seed)
    processes.check_same_data(root, train_set, val_set)  # every process the same data, or all refuse
    check_trainable(root, train_set, val_set)
    # sized from the training images themselves: any kind of --data (folders, labels file, own dataset)
    preprocessing = choose_preprocessing(cfg.backbone, cfg.data and train_set.source, cfg.image_size,
                                         cfg.pretrained, saved, cfg.augment)
    train_set.short_side = val_set.short_side = short_side(preprocessing)  # the memory budget; read_plan: transforms
    if not getattr(cfg, "resplit", False):
        check_matches(recorded_split, train_set.split_record, str(root))
    split, notes = train_set.split_record, list(dict.fromkeys(train_set.notes + val_set.notes))
    class_names, counts = list(train_set.classes), class_counts(train_set)
    plan = read_plan(cfg, device, train_set, val_set, preprocessing, plugins)
    report = on_unreadable or (lambda split, path, reason: None)
    train_set, val_set = plan.datasets[True], plan.datasets[False]
    train_loader = build_loader(train_set, cfg.batch_size, device, train=True, workers=cfg.workers, seed=cfg.seed,
                                sampler=processes.train_sampler(train_set, cfg.seed), collate_fn=plan.collate.get(True))
    val_loader = build_loader(val_set, cfg.batch_size, device, train=False, workers=cfg.workers,
                              sampler=processes.eval_indices(val_set), collate_fn=plan.collate.get(False))
    unreadable = UnreadableLog({"train": len(train_set), "val": len(val_set)}, cfg.max_bad_fraction)
    return Loaders(ReportingLoader(train_loader, lambda path, reason: report("train", path, reason)),
                   ReportingLoader(val_loader, lambda path, reason: report("val", path, reason)),
                   class_names, counts, preprocessing, unreadable, split, notes, plan.decode, plan.decode_reason)


def read_plan(cfg, device: torch.device, train_set, val_set, preprocessing: Preprocessing, plugins) -> ReadPlan:
    """The splits as the loaders read them: cached in memory (--cache-images) or skipping unreadable files, uint8
    out of the workers (made float on the device), and what a plugin changes."""
    geometry = preprocessing
    if cfg.cache_images:  # decode once: small runs become compute-bound (see cache.py); cached data has no bad files
        train_set, val_set = cache_splits(train_set, val_set, preprocessing, cfg.cache_budget_mb, cfg.workers)
        geometry = dataclasses.replace(preprocessing, resize_size=None)  # already resized: augmentation still runs
    for dataset, train in ((train_set, True), (val_set, False)):
        dataset.transform = build_transforms(geometry, train, normalize=False)
    if not cfg.cache_images:
        train_set, val_set = SkipUnreadable(train_set), SkipUnreadable(val_set)
    plan = ReadPlan(cfg, device, {True: train_set, False: val_set}, geometry)
    for plugin in plugins:
        plugin.loaders(plan)
    return plan
