"""A run's config.json read back as settings, so `train.py --config runs/exp1/config.json` replays the run.

config.json holds every TrainConfig field plus a record of the run: `resolved_device`,
`device_identity`, `class_names`, `preprocessing`, `machine` (workers, decode, TF32, channels_last as in
force) and `environment` (library versions, the command line), and `image_size` as
resolved, which replays as an explicit size. The record is read past; a replay chooses its own
place: `out` and `resume` (where the run was written, what it continued from) are not taken
from the file, so a replay never writes into, or continues, the run it copies. Nor is `allow_import`:
a file cannot vouch for itself. An import path in `backbone` or `data` is refused unless the command
line names it too (config.check_imports): a downloaded config.json never chooses code to run.

Every other key must be a TrainConfig field holding a value of the field's type (and one of the
flag's choices, where the flag has some); anything else is a ConfigError (one line, exit 2).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import files
from .config import check_imports, type_name, value_fits
from .errors import ConfigError

# written by train.py as a record of the run, not settings
RECORD_KEYS = frozenset({"resolved_device", "device_identity", "class_names", "preprocessing", "environment",
                         "machine", "split"})
# where a run wrote, what it continued, which code it was allowed to import: each replay's own command line says
PLACE_KEYS = frozenset({"out", "resume", "allow_import"})
MAX_BYTES = 1 << 20  # a config.json is a few KB; a bigger file is not one
MAX_DEPTH = 8  # settings are scalars or short lists, the record a few levels more: deeper is no config.json


def _depth(value: Any) -> int:
    """How many objects and lists nest in `value` (1: a flat object)."""
    if not isinstance(value, (dict, list)):
        return 0
    return 1 + max(map(_depth, value.values() if isinstance(value, dict) else value), default=0)


def read_config_file(path: str | Path, choices: Mapping[str, Sequence[str]], *, trusted: frozenset[str],
                     config_class: type) -> dict[str, Any]:
    """The values a config.json sets (record and place keys dropped), each checked against its field of
    `config_class` (TrainConfig, with the plugins' settings: config.config_class).

    An import path the file names must be in `trusted` (the command line's own): else ConfigError.
    """
    too_deep = f"--config {path}: nested more than {MAX_DEPTH} levels deep; a config.json is one object of settings"
    try:
        values = json.loads(files.read_text(path, MAX_BYTES))  # a FIFO or /dev/zero: refused, not read
        if _depth(values) > MAX_DEPTH:
            raise ConfigError(too_deep)
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file") from None
    except RecursionError:  # json's decoder and _depth recurse once per level: '[[[[...' thousands deep
        raise ConfigError(too_deep) from None
    except files.FileRefused as error:
        raise ConfigError(f"--config {error}") from None
    except (OSError, json.JSONDecodeError) as error:
        raise ConfigError(f"--config {path}: not a readable JSON file ({error})") from None
    if not isinstance(values, dict):
        raise ConfigError(f"--config {path}: expected a JSON object of settings, got {type(values).__name__}")
    hints = typing.get_type_hints(config_class)
    fields = {field.name for field in dataclasses.fields(config_class)}
    unknown = sorted(set(values) - fields - RECORD_KEYS)
    if unknown:
        raise ConfigError(f"--config {path}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(fields))}")
    settings = {}
    for key in sorted(fields & set(values) - PLACE_KEYS):
        value, allowed = values[key], choices.get(key)
        if value is None and not value_fits(None, hints[key]):
            continue  # null for a setting that always has a value: the project default (older config.json files)
        if not value_fits(value, hints[key]) or (allowed and value is not None and value not in allowed):
            expected = f"one of {', '.join(map(str, allowed))}" if allowed else type_name(hints[key])
            raise ConfigError(f"--config {path}: bad value for {key}: {json.dumps(value)} (expected {expected})")
        settings[key] = float(value) if hints[key] is float else value
    check_imports(settings, trusted, f"--config {path}")
    return settings
