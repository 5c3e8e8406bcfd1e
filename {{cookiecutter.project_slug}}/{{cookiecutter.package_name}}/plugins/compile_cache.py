"""--compile's cache beside last.pt, so a resumed or requeued run does not pay the whole compile again.

It comes with the multi_gpu=ddp answer, whose runs restart often (torchrun's elastic restarts, and the requeues of
scheduler=slurm, which needs ddp); a project without it compiles afresh on --resume, as torch does by default.

After an epoch in which this process compiled, torch's compiled artifacts (`torch.compiler.
save_cache_artifacts`, torch 2.7+) are written to the run folder with what made them: the torch and Triton
releases and the device. A resumed --compile run loads them before its first step when all three match.
A cache from another torch, Triton or device is ignored with a note (its kernels may not fit this one), and
so is a damaged file: it is never trusted blindly, and the run compiles from scratch as it would without it.

torch reads the artifacts with pickle, which runs code: a run folder copied from elsewhere must not get to.
The cache is signed (HMAC-SHA256) with a key only this user holds (signing.py, shared with export.py's .pt2),
and one whose signature does not match is never read; nor is any when the key is not this user's private
file (a new key is made, with a note). Both files are read as files from elsewhere are (files.read_bounded):
a FIFO, a device or a link out of the run folder is a note, never a hang.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from .. import devkit, files, signing
from ..deferred import deferred
from ..devkit.atomic import atomic_write
from ..errors import one_line
from . import Plugin

torch = deferred("torch")  # used once a run compiles: train.py's flags are checked before torch loads

CACHE, KEY = "compile_cache.bin", "compile_cache.json"
CACHE_LIMIT = 8 * files.GiB  # torch's artifacts for a classifier are megabytes; still a bound


def cache_key(device: torch.device) -> dict[str, str | None]:
    """What the artifacts depend on: torch, Triton (GPU kernels) and the device they were built for."""
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"torch": torch.__version__, "triton": triton_version, "device": devkit.describe_device(device)}


def supported() -> bool:
    """Whether this torch can save and load compile artifacts (torch 2.7+)."""
    return hasattr(torch.compiler, "save_cache_artifacts") and hasattr(torch.compiler, "load_cache_artifacts")


class CompileCache(Plugin):
    """Loads a matching cache on resume; saves this process's artifacts after its first compiled epoch."""

    name = "compile cache"
    optional = True  # a cache that cannot be written is a note: training goes on

    def __init__(self):
        self.saved = False

    def start(self, run, out) -> None:
        self.saved = False  # one instance serves every run of the process (train.main called again)
        if not (run.cfg.compile and run.cfg.resume and supported() and run.processes.is_main()):
            return
        note = load(Path(out), run.device)
        if note:
            print(note, file=sys.stderr, flush=True)

    def after_epoch(self, run, row: dict) -> None:
        if run.cfg.compile and supported() and run.processes.is_main() and not self.saved:
            save(Path(run.cfg.out), run.device)
            self.saved = True


def load(out: Path, device: torch.device) -> str | None:
    """Load the run folder's cache if it was made for this torch, Triton and device; the line saying what happened."""
    if not os.path.lexists(out / CACHE):
        return None
    try:
        record = json.loads(files.read_text(out / KEY, files.JSON_LIMIT, within=out))
        made_for, signed = record.get("made_for"), record.get("signature", "")
    except (OSError, ValueError, AttributeError):  # missing, refused (files.FileRefused), not JSON, not an object
        made_for, signed = None, ""
    if made_for != cache_key(device):
        return f"note: compile cache ignored: made for {made_for}, this run is {cache_key(device)}"
    try:
        data = files.read_bounded(out / CACHE, CACHE_LIMIT, within=out)
    except (OSError, files.FileRefused) as error:
        return f"note: compile cache ignored: {one_line(error)}"
    key, problem = signing.user_key()
    if problem:  # a new key: nothing the old one signed is trusted
        return f"note: compile cache ignored: {problem}"
    if not signing.matches(data, signed, key):  # before torch unpickles anything
        return f"note: compile cache ignored: {out / CACHE} was not written by this user's runs (or was changed)"
    try:
        loaded = torch.compiler.load_cache_artifacts(data)
    except Exception as error:  # torch's own errors for artifacts it cannot use, many kinds
        loaded, reason = None, type(error).__name__
    else:
        reason = "torch could not use it"
    if loaded is None:
        return f"note: compile cache ignored: {out / CACHE}: {reason}"
    return f"compile cache: loaded {out / CACHE} ({len(data) / 2**20:.1f} MiB)"


def save(out: Path, device: torch.device) -> None:
    """Write what this process compiled, what it was compiled for, and this user's signature of it."""
    saved = torch.compiler.save_cache_artifacts()
    if saved is None:
        return
    key, _ = signing.user_key()  # a key that could not be used is replaced here; load says so
    atomic_write(out / CACHE, saved[0])
    atomic_write(out / KEY, json.dumps({"made_for": cache_key(device), "signature": signing.sign(saved[0], key)}))


PLUGIN = CompileCache()
