"""tracker.json: which MLflow or W&B run a run folder reported to, so that a resumed run continues it.

Shared by the tracker plugins that keep a run id (the name's underscore: a helper, not a plugin itself).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..files import JSON_LIMIT, FileRefused, read_text
from ..outputs import write_json

TRACKER_FILE = "tracker.json"  # the ids of the tracker runs a run folder reported to, so a resume continues them


def _saved(folder: Path):
    """tracker.json's content; bounded, as a run folder from elsewhere may hold a FIFO or a device by that name."""
    return json.loads(read_text(folder / TRACKER_FILE, JSON_LIMIT, within=folder))


def tracker_run_id(folder: Path, kind: str) -> str | None:
    """The id of the `kind` tracker run this run folder reported to (tracker.json), if it did."""
    try:
        return _saved(folder).get(kind, {}).get("run_id")
    except (OSError, ValueError, AttributeError, FileRefused):  # absent, or not ours: start a new tracker run
        return None


def save_tracker_run_id(folder: Path, kind: str, run_id: str) -> None:
    """Record the tracker run's id in the run folder, beside any other kind's (--logger may change on resume)."""
    try:
        saved = _saved(folder)
    except (OSError, ValueError, FileRefused):  # replaced whole below: a FIFO or device by the name goes
        saved = {}
    write_json(folder / TRACKER_FILE, {**(saved if isinstance(saved, dict) else {}), kind: {"run_id": run_id}})
