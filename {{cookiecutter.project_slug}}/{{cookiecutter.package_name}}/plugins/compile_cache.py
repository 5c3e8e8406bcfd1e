"""--compile's cache beside last.pt, so a resumed or requeued run does not pay the whole compile again.

It comes with the multi_gpu=ddp answer, whose runs restart often (torchrun's elastic restarts, and the requeues of
scheduler=slurm, which needs ddp); a project without it compiles afresh on --resume, as torch does by default.

After an epoch in which this process compiled, torch's compiled artifacts (`torch.compiler.
save_cache_artifacts`, torch 2.7+) are written to the run folder with what made them: the torch and Triton
releases and the device. A resumed --compile run loads them before its first step when all three match.
A cache from another torch, Triton or device is ignored with a note (its kernels may not fit this one), and
so is a damaged file: it is never trusted blindly, and the run compiles from scratch as it would without it.

torch reads the artifacts with pickle, which runs code: a run folder copied from elsewhere must not get to.
The cache is signed (HMAC-SHA256) with a key only this user holds (`key_file()`, made on first use with the
permissions of a private file), and one whose signature does not match is never read.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sys
from pathlib import Path

from .. import devkit
from ..deferred import deferred
from ..devkit.atomic import atomic_write
from . import Plugin

torch = deferred("torch")  # used once a run compiles: train.py's flags are checked before torch loads

CACHE, KEY = "compile_cache.bin", "compile_cache.json"


def cache_key(device: torch.device) -> dict[str, str | None]:
    """What the artifacts depend on: torch, Triton (GPU kernels) and the device they were built for."""
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"torch": torch.__version__, "triton": triton_version, "device": devkit.describe_device(device)}


def key_file() -> Path:
    """This user's signing key: in $XDG_CACHE_HOME (else ~/.cache), readable by this user only."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "{{ cookiecutter.package_name }}" / "compile-cache.key"


def signature(data: bytes) -> str:
    """HMAC-SHA256 of `data` under this user's key (made now if there is none)."""
    path = key_file()
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
            handle.write(secrets.token_bytes(32))
    return hmac.new(path.read_bytes(), data, hashlib.sha256).hexdigest()


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
    if not (out / CACHE).is_file():
        return None
    try:
        record = json.loads((out / KEY).read_text(encoding="utf-8"))
        made_for, signed = record.get("made_for"), record.get("signature", "")
    except (OSError, ValueError, AttributeError):
        made_for, signed = None, ""
    if made_for != cache_key(device):
        return f"note: compile cache ignored: made for {made_for}, this run is {cache_key(device)}"
    data = (out / CACHE).read_bytes()
    if not hmac.compare_digest(str(signed), signature(data)):  # before torch unpickles anything
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
    """Write what this process compiled, and what it was compiled for."""
    saved = torch.compiler.save_cache_artifacts()
    if saved is None:
        return
    atomic_write(out / CACHE, saved[0])
    atomic_write(out / KEY, json.dumps({"made_for": cache_key(device), "signature": signature(saved[0])}))


PLUGIN = CompileCache()
