"""Checking what a training checkpoint says before any of it is used: a file that lies is refused by name.

A checkpoint is data from disk, perhaps hand-edited, truncated, from another version or another
project. `check_values` refuses (CheckpointError, one line naming the key) a missing key, a value of
the wrong kind, an out-of-range value (an image size past data.transforms.MAX_IMAGE_SIZE, a zero or
non-finite std, duplicate class names, a negative epoch) and non-finite weights. `check_shapes`
compares the weights' shapes with the model the checkpoint names, built on the meta device (no
memory), and the head's rows with the class names, before any real model is allocated. run_state.read
runs both, so train.py --resume/--init-from, evaluate.py, predict.py and export.py see only checked files.
"""

from __future__ import annotations

import collections
import math
import os
import typing
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .. import backbones
from ..config import TrainConfig, type_name, value_fits
from ..data.transforms import AUGMENTATIONS, Preprocessing
from ..devkit.checkpoint import CheckpointError, state_dict_mismatch
from ..devkit.precision import DTYPES
from ..errors import UserError
from ..errors import one_line as cli_line
from .optimization import OPTIMIZERS, SCHEDULES

REQUIRED_KEYS = ("model", "config", "class_names", "image_size")
# The settings a resume or a rebuild uses whose values come from registries; the rest may differ between bakes
RECORDED_CHOICES = {"precision": tuple(DTYPES), "augment": tuple(AUGMENTATIONS), "optimizer": tuple(OPTIMIZERS),
                    "schedule": tuple(SCHEDULES)}
HEAD_WEIGHT = "head.weight"  # model.Classifier's head: one row per class
# The kinds of the keys, required and optional (older checkpoints lack some of the latter; train.py writes them all).
KINDS: dict[str, type | tuple[type, ...]] = {
    "model": dict, "config": dict, "class_names": (list, tuple), "image_size": int,
    "epoch": int, "step": int, "best_val_acc": (int, float), "optimizer": dict, "scheduler": dict, "scaler": dict,
    "rng": dict, "metrics": list, "version": str, "preprocessing": (dict, type(None)),
    "weights": str, "plugins": dict, "epoch_totals": dict, "unreadable": dict, "class_counts": list,
}


def _refuse(path: str | os.PathLike, what: str) -> CheckpointError:
    return CheckpointError(f"{path}: {what}")


def _is(value: Any, kind: type | tuple[type, ...]) -> bool:
    """isinstance, where a bool is never a number."""
    return isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)


def check_values(state: dict[str, Any], path: str | os.PathLike, config_class: type = TrainConfig) -> None:
    """Refuse (CheckpointError naming the key) a checkpoint whose keys, kinds, ranges or weights cannot be right;
    its config's fields are `config_class`'s (TrainConfig, or with the plugins' settings: config.config_class).

    The file's own structure first (keys, kinds, names, ranges, weights, counts), then what its settings say in
    the project's terms (the preprocessing, the config's fields): every check stands alone, whatever its turn.
    """
    _check_layout(state, path)
    _check_class_names(state["class_names"], path)
    _check_optional(state, path)
    check_weights(state["model"], "model", path)
    _check_class_counts(state.get("class_counts"), len(state["class_names"]), path)
    _check_preprocessing(state, path)
    _check_config(state["config"], path, config_class)


def _check_layout(state: dict[str, Any], path: str | os.PathLike) -> None:
    """The keys every checkpoint of this project has, and every key it has holding the right kind of value."""
    missing = [key for key in REQUIRED_KEYS if key not in state]
    if missing:
        raise CheckpointError(f"{path} was not written by this project's train.py (no {', '.join(missing)})")
    for key, kind in KINDS.items():
        if key in state and not _is(state[key], kind):
            raise _refuse(path, f"{key} is a {type(state[key]).__name__}")


def _check_class_names(names: list | tuple, path: str | os.PathLike) -> None:
    """At least one class, every name a non-empty string, no name twice (two logits with one label)."""
    if not names:
        raise _refuse(path, "class_names is empty")
    odd = [name for name in names if not isinstance(name, str) or not name]
    if odd:
        raise _refuse(path, f"class_names holds {odd[0]!r}, not a class name")
    twice = [name for name, count in collections.Counter(names).items() if count > 1]
    if twice:
        raise _refuse(path, f"class_names names {twice[0]!r} twice")


def _check_config(config: dict, path: str | os.PathLike, config_class: type) -> None:
    """The run's settings: a backbone name, and every field of `config_class` it has of the field's type and choices."""
    hints = typing.get_type_hints(config_class)
    if not isinstance(config.get("backbone"), str):
        raise _refuse(path, f"config.backbone is {config.get('backbone')!r}, not a backbone name")
    for key, hint in hints.items():
        if key not in config:
            continue  # older checkpoints lack newer settings: their defaults apply
        value, allowed = config[key], RECORDED_CHOICES.get(key)
        if not value_fits(value, hint) or (allowed and value is not None and value not in allowed):
            expected = f"one of {', '.join(map(str, allowed))}" if allowed else type_name(hint)
            raise _refuse(path, f"config.{key} is {value!r} (expected {expected})")
        if isinstance(value, float) and not math.isfinite(value):
            raise _refuse(path, f"config.{key} is {value}, not a finite number")


def _check_optional(state: dict[str, Any], path: str | os.PathLike) -> None:
    """The values of the keys train.py writes beside the required ones, where present: their ranges."""
    for key in ("epoch", "step"):
        if state.get(key, 0) < 0:
            raise _refuse(path, f"{key} is {state[key]}, below 0")
    if not state.get("weights", "model").isidentifier():  # "model", or the name of weights a plugin validated
        raise _refuse(path, f"weights is {state['weights']!r}, not the name of weights")
    if not all(isinstance(name, str) and isinstance(kept, dict) for name, kept in state.get("plugins", {}).items()):
        raise _refuse(path, "plugins holds something other than each plugin's state by name")
    if not all(isinstance(row, dict) and _is(row.get("epoch"), int) for row in state.get("metrics", [])):
        raise _refuse(path, "metrics holds a row without a whole-number epoch")
    unreadable = state.get("unreadable", {})
    if not all(isinstance(paths, list) and all(isinstance(p, str) for p in paths) for paths in unreadable.values()):
        raise _refuse(path, "unreadable holds something other than lists of file names")


def _check_preprocessing(state: dict[str, Any], path: str | os.PathLike) -> None:
    """The image size, and where recorded the preprocessing: sizes in range, a normalisation by positive, finite
    numbers, a known augmentation (Preprocessing.problem, which model folders are checked with too)."""
    problem = Preprocessing(state["image_size"]).problem()
    if problem:
        raise _refuse(path, problem)
    if not state.get("preprocessing"):
        return
    try:
        problem = Preprocessing.from_dict(state["preprocessing"]).problem()
    except (TypeError, KeyError, ValueError) as error:
        raise _refuse(path, f"preprocessing is not one this project writes ({type(error).__name__}: {error})") from None
    if problem:
        raise _refuse(path, f"preprocessing.{problem}")


def check_weights(weights: dict, key: str, path: str | os.PathLike) -> None:
    """Names to tensors, every floating-point one finite (NaN weights predict NaN without a word)."""
    for name, value in weights.items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            raise _refuse(path, f"{key} holds {name!r}: {type(value).__name__}, not a named tensor")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise _refuse(path, f"{key}.{name} holds NaN or infinite values")


def _check_class_counts(counts: list | None, num_classes: int, path: str | os.PathLike) -> None:
    """Where recorded, one whole number of images per class, none below 0 (the loss's class weights come from them)."""
    if counts is not None and (len(counts) != num_classes or not all(_is(n, int) and n >= 0 for n in counts)):
        raise _refuse(path, f"class_counts is {counts!r:.80}; expected one count of images per class ({num_classes}), "
                            "none below 0")


def check_shapes(state: dict[str, Any], build_on_meta: Callable[[], nn.Module], path: str | os.PathLike) -> None:
    """Every weight fits the model the checkpoint names, built on the meta device (no memory) to compare shapes."""
    # The head first, one row per class name: before any model of that many classes is built (even on meta)
    head, count = state["model"].get(HEAD_WEIGHT), len(state["class_names"])
    if head is not None and (head.dim() != 2 or head.shape[0] != count):
        raise _refuse(path, f"model.{HEAD_WEIGHT} is {tuple(head.shape)}, but class_names names {count} classes "
                            f"(a head of ({count}, {head.shape[-1]}))")
    backbone = state["config"]["backbone"]
    if backbones.is_import_path(backbone):  # your own module: checked as it is built for use, never on meta
        return
    try:
        backbones.resolve_backbone(backbone)
        backbones.check_image_size(backbone, state["image_size"])
        model = build_on_meta()
    except UserError as error:  # a backbone this installation does not know, or an input size it cannot take
        raise _refuse(path, f"config.backbone: {cli_line(error)}") from None
    except Exception as error:  # the builder's own asserts for arguments it cannot take
        raise _refuse(path, f"config.backbone {backbone!r} cannot be built at image_size {state['image_size']} "
                            f"({type(error).__name__}: {cli_line(error)})") from None
    problem = state_dict_mismatch(model, state["model"])
    if problem:
        raise _refuse(path, f"model does not fit config.backbone {state['config']['backbone']!r}: {problem}")
