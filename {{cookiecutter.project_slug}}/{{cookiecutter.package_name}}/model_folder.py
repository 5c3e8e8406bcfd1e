"""A trained model as the folder people share (the Hugging Face layout): its weights, its settings, a model card.

    python export.py runs/latest/best.pt --format safetensors --out my-classifier

    model.safetensors  the weights only: safetensors holds named tensors and nothing else (no pickle, no code)
    config.json        the classes, backbone, input size and preprocessing, and how torchvision alone rebuilds it
    README.md          the model card: what it classifies, the data's class counts, the validation figures, the
                       command and versions that made it, and loading it in five lines without this project

predict.py, evaluate.py and export.py take the folder wherever they take a checkpoint (`read` turns it into the
checkpoint layout run_state checks); its backbone, if an import path, is imported only when the user names it.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from torchvision import models

from . import files
from .backbones import builder_kwargs, find_classifier, is_import_path, resolve_backbone
from .backbones_timm import is_timm_name
from .devkit.atomic import DiskFullError, atomic_write
from .devkit.placement import building_on
from .model_files import ExportError, require
from .training import run_state

WEIGHTS, SETTINGS, CARD = "model.safetensors", "config.json", "README.md"
FORMAT = "image-classifier safetensors folder, version 1"  # config.json's "format": what reads it back
NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}  # a full disk, or a full quota
WEIGHTS_LIMIT = 32 * files.GiB  # far beyond any classifier (ViT-H/14: 2.5 GB), still a bound


def is_model_folder(path: str | Path) -> bool:
    """Whether `path` is a folder holding model.safetensors (as opposed to a run folder or a file); whatever that
    entry is (a FIFO, a link), `read` says what is wrong with it."""
    return Path(path).is_dir() and os.path.lexists(Path(path) / WEIGHTS)


def torchvision_recipe(name: str, image_size: int) -> dict[str, Any] | None:
    """How torchvision alone rebuilds the model: the builder's arguments, and where the project's `head.*` goes
    (the classifier's own name: fc, classifier.1, heads.head, ...); every other key loses its `backbone.`.
    None where torchvision's classifier is no last Linear layer (SqueezeNet's convolution is followed by a ReLU
    and pooling, so the project's head computes something else there)."""
    kwargs = builder_kwargs(resolve_backbone(name), image_size, pretrained=True)
    with building_on(torch.device("meta")):
        built = models.get_model(name, weights=None, **kwargs)
    classifier, layer = find_classifier(built)
    if not isinstance(layer, torch.nn.Linear):
        return None
    return {"kwargs": kwargs, "keys": {f"head.{part}": f"{classifier}.{part}" for part in ("weight", "bias")}}


def timm_recipe(name: str, image_size: int) -> dict[str, Any] | None:
    """How timm alone rebuilds the model: create_model's arguments and where `head.*` goes (None for a model with
    two classifiers, like the distilled ones)."""
    spec = resolve_backbone(name)
    classifier = spec.cfg.get("classifier")
    if not isinstance(classifier, str):
        return None
    kwargs = {"img_size": image_size} if spec.cfg.get("fixed_input_size") else {}
    return {"model": spec.model_name, "kwargs": kwargs,
            "keys": {f"head.{part}": f"{classifier}.{part}" for part in ("weight", "bias")}}


def run_environment(checkpoint: str | Path) -> dict[str, Any]:
    """The command and versions in the run's config.json beside `checkpoint` (the card's "Made with"): {} where there
    is none (a checkpoint copied out of its run), ExportError where that file is no run's config.json."""
    checkpoint = Path(checkpoint)
    record = (checkpoint if checkpoint.is_dir() else checkpoint.parent) / "config.json"
    try:
        values = json.loads(files.read_text(record, files.JSON_LIMIT, within=record.parent))
    except FileNotFoundError:
        return {}
    except files.FileRefused:  # a FIFO, a device, a link out of the run folder, a huge file: one line, exit 2
        raise
    except (OSError, ValueError, RecursionError) as error:
        raise ExportError(f"{record} is not readable as JSON ({type(error).__name__})") from None
    environment = values.get("environment", {}) if isinstance(values, dict) else None
    command = environment.get("command", []) if isinstance(environment, dict) else None
    if not isinstance(command, list) or not all(isinstance(part, str) for part in command):
        raise ExportError(f"{record} is not the config.json train.py writes (an object with the run's environment)")
    return {**environment, "command": [shareable_argument(part, record.parent) for part in command]}


def shareable_argument(argument: str, run: Path) -> str:
    """A recorded command's argument as a card meant for publishing shows it: a relative path as given, an absolute
    one inside the run relative to the run, any other absolute path (a home folder, a user name) hidden."""
    flag, equals, value = argument.partition("=") if argument.startswith("-") else ("", "", argument)
    if not (os.path.isabs(value) or value.startswith("~")):
        return argument
    try:
        shown = Path(os.path.abspath(value)).relative_to(Path(os.path.abspath(run))).as_posix()
    except ValueError:
        shown = "<an absolute path>"
    return f"{flag}{equals}{shown}"


def code_span(text: Any, in_table: bool = False) -> str:
    """`text` as a Markdown code span: shown as written, never markup, HTML, a heading or a new line."""
    text = "".join(char if char.isprintable() else char.encode("unicode_escape").decode() for char in str(text))
    if in_table:
        text = text.replace("|", "\\|")  # GitHub's tables split cells at | even inside a code span
    fence = "`" * (1 + max((len(run) for run in re.findall("`+", text)), default=0))
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def write(state: dict[str, Any], metadata: dict[str, Any], environment: dict[str, Any], out: str | Path) -> Path:
    """The folder `out` (new, or empty): the weights, config.json (with torchvision's recipe for a torchvision
    backbone) and card, written whole or not at all; a full disk is a DiskFullError naming `out`."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"--out {out} already exists and is not an empty folder; name a new folder")
    backbone = state["config"]["backbone"]
    timm = {"timm": timm_recipe(backbone, metadata["image_size"])} if is_timm_name(backbone) else {}
    own = is_import_path(backbone) or timm
    recipe = None if own else torchvision_recipe(backbone, metadata["image_size"])
    values = {"format": FORMAT, **metadata, "torchvision": recipe, **timm,
              "class_counts": state.get("class_counts"), "epoch": int(state.get("epoch", 0))}
    weights = require("safetensors.torch", "--format safetensors").save(
        {key: tensor.contiguous() for key, tensor in state["model"].items()})
    remove_stale_scratch(out)
    scratch = out.parent / f".{out.name}.{os.getpid()}.partial"
    try:
        scratch.mkdir(parents=True)
        # through atomic_write, as every file is: fsynced, and a full disk an OSError (safetensors' own
        # save_file would report it as its SafetensorError)
        atomic_write(scratch / WEIGHTS, weights)
        atomic_write(scratch / SETTINGS, json.dumps(values, indent=2) + "\n")
        atomic_write(scratch / CARD, card(values, state, environment))
        if out.exists():
            out.rmdir()
        scratch.rename(out)  # the folder appears whole: a kill before this leaves only the scratch folder
    except BaseException as error:  # a crash, Ctrl-C, SIGTERM (export.py makes it SystemExit): no model-sized leftover
        shutil.rmtree(scratch, ignore_errors=True)
        # a file, the scratch folder or its name: the user knows the folder, not those
        if isinstance(error, OSError) and error.errno in NO_SPACE:
            raise DiskFullError(f"no space left on device: cannot write {out}") from None
        raise
    return out


def remove_stale_scratch(out: Path) -> None:
    """Remove the scratch folders of exports to `out` that were killed (SIGKILL, a lost machine) before they ended."""
    for scratch in out.parent.glob(f".{glob.escape(out.name)}.*.partial"):
        pid = scratch.name[len(out.name) + 2:-len(".partial")]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(scratch, ignore_errors=True)


def process_alive(pid: int) -> bool:
    """Whether a process `pid` runs on this machine (one of another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def read_any(path: str | Path, *, trusted: frozenset[str] = frozenset(),
             imports: tuple[str, ...] = ("backbone",)) -> dict[str, Any]:
    """A training checkpoint (a file, or a run folder's last.pt) or a model folder, checked alike (run_state.check);
    `trusted`: the import paths the settings in `imports` may name (run_state.read)."""
    if not is_model_folder(path):
        return run_state.read(path, trusted=trusted, imports=imports)
    return run_state.check(read(path), path, trusted=trusted, imports=imports)


def read(folder: str | Path) -> dict[str, Any]:
    """The folder as a checkpoint's layout (model, config, class_names, image_size, preprocessing), unchecked:
    read_any checks it as run_state.read checks every checkpoint."""
    folder = Path(folder)
    try:
        values = json.loads(files.read_text(folder / SETTINGS, files.JSON_LIMIT, within=folder))
    except files.FileRefused:
        raise
    except (OSError, ValueError, RecursionError) as error:
        raise ExportError(f"{folder}: no readable {SETTINGS} ({type(error).__name__})") from None
    if not isinstance(values, dict) or values.get("format") != FORMAT:
        raise ExportError(f"{folder}: {SETTINGS} is not one this project's export.py writes")
    safetensors = require("safetensors.torch", "a model folder")
    data = files.read_bounded(folder / WEIGHTS, WEIGHTS_LIMIT, within=folder)
    try:  # from the bytes read: safetensors checks its header against them (a lying or truncated file)
        weights = safetensors.load(data)
    except Exception as error:  # SafetensorError (no subclass of anything ours), and kin for a damaged file
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise ExportError(f"{folder}: {WEIGHTS} is damaged or not a safetensors file ({reason})") from None
    preprocessing = {key: values.get(key) for key in ("image_size", "resize_size", "mean", "std")}
    preprocessing["interpolation"] = values.get("interpolation", "bilinear")  # older folders resized bilinearly
    return {"model": weights, "config": {"backbone": values.get("backbone")}, "class_names": values.get("class_names"),
            "image_size": values.get("image_size"), "epoch": values.get("epoch", 0),
            "preprocessing": {**preprocessing, "reason": "the model folder's", "augment": "none"}}


def card(values: dict[str, Any], state: dict[str, Any], environment: dict[str, Any]) -> str:
    """The README.md model card, every figure taken from the run."""
    names, rows = values["class_names"], state.get("metrics") or []
    row = next((r for r in reversed(rows) if r.get("epoch") == values["epoch"]), rows[-1] if rows else {})
    counts = values.get("class_counts") or [None] * len(names)
    lines = [f"# {code_span(values['backbone'])} image classifier ({len(names)} classes)", "",
             f"Classifies RGB images into {', '.join(map(code_span, names))}. Trained with torch-device-template's "
             "train.py for "
             f"{values['epoch']} epoch(s).", "", "## Training data", "", "| class | training images |", "|---|---|"]
    lines += [f"| {code_span(name, in_table=True)} | {count if isinstance(count, int) else 'not recorded'} |"
              for name, count in zip(names, counts)]
    lines += ["", f"## Validation (epoch {values['epoch']})", ""]
    lines += [f"- {key}: {row[key]:.4f}" for key in ("val_acc", "val_loss", "val_macro_f1") if key in row] or [
        "- not recorded"]
    command = " ".join(environment.get("command", ["not recorded"]))
    lines += ["", "## Made with", "", f"- command: {code_span(command)}"]
    lines += [f"- {key} {code_span(environment[key])}" for key in ("python", "torch", "torchvision")
              if key in environment]
    lines += ["", "## Preprocessing", "",
              f"Resize the shorter side to {values.get('resize_size') or values['image_size']} px "
              f"({values.get('interpolation', 'bilinear')}), centre-crop "
              f"{values['image_size']} px, scale to [0, 1], normalise with mean {values['mean']} and std "
              f"{values['std']} (torchvision.transforms.v2: Resize, CenterCrop, ToDtype(scale=True), Normalize)."]
    lines += ["", "## Load it without this project", "", *_loading(values)]
    return "\n".join(lines) + "\n"


def _loading(values: dict[str, Any]) -> list[str]:
    library = "timm" if values.get("timm") else "torchvision"
    if values.get(library) is None:
        return [f"{code_span(values['backbone'])} is not rebuilt by torchvision's builder with this head (your own "
                "module, or a classifier that is not a last Linear layer): build the backbone without its classifier, "
                "add "
                f"`head = nn.Linear(features, {len(values['class_names'])})`, and load model.safetensors into both "
                "(keys `backbone.*` and `head.*`), or use this project's predict.py."]
    builder = {"timm": 'timm.create_model(recipe["model"]',
               "torchvision": 'torchvision.models.get_model(config["backbone"]'}
    return ["```python", f"import json, {library}", "from safetensors.torch import load_file",
            f'config = json.load(open("config.json")); recipe = config["{library}"]',
            f'model = {builder[library]}, num_classes=len(config["class_names"]), **recipe["kwargs"]).eval()',
            'model.load_state_dict({recipe["keys"].get(k, k.removeprefix("backbone.")): v '
            'for k, v in load_file("model.safetensors").items()})', "```", "",
            "Then classify a photo as this project's predict.py does (the preprocessing above):", "", *PREDICT]


PREDICT = ["```python", "import torch", "from PIL import Image, ImageOps", "from torchvision.transforms import v2",
           'resize = v2.Resize(config["resize_size"] or config["image_size"], antialias=True, '
           'interpolation=v2.InterpolationMode(config.get("interpolation", "bilinear")))',
           'preprocess = v2.Compose([v2.ToImage(), resize, v2.CenterCrop(config["image_size"]), '
           'v2.ToDtype(torch.float32, scale=True), v2.Normalize(config["mean"], config["std"])])',
           'image = ImageOps.exif_transpose(Image.open("photo.jpg")).convert("RGB")',
           "with torch.no_grad():",
           "    probs = model(preprocess(image).unsqueeze(0)).softmax(dim=1)[0]  # one probability per class",
           'print(config["class_names"][int(probs.argmax())], dict(zip(config["class_names"], probs.tolist())))',
           "```"]
