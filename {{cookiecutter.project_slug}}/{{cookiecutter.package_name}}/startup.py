"""From train.py's command line to a run that can start: every setting decided once, before anything is built.

`settle(typed, plugins)` is the one place the configuration is settled: the flags and a --config file
(settings.parse, before torch loads, then settings.finish), the device (config.configure_device), the processes
training together (one, or a plugin's), then, against that device and those processes, a resumed run's own
settings from its checkpoint, the parallel mode and precision, the run folder, the pretrained weights and the
thread count. What it returns is what
every later step reads; nothing downstream re-derives a default.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import torch

from . import config, devkit, model, outputs, settings
from .devkit import atomic, precision
from .errors import ConfigError
from .processes import Processes
from .training import run_folder, run_state, wrapping


@dataclasses.dataclass
class Start:
    """A settled run, ready to build: its config, device, processes, folder plan and the notes to print."""

    cfg: config.TrainConfig
    device: torch.device
    processes: Processes
    plan: run_folder.Plan
    notes: list[str]
    verbose: bool = False
    debug_devices: bool = False
    checkpoint: dict | None = None  # what --resume (or --init-from) names, read and checked once, here


def settle(typed: settings.Settled, plugins: list) -> Start:
    """Every setting of the run, checked: ConfigError (exit 2) for what cannot work, before anything is written.

    The processes it starts (a plugin's process group) are the caller's to close (`Start.processes.close()`).
    """
    typed = settings.finish(typed, plugins)  # the flags were parsed and checked before torch loaded (parse)
    device = config.compute_device(typed.cfg.device)
    settled, notes, state = on_device(typed, device, plugins)
    cfg = settled.cfg
    processes = next(filter(None, (plugin.processes(cfg, device) for plugin in plugins)), None) or Processes()
    try:
        plan = processes.decide(lambda: run_folder.plan(cfg.out, cfg.resume, cfg.overwrite))
        run_folder.check_outside_data(plan.out, cfg.data)
        if plan.resume:  # the main process's checkpoint in every process, also where it cannot read that file
            source, sent = processes.checkpoint(plan.resume)
            if source != plan.resume:  # this process settled without it: again, from the copy it was sent
                copy = dataclasses.replace(typed, cfg=dataclasses.replace(typed.cfg, resume=source))
                settled, notes, state = on_device(copy, device, plugins)
                cfg = settled.cfg
            plan, notes = dataclasses.replace(plan, resume=source), [*notes, sent]
        pretrained, weights_note = model.resolve_pretrained(  # a resumed run or --init-from brings its own weights
            cfg.backbone, (cfg.pretrained or cfg.pretrained_file is not None) and not (plan.resume or cfg.init_from),
            "pretrained" in settled.explicit, cfg.pretrained_file)
    except BaseException:
        processes.close()
        raise
    cfg = dataclasses.replace(cfg, out=str(plan.out), resume=plan.resume, pretrained=pretrained,
                              threads=cfg.threads or config.default_threads())  # a resumed run keeps its own count
    notes = [note for note in (*notes, plan.note, weights_note) if note]
    return Start(cfg, device, processes, plan, notes, typed.verbose, typed.debug_devices, state)


def on_device(typed: settings.Settled, device: torch.device, plugins: list
              ) -> tuple[settings.Settled, list[str], dict | None]:
    """The run's settings on this device, with notes and the checkpoint resumed: a resumed run's own (`resumed`);
    what plugins bring must run here; --parallel and --precision: explicit values must run here, defaults may fall
    back."""
    settled, notes, state = resumed(typed, plugins)
    cfg, explicit = settled.cfg, settled.explicit
    for field in ("logger", "decode"):  # a value a plugin brought must be able to run here
        settings.check_available(plugins, field, getattr(cfg, field), device)
    parallel, parallel_note = wrapping.resolve_parallel(cfg.parallel if "parallel" in explicit else None,
                                                        cfg.parallel, device, plugins)
    wrapping.check_combination(parallel, cfg.compile)  # before anything is built or written
    precision_name, precision_note = precision.resolve_precision(
        cfg.precision if "precision" in explicit else None, cfg.precision, device)
    cfg = dataclasses.replace(cfg, parallel=parallel, precision=precision_name)
    return dataclasses.replace(settled, cfg=cfg), [*notes, parallel_note, precision_note], state


def resumed(typed: settings.Settled, plugins: list) -> tuple[settings.Settled, list[str], dict | None]:
    """With --resume: the settings of the run it continues (its checkpoint's config), with notes; and the checkpoint
    the run starts from (--resume's, else --init-from's), read and checked once, here: the run is built from it."""
    cfg = typed.cfg
    source = run_folder.resume_source(cfg.out, cfg.resume)
    trusted = config.trusted_imports(cfg.backbone, cfg.data, *cfg.allow_import)  # typed, or from a checked file
    if source is None:  # a new run: from --init-from's weights (and their preprocessing) where given
        start = run_state.read(cfg.init_from, trusted=trusted, config_class=type(cfg)) if cfg.init_from else None
        return typed, [], start
    if os.environ.get("RANK", "0") != "0" and not checkpoint_file(source).is_file():
        return typed, [], None  # not on this node: settled again from the main process's copy
    # The run goes on reading the data its checkpoint names, unless --data is typed: its import path is trusted too
    imports = ("backbone",) if "data" in typed.explicit else ("backbone", "data")
    state = run_state.read(source, trusted=trusted, config_class=type(cfg), imports=imports)
    return (*own_settings(typed, state["config"], source, state["image_size"], plugins), state)


def checkpoint_file(path: str) -> Path:
    """The file a --resume path means: itself, or a run folder's last.pt."""
    return Path(path) / "last.pt" if Path(path).is_dir() else Path(path)


def prepare_out(run, out: Path, plan: run_folder.Plan) -> None:
    """config.json, runs/latest, and the state --resume starts from; by the main process only."""
    cfg = run.cfg
    if not run.processes.is_main():
        return
    out.mkdir(parents=True, exist_ok=True)
    atomic.remove_partial_writes(out)  # what a kill mid-write left behind
    if cfg.overwrite:
        run_folder.clear_run_files(out)
    if plan.link_latest:
        note = run_folder.link_latest(out)
        if note:
            print(note, file=sys.stderr)
    outputs.write_json(out / "config.json", {**cfg.to_dict(), "resolved_device": str(run.device),
                                             "device_identity": devkit.device_identity(run.device),  # which card
                                             "image_size": run.image_size, "class_names": run.class_names,
                                             "preprocessing": run.preprocessing.to_dict(),
                                             "split": run.split,  # the --val-split record (data/splits.py)
                                             "machine": run.machine(),  # workers, threads, decode, tf32, ...
                                             "environment": outputs.run_environment()})  # to rerun it
    if plan.resume and run.rows:  # as the checkpoint holds them: a save stopped before metrics.csv left it behind
        outputs.write_metrics(out / "metrics.csv", run.rows)
    if not plan.resume:  # epoch 0: even a run killed in its first epoch can be resumed
        run_state.save(out / "last.pt", run.state(0))


def own_settings(settled: settings.Settled, saved: dict, source: str, trained_image_size: int | None = None,
                 plugins: list = ()) -> tuple[settings.Settled, list[str]]:
    """The settings of the run `source` continues: the checkpoint's `saved` config, with the flags that may change.

    A typed flag that would change the run's meaning (settings.MAY_CHANGE_ON_RESUME lists the others) raises
    ConfigError naming it, unless its value is the run's own. Returns the notes to print.
    """
    if "init_from" in settled.explicit:
        raise ConfigError("--init-from starts a new run from a checkpoint's weights; it cannot be combined "
                          "with --resume, which continues one")
    fields = {field.name for field in dataclasses.fields(settled.cfg)}  # the plugins' settings too
    own = {name: value for name, value in saved.items() if name in fields}
    notes = []
    for name in sorted(settled.explicit & fields):
        typed = getattr(settled.cfg, name)
        was = trained_image_size if name == "image_size" and own.get(name) is None else own.get(name, typed)
        if typed == was or name in ("out", "resume", "overwrite", "resplit"):
            continue
        flag = f"--{name.replace('_', '-')}"
        if name not in settings.MAY_CHANGE_ON_RESUME:
            raise ConfigError(f"{flag} {typed} would change the run {source} continues (it has {was}); leave it "
                              f"out to resume, or start a new run from its weights with --init-from {source}")
        notes.append(f"resume: {flag} {typed} (the run had {was})")
    # Typed flags win; how and where this process runs is its own: the device spec, the run folder, what to
    # continue from, which imports it trusts.
    mine = settled.explicit & fields | {"device", "out", "resume", "overwrite", "resplit", "allow_import"}
    chosen = {**own, **{name: getattr(settled.cfg, name) for name in mine}}
    if "threads" not in settled.explicit and not 1 <= (chosen.get("threads") or 1) <= config.usable_cores():
        notes.append(f"resume: the default thread count, the run's {chosen['threads']} being more than this "
                     "machine's cores (CPU sums then differ from an unbroken run's in their last bits)")
        chosen["threads"] = None
    cfg = dataclasses.replace(settled.cfg, **chosen)
    settings.check(cfg, plugins)
    return dataclasses.replace(settled, cfg=cfg), notes
