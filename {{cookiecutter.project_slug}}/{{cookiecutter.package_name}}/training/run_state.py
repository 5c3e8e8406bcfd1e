"""This project's training checkpoints: what one holds, writing it, reading it back, and the model in it.

The one place that knows the keys. A training checkpoint is a plain dict (see checkpoint.py for
the portable, atomic, weights_only file format underneath):

    model         the plain model's state_dict (no wrapper prefixes), CPU tensors
    optimizer     optimizer.state_dict(), CPU tensors
    scheduler     scheduler.state_dict()
    scaler        GradScaler.state_dict() (empty when disabled)
    epoch         the epoch it belongs to: the last completed one when `step` is 0 (0: before the first step)
    step          optimizer steps done in `epoch`; 0 for an epoch-end checkpoint. A mid-epoch one (written
                  on SIGINT/SIGTERM or every --save-every-minutes) continues at step `step` + 1
    epoch_totals  mid-epoch only: the epoch's running loss sum, correct count, images and seconds so far
                  (summed over ranks), so the resumed epoch's metrics row covers the whole epoch
    unreadable    {"train": [paths], "val": [paths]}: images found unreadable so far (datacheck.py)
    best_val_acc  the best validation accuracy so far
    config        the run's TrainConfig as a dict
    class_names   the label of each logit, in order
    class_counts  training images per class (the class weights of the loss, task.build_loss; the model card's figures)
    image_size    the side of the square images the model was trained on
    rng           the global RNG states (seeding.rng_state)
    metrics       metrics.csv's rows up to `epoch`, so a resumed run rewrites the same file
    version       the package version that wrote it
    preprocessing the input size, evaluation resize, mean and std, and why (data.Preprocessing.to_dict)
    weights       which weights `model` holds: "model", or in a best.pt other weights a plugin validated better ("ema")
    plugins       what each plugin keeps (Plugin.state_dict), by name, where it keeps anything: the EMA's weights
    layout        how the run cut its epochs (Processes.layout): world_size, batch_size (per rank), accum_steps,
                  global_batch, steps_per_epoch, sharded; a resume under another world size finds its sample

train.py builds it with `training_state`, writes it with `save`; train.py, evaluate.py and
predict.py read it with `read`, which checks every value first (state_check.py). The run's loss is rebuilt from
it with `loss_from_state` (task.py's, as training built it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from .. import __version__, task
from ..config import TrainConfig, check_imports
from ..data.transforms import Preprocessing
from ..devkit import checkpoint
from ..errors import one_line
from ..model import Classifier, build_model
from ..outputs import read_metrics
from . import optimization, run_folder, seeding, state_check


def training_state(run, epoch: int, *, step: int = 0, epoch_totals: dict | None = None,
                   weights: str = "model") -> dict[str, Any]:
    """A checkpoint of `run` (a training.run.Run) after `step` steps of `epoch` (0: after the whole epoch): CPU
    copies and plain values. `weights`: another name a plugin validated ("ema") puts those weights under `model`
    (a best.pt where they validated better)."""
    own = {plugin.name: plugin.state_dict() for plugin in run.plugins}
    others = (found for plugin in run.plugins if (found := plugin.weights(weights)) is not None)  # Plugin.weights
    return {
        "model": checkpoint.model_state(run.model) if weights == "model" else next(others),
        "weights": weights,
        "plugins": {name: state for name, state in own.items() if state},
        "preprocessing": run.preprocessing.to_dict(),
        "optimizer": checkpoint.to_cpu(run.optimizer.state_dict()),
        "scheduler": run.scheduler.state_dict(),
        "scaler": run.hw.scaler.state_dict(),
        "epoch": epoch,
        "step": step,
        "epoch_totals": dict(epoch_totals or {}),
        "unreadable": run.unreadable.state(),
        "split": dict(run.split or {}),  # how train and val were chosen (data/splits.py): resume and evaluate check
        "best_val_acc": run.best_acc,
        "config": run.cfg.to_dict(),
        "class_names": list(run.class_names),
        "class_counts": [int(count) for count in run.class_counts.tolist()],  # training images per class
        "image_size": run.image_size,
        "rng": seeding.rng_state(),
        "metrics": [dict(row) for row in run.rows],
        "version": __version__,
        "layout": run.layout(),
    }


def save(path: str | os.PathLike, state: dict[str, Any]) -> Path:
    """Write a training checkpoint atomically (RunFolderLost when its run folder was deleted meanwhile)."""
    run_folder.check_claimed(Path(path).parent)
    return checkpoint.save_checkpoint(path, state)


def read(path: str | os.PathLike, map_location: torch.device | str = "cpu", *, trusted: frozenset[str] = frozenset(),
         config_class: type = TrainConfig, imports: tuple[str, ...] = ("backbone",)) -> dict[str, Any]:
    """Load a training checkpoint (a file, or a run directory's last.pt) and check every value before use.

    state_check refuses (CheckpointError, naming the key) a file that is not ours, or whose values
    or weights' shapes cannot be right, before any real model is built from it. An import path under
    `imports` (its backbone; its data too where the caller opens the run's data: train.py --resume without
    --data) must be in `trusted` (config.trusted_imports; none by default), else ConfigError: the file is read
    with weights_only, and naming a module must not run code either. Its config is checked against
    `config_class`'s fields (with the plugins' settings, for train.py).
    """
    return check(checkpoint.load_checkpoint(path, map_location=map_location), path, trusted=trusted,
                 config_class=config_class, imports=imports)


def check(state: dict[str, Any], path: str | os.PathLike, *, trusted: frozenset[str] = frozenset(),
          config_class: type = TrainConfig, imports: tuple[str, ...] = ("backbone",)) -> dict[str, Any]:
    """`state`, read from `path`, once its every value is checked (`read`; a model folder's, model_folder.read_any)."""
    state_check.check_values(state, path, config_class)
    check_imports(state["config"], trusted, f"{path}: config", keys=imports)  # before the shape check builds it
    state_check.check_shapes(state, lambda: build_for(state, torch.device("meta")), path)
    return state


def build_for(state: dict[str, Any], device: torch.device) -> Classifier:
    """The Classifier a checkpoint names (backbone, classes, input size), without its weights, on `device`."""
    return build_model(state["config"]["backbone"], len(state["class_names"]), pretrained=False, device=device,
                       image_size=state["image_size"])  # ViT and MaxViT are built for the size they were trained at


def model_from_state(state: dict[str, Any], device: torch.device, source: str = "checkpoint") -> Classifier:
    """Rebuild the Classifier a checkpoint was saved from, with its weights, on `device`."""
    model = build_for(state, device)
    checkpoint.load_model_state(model, state["model"], source)
    return model


def loss_from_state(state: dict[str, Any], device: torch.device) -> torch.nn.Module:
    """The training run's loss on `device`, built by task.build_loss from what the run recorded, as training built
    it (a model folder records no class counts: unweighted)."""
    counts = state.get("class_counts") or [1] * len(state["class_names"])
    return task.build_loss(counts, state["config"].get("label_smoothing", 0.0), device)


def continue_run(state: dict[str, Any], *, run, source: str) -> None:
    """Set a freshly built run to continue where `state` stopped, after its epoch or at its step inside the epoch:
    its weights, optimizer, schedule, scaler, RNG and plugins (restore_training), and its progress."""
    epoch, step = resume_position(state)
    # Another number of processes: the same sample of the epoch in this run's steps, or a ResumeLayoutError
    run.start_step, run.resume_notes = run.processes.continue_at(state.get("layout"), step, run.layout(), source)
    run.start_epoch = epoch
    restore_training(state, run=run, source=source, steps_done=(epoch - 1) * run.steps_per_epoch + run.start_step)
    # The saved sums are every process's together: the main one alone carries them on.
    run.resumed_totals = state.get("epoch_totals") if run.start_step and run.processes.is_main() else None
    run.best_acc = state["best_val_acc"]
    run.unreadable.found.update({split: set(paths) for split, paths in state.get("unreadable", {}).items()})
    run.rows = metrics_until_epoch(state, read_metrics(Path(run.cfg.out) / "metrics.csv"))


def restore_training(state: dict[str, Any], *, run, source: str, steps_done: int = 0) -> None:
    """Load weights, optimizer, scaler, RNG and plugin states into a freshly built run; its schedule at `steps_done`.

    The checkpoint must name the classes of the run's data (CheckpointError). The scheduler keeps the schedule
    built for this run (its epochs and steps per epoch may differ from the checkpoint's, see
    optimization.restore_position) and stands at `steps_done` optimizer steps of it.
    """
    if list(state["class_names"]) != list(run.class_names):  # the run's data has other classes
        raise checkpoint.CheckpointError(
            f"{source} was trained on classes {state['class_names']}, the data has {list(run.class_names)}")
    if state.get("weights", "model") != "model":
        raise checkpoint.CheckpointError(f"{source} holds the {state['weights']} weights of a best.pt; resume from "
                                         "last.pt")
    _check_plugins(state.get("plugins", {}), run, source)
    checkpoint.load_model_state(run.model, state["model"], source)
    for plugin in run.plugins:
        plugin.load_state_dict(run, state.get("plugins", {}).get(plugin.name, {}), source)
    for key, restore in (("optimizer", run.optimizer.load_state_dict),  # moves its state to the params' device
                         ("scheduler", lambda saved: optimization.restore_position(run.scheduler, saved, steps_done)),
                         ("scaler", run.hw.scaler.load_state_dict),
                         ("rng", seeding.set_rng_state)):
        if key == "rng" and key not in state:
            continue
        try:
            restore(state[key])
        except (KeyError, TypeError, ValueError, IndexError, RuntimeError, AttributeError) as error:
            # a hand-edited or foreign file: torch's own message, in one line, under the key's name
            raise checkpoint.CheckpointError(f"{source}: {key} does not fit this run "
                                             f"({type(error).__name__}: {one_line(error)})") from None


def _check_plugins(saved: dict, run, source: str) -> None:
    """Refuse a checkpoint that a plugin this project lacks kept state in: resuming without it would change the run."""
    missing = sorted(set(saved) - {plugin.name for plugin in run.plugins})
    if missing:
        raise checkpoint.CheckpointError(f"{source} continues a run that used the {', '.join(missing)} plugin, which "
                                         "this project lacks (an answer it was not generated with); resume it where "
                                         f"plugins/{missing[0]} exists")


def preprocessing(state: dict[str, Any]) -> Preprocessing:
    """How the checkpoint's model saw its images (older files: a plain resize and crop to image_size)."""
    if state.get("preprocessing"):
        return Preprocessing.from_dict(state["preprocessing"])
    return Preprocessing(state["image_size"])


def inference_metadata(state: dict[str, Any]) -> dict[str, Any]:
    """What inference needs beside the weights (exported.Metadata's fields), as plain values."""
    prep = preprocessing(state)
    return {"class_names": list(state["class_names"]), "image_size": prep.image_size,
            "resize_size": prep.resize_size, "mean": list(prep.mean), "std": list(prep.std),
            "interpolation": prep.interpolation,
            "backbone": state["config"].get("backbone", ""), "epoch": int(state.get("epoch", 0))}


def val_split(state: dict[str, Any]) -> float | None:
    """The --val-split a run divided a folder of class folders with (None: it had train/ and val/)."""
    return state["config"].get("val_split")


def resume_position(state: dict[str, Any]) -> tuple[int, int]:
    """(epoch, steps already done in it) where a run resumed from `state` continues."""
    step = state.get("step", 0)  # older checkpoints are all epoch-end ones
    return (state["epoch"], step) if step else (state["epoch"] + 1, 0)


def metrics_until_epoch(state: dict[str, Any], fallback: list[dict]) -> list[dict]:
    """The metrics rows of the epochs the checkpoint holds whole (older files: from metrics.csv)."""
    rows = state.get("metrics") or fallback
    return [row for row in rows if row["epoch"] < resume_position(state)[0]]  # the epochs before the one it continues
