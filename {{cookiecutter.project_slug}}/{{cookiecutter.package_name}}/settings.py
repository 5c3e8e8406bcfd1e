"""train.py's flags, declared once and grouped, and settling them into one typed TrainConfig.

Precedence, lowest first: the project's generated defaults (TrainConfig), a `--config FILE`
(a run's config.json, read by config_file.py), then the flags on the command line. Flags are
parsed with `argparse.SUPPRESS` defaults, so the parsed namespace holds exactly the flags the
user typed: no `None` stands for "not given". `Settled.explicit` names every setting the user
chose (by flag or file); train.py uses it where an explicit request must be refused rather than
fall back (--precision, --parallel, --pretrained).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os

from . import backbones, config, hooks, plugins
from .config import usable_cores  # also settings.usable_cores: the bound --threads is checked against
from .config_file import read_config_file
from .data import DEMO_IMAGE_SIZE
from .data.transforms import AUGMENTATIONS, MAX_IMAGE_SIZE, MIN_IMAGE_SIZE
from .devkit.edge import ArgumentParser
from .devkit.precision import DTYPES
from .errors import ConfigError
from .training import optimization, progress, recipe, wrapping

# Each flag's choices in this project; the plugins of its answers add theirs (hooks.choices)
CORE_CHOICES = {"precision": tuple(DTYPES), "parallel": wrapping.MODES, "logger": ("csv", "none"),
                "progress": progress.MODES,
                "augment": tuple(AUGMENTATIONS), "decode": ("auto", "cpu"),
                "optimizer": tuple(optimization.OPTIMIZERS), "schedule": tuple(optimization.SCHEDULES)}
SEED_RANGE = (-2**63, 2**64 - 1)  # torch.manual_seed's: a 64-bit integer, signed or not
MAX_WORKERS = 128  # more DataLoader processes than any machine's cores; torch would fail on file handles instead

# --resume continues a run: its settings come from the checkpoint. These may differ in the resumed
# process (how and where it runs, how long, how it reports); any other setting typed with a value
# other than the run's own would change what is being trained, and is refused by name.
MAY_CHANGE_ON_RESUME = frozenset({
    "epochs", "workers", "device", "logger", "save_every_minutes", "max_bad_fraction", "data", "out", "resume",
    "overwrite", "cache_images", "cache_budget_mb", "compile", "channels_last", "parallel", "patience", "pretrained",
    "pretrained_file",
    "threads", "decode", "allow_import", "progress",
})


def choices(installed: list | None = None) -> dict[str, tuple[str, ...]]:
    """Every flag's choices: the core's and what the installed plugins add (default: this project's plugins)."""
    installed = plugins.load_plugins() if installed is None else installed
    return {field: hooks.choices(installed, field, core) for field, core in CORE_CHOICES.items()}


def check_available(installed: list, field: str, value: str, device) -> None:
    """Refuse (ConfigError) a value a plugin added that cannot run on `device` here (its extra not installed)."""
    owner = next((plugin for plugin in installed if value in plugin.choices().get(field, ())), None)
    reason = owner.unavailable(field, value, device) if owner is not None else None
    if reason:
        raise ConfigError(reason)


@dataclasses.dataclass(frozen=True)
class Settled:
    """The run's TrainConfig with every default filled in, which settings the user chose, and CLI-only switches."""

    cfg: config.TrainConfig
    explicit: frozenset[str]
    verbose: bool = False
    debug_devices: bool = False


def _default(name: str) -> str:
    """' (default: X)' for a TrainConfig field, for --help."""
    return f" (default: {getattr(config.TrainConfig(), name)})"


def _data_flags(p: argparse.ArgumentParser, choices: dict) -> None:
    g = p.add_argument_group("data")
    g.add_argument("--data", help="a folder with train/ and val/ of class folders; a folder of class folders "
                                  "split by --val-split; a labels .csv (path,label[,split]) or a folder holding "
                                  "labels.csv; or module:function returning your own dataset (default: built-in "
                                  "demo data)")
    g.add_argument("--val-split", type=float, metavar="F", help="--data of class folders without train/ and val/: "
                   "the fraction of each class that validates (stratified, seeded by --seed)" + _default("val_split"))
    g.add_argument("--resplit", action="store_true", help="with --resume: divide data that changed since the run "
                   "recorded its --val-split anew (validation may then hold images it trained on)")
    g.add_argument("--image-size", type=int, help=f"default: {DEMO_IMAGE_SIZE} for the demo data; the weights' crop "
                                                  "when pretrained; else the data's typical image size")
    g.add_argument("--augment", choices=choices["augment"], help="training augmentation: none; light (small "
                   "shifts, turns and zooms, no mirroring: digits, text, scans); standard (random crops and "
                   "horizontal flips: photos)" + _default("augment"))
    g.add_argument("--workers", type=int, help="DataLoader worker processes (default: the cores this process may use "
                   "per ddp rank on the node, less one; here " + f"{config.default_workers()})")
    g.add_argument("--decode", choices=choices["decode"], help="where JPEGs are decoded: cpu (in the loader "
                   "workers); device, with the gpu_decode answer (the workers read bytes, the GPU decodes, resizes, "
                   "crops and flips); auto: device where it pays (JPEG data on CUDA), else cpu" + _default("decode"))
    g.add_argument("--cache-images", action="store_true",
                   help="decode the data once into memory (uint8, resized) so small runs are compute-bound")
    g.add_argument("--cache-budget-mb", type=int, help="memory --cache-images may use" + _default("cache_budget_mb"))
    g.add_argument("--max-bad-fraction", type=float, help="unreadable images are skipped (with a warning); more "
                   "than this fraction of a split stops the run" + _default("max_bad_fraction"))


def _model_flags(p: argparse.ArgumentParser, choices: dict) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--backbone", help="a torchvision classification model name, timm/NAME for a timm model (the "
                   "[timm] extra), or your own nn.Module as package.module:ClassOrFactory (importable, e.g. on "
                   "PYTHONPATH; see backbones.py)"
                   + _default("backbone"))
    g.add_argument("--pretrained", action=argparse.BooleanOptionalAction,
                   help="start from ImageNet weights (needs a download or a cached file)" + _default("pretrained"))
    g.add_argument("--pretrained-file", metavar="FILE", help="a timm model's pretrained weights from this file "
                   "(.safetensors, or a tensors-only torch file) instead of the Hugging Face hub")
    g.add_argument("--init-from", metavar="CKPT",
                   help="start from this checkpoint's weights (a fresh head if its classes differ)")
    g.add_argument("--allow-import", action="append", metavar="PATH", help="let a checkpoint or --config file "
                   "name this import path (package.module:Name) as its backbone or data; files never choose code "
                   "to run otherwise (repeatable; config.TRUSTED_IMPORTS lists your project's own)")


def _optimisation_flags(p: argparse.ArgumentParser, choices: dict) -> None:
    g = p.add_argument_group("optimisation")
    g.add_argument("--epochs", type=int, help="epochs to train" + _default("epochs"))
    g.add_argument("--batch-size", type=int, help="images per batch (per process under ddp)" + _default("batch_size"))
    g.add_argument("--optimizer", choices=choices["optimizer"], help="adamw, or sgd (with --momentum and "
                   "--nesterov); each brings its own --lr and --weight-decay defaults" + _default("optimizer"))
    chosen = config.TrainConfig.optimizer
    g.add_argument("--lr", type=float, help="learning rate of the head" + optimization.defaults_help("lr", chosen))
    g.add_argument("--weight-decay", type=float,
                   help="weight decay" + optimization.defaults_help("weight_decay", chosen))
    g.add_argument("--momentum", type=float, help="--optimizer sgd: momentum" + _default("momentum"))
    g.add_argument("--nesterov", action="store_true", help="--optimizer sgd: Nesterov momentum")
    g.add_argument("--schedule", choices=choices["schedule"], help="learning rate per optimizer step after the "
                   "warmup: cosine to 0 at the last epoch; step: times --step-gamma every --step-epochs epochs; "
                   "constant" + _default("schedule"))
    g.add_argument("--step-epochs", type=int, metavar="N", help="--schedule step: epochs between drops"
                   + _default("step_epochs"))
    g.add_argument("--step-gamma", type=float, metavar="F", help="--schedule step: the factor at each drop"
                   + _default("step_gamma"))
    g.add_argument("--label-smoothing", type=float, help="in [0, 1)" + _default("label_smoothing"))
    g.add_argument("--seed", type=int, help="every random draw derives from it" + _default("seed"))
    g.add_argument("--accum-steps", type=int, metavar="N",
                   help="add up the gradients of N batches per optimizer step" + _default("accum_steps"))
    g.add_argument("--clip-grad", type=float, metavar="NORM", help="clip the gradients' total norm")
    g.add_argument("--warmup-epochs", type=int, metavar="N",
                   help="linear learning-rate warmup before the schedule" + _default("warmup_epochs"))
    g.add_argument("--patience", type=int, metavar="N", help="stop when val_acc has not improved for N epochs")


def _run_folder_flags(p: argparse.ArgumentParser, choices: dict) -> None:
    g = p.add_argument_group("run folder")
    g.add_argument("--out", help="run directory for checkpoints, metrics and plots (default: a new "
                                 "runs/<timestamp>, linked as runs/latest)")
    g.add_argument("--resume", help="a checkpoint file or a run directory to continue; auto: OUT/last.pt if it "
                                    "exists, else start fresh (for restarted and requeued jobs)")
    g.add_argument("--overwrite", action="store_true",
                   help="start afresh in an --out that holds another run's checkpoints, replacing them")
    g.add_argument("--save-every-minutes", type=float, help="also save a mid-epoch last.pt this often, so a kill -9 "
                   "loses at most that much (default: at epoch ends and on SIGINT/SIGTERM only)")
    g.add_argument("--config", metavar="FILE",
                   help="a run's config.json: replay its settings (flags given beside it win; --out is not taken)")
    g.add_argument("--progress", choices=choices["progress"], help="how each pass reports: auto (a bar on a terminal, "
                   "a plain line every 30 s in a log file: nohup, SLURM, > log.txt), bar, lines or none"
                   + _default("progress"))
    g.add_argument("--logger", choices=choices["logger"],
                   help="where each epoch's metrics.csv row also goes: csv (metrics.csv only; none: the same), or "
                        "the tracker the project was generated with (plugins/; pip install -e '.[NAME]')"
                        + _default("logger"))


def _device_flags(p: argparse.ArgumentParser, choices: dict) -> None:
    g = p.add_argument_group("device and precision")
    g.add_argument("--device", help=f"auto, auto:free[:MIN], cpu, cuda, cuda:N, GPU-<uuid>, mps, xpu "
                                    f"(default: ${config.DEVICE_ENV_VAR}, else {config.DEFAULT_DEVICE})")
    g.add_argument("--precision", choices=choices["precision"],
                   help="autocast dtype; fp16 adds a GradScaler on CUDA" + _default("precision"))
    g.add_argument("--parallel", choices=choices["parallel"], help="dp: DataParallel over the visible GPUs; ddp (a "
                   "project generated with multi_gpu=ddp): one process per device under torchrun"
                   + _default("parallel"))
    g.add_argument("--channels-last", action=argparse.BooleanOptionalAction,
                   help="NHWC memory format for the model and its inputs (faster convolutions on tensor cores; "
                        "default: on when autocasting (fp16, bf16) on CUDA)")
    g.add_argument("--compile", action="store_true", help="torch.compile the model")
    g.add_argument("--threads", type=int, metavar="N", help="CPU threads for torch's own operations; more pays "
                   "only on a machine with N idle cores (default: OMP_NUM_THREADS if set, else this rank's share of "
                   "the cores idle now; a resumed run keeps its own)")
    g.add_argument("--verbose", action="store_true", help="print the model's device report, and tracebacks on failure")
    g.add_argument("--debug-devices", action="store_true",
                   help="guard every submodule: a misplaced input names the submodule and both devices")


def get_args_parser(installed: list | None = None) -> argparse.ArgumentParser:
    """train.py's flags in groups, with the choices `installed` plugins add (default: this project's); a flag not
    typed is absent from the parsed namespace (SUPPRESS)."""
    installed = plugins.load_plugins() if installed is None else installed
    p = ArgumentParser(description="Train the image classifier.", argument_default=argparse.SUPPRESS)
    chosen = choices(installed)
    for add in (_data_flags, _model_flags, _optimisation_flags, _run_folder_flags, _device_flags):
        add(p, chosen)
    for plugin in installed:  # the flags of the plugins' own settings (Plugin.settings)
        plugin.flags(p)
    return p


def check(cfg: config.TrainConfig, installed: list = ()) -> None:
    """Refuse values that cannot work (ConfigError), before anything is built or written; `installed` plugins check
    their own settings."""
    for name in ("data", "out", "resume", "init_from"):  # '' would mean the current folder: a typo, not a plan
        if getattr(cfg, name) is not None and not str(getattr(cfg, name)).strip():
            raise ConfigError(f"--{name.replace('_', '-')} is empty; name a path, or leave the flag out")
    for field in dataclasses.fields(cfg):  # the plugins' settings too
        value = getattr(cfg, field.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"--{field.name.replace('_', '-')} must be a finite number, got {value}")
    cores, (lowest, highest) = usable_cores(), SEED_RANGE
    limits = {  # each number's allowed values (None, where a setting may be unset, is not checked), and in words
        "epochs": (lambda n: n >= 1, "at least 1"),
        "batch_size": (lambda n: n >= 1, "at least 1"),
        "workers": (lambda n: 0 <= n <= MAX_WORKERS, f"between 0 and {MAX_WORKERS}"),
        "image_size": (lambda n: MIN_IMAGE_SIZE <= n <= MAX_IMAGE_SIZE,
                       f"between {MIN_IMAGE_SIZE} and {MAX_IMAGE_SIZE}"),
        # more threads than cores only contend; thousands exhaust the host's threads and crash OpenMP
        "threads": (lambda n: 1 <= n <= cores, f"between 1 and {cores} (the cores this process may use)"),
        "seed": (lambda n: lowest <= n <= highest, f"between {lowest} and {highest} (what torch.manual_seed takes)"),
        "lr": (lambda x: x > 0, "greater than 0"),
        "weight_decay": (lambda x: x >= 0, "at least 0"),
        "label_smoothing": (lambda x: 0 <= x < 1, "in [0, 1)"),
        "save_every_minutes": (lambda x: x >= 0, "at least 0"),
        "max_bad_fraction": (lambda x: 0 <= x < 1, "in [0, 1)"),
    }
    for name, (allowed, words) in limits.items():
        if getattr(cfg, name) is not None and not allowed(getattr(cfg, name)):
            raise ConfigError(f"--{name.replace('_', '-')} must be {words}, got {getattr(cfg, name)}")
    backbones.resolve_backbone(cfg.backbone)
    if cfg.pretrained_file is not None and not (backbones.backbones_timm.is_timm_name(cfg.backbone)
                                                and os.path.isfile(cfg.pretrained_file)):
        raise ConfigError(f"--pretrained-file {cfg.pretrained_file}: name a weights file, for a timm/NAME backbone")
    if cfg.image_size:
        backbones.check_image_size(cfg.backbone, cfg.image_size)
    for problem in [*recipe.check_config(cfg), *(line for plugin in installed for line in plugin.problems(cfg))]:
        raise ConfigError(problem)


def settle(argv: list[str] | None = None, installed: list | None = None) -> Settled:
    """Flags, a --config file and the generated defaults, as one checked TrainConfig (ConfigError if bad)."""
    installed = plugins.load_plugins() if installed is None else installed
    given = vars(get_args_parser(installed).parse_args(argv))
    switches = {name: given.pop(name, False) for name in ("verbose", "debug_devices")}
    trusted = config.trusted_imports(given.get("backbone"), given.get("data"), *given.get("allow_import", []))
    config_class = config.config_class(installed)
    from_file = read_config_file(given.pop("config"), choices(installed), trusted=trusted,
                                 config_class=config_class) if "config" in given else {}
    chosen = {**from_file, **given}
    chosen["device"] = config.device_spec(chosen.get("device"))  # the flag, else the environment, else the default
    cfg = dataclasses.replace(config_class(), **{**optimizer_defaults(chosen), **chosen})
    check(cfg, installed)
    _check_applies(cfg, frozenset(given))  # typed flags: a config file records every field
    return Settled(cfg, frozenset(from_file) | frozenset(given), **switches)


def optimizer_defaults(chosen: dict) -> dict:
    """The chosen --optimizer's own lr and weight decay (the TrainConfig defaults are AdamW's)."""
    choice = optimization.OPTIMIZERS.get(chosen.get("optimizer", config.TrainConfig.optimizer))
    return {} if choice is None else {"lr": choice.lr, "weight_decay": choice.weight_decay}


def _check_applies(cfg: config.TrainConfig, explicit: frozenset[str]) -> None:
    """Refuse a flag given for an optimizer or schedule the run does not use (it would do nothing)."""
    for names, field, wanted in ((("momentum", "nesterov"), "optimizer", "sgd"),
                                 (("step_epochs", "step_gamma"), "schedule", "step")):
        for name in sorted(explicit & set(names)):
            if getattr(cfg, field) != wanted:
                raise ConfigError(f"--{name.replace('_', '-')} applies to --{field} {wanted}, not "
                                  f"{getattr(cfg, field)}")
