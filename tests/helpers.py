"""Helpers for the template's own tests: the choices, cached bakes, and subprocess runs.

Bakes are cheap (under a second) but the baked projects' own test runs are not, so every bake
is made once per session and shared by the tests that inspect it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[1]
CONTEXT = json.loads((TEMPLATE / "cookiecutter.json").read_text(encoding="utf-8"))

# Every list in cookiecutter.json is a choice; its first value is the default.
CHOICES: dict[str, list[str]] = {k: v for k, v in CONTEXT.items() if isinstance(v, list) and not k.startswith("_")}
DEFAULTS: dict[str, str] = {k: v[0] for k, v in CHOICES.items()}
NON_DEFAULT: list[tuple[str, str]] = [(k, v) for k, values in CHOICES.items() for v in values[1:]]
EVERY_VALUE: list[tuple[str, str]] = [(k, v) for k, values in CHOICES.items() for v in values]

# An answer that only works beside another (hooks/pre_gen_project.py refuses it alone) gets that one too.
NEEDS: dict[tuple[str, str], dict[str, str]] = {("scheduler", "slurm"): {"multi_gpu": "ddp"}}

DEFAULT_PACKAGE = "image_classifier"  # what "Image Classifier" becomes


def choice_id(pair: tuple[str, str]) -> str:
    """A readable test id such as `backbone=resnet50`."""
    return f"{pair[0]}={pair[1]}"


def subprocess_env(**extra: str) -> dict[str, str]:
    """The caller's environment minus anything that would steer a baked project's device or pytest."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith("_DEVICE") and not k.startswith("PYTEST_") and k != "PYTHONPATH"
    }
    env.update(PYTHONDONTWRITEBYTECODE="1", MPLBACKEND="Agg", PYTHONIOENCODING="utf-8")
    env.update(extra)
    return env


def run(args: list[str], cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """Run a command to completion and capture its text output; never raises on a non-zero exit."""
    return subprocess.run(
        args, cwd=cwd, env=subprocess_env(**env), capture_output=True, text=True, timeout=timeout
    )


def text_files(root: Path) -> Iterator[tuple[Path, str]]:
    """Every text file under `root` with its content; binary files (PNGs, pickles) and git's own files are skipped."""
    for path in sorted(root.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or ".git" in path.relative_to(root).parts:
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            yield path, data.decode("utf-8")
        except UnicodeDecodeError:
            continue


def describe(proc: subprocess.CompletedProcess) -> str:
    """The tail of a finished process's output, for assertion messages."""
    out = (proc.stdout or "") + (proc.stderr or "")
    return f"exit {proc.returncode}; output tail:\n{out[-3000:]}"


class Bakery:
    """Bakes the template once per distinct set of answers and hands back the cached result."""

    def __init__(self, cookies_session) -> None:
        self._cookies = cookies_session
        self._cache: dict[tuple, object] = {}

    def bake(self, **extra_context: str):
        """The pytest-cookies Result for these answers (defaults for the rest)."""
        for pair in list(extra_context.items()):
            extra_context = {**NEEDS.get(pair, {}), **extra_context}
        key = tuple(sorted(extra_context.items()))
        if key not in self._cache:
            self._cache[key] = self._cookies.bake(extra_context=extra_context, template=str(TEMPLATE))
        return self._cache[key]

    def project(self, **extra_context: str) -> Path:
        """The baked project's folder; fails the test if the bake did not succeed."""
        result = self.bake(**extra_context)
        assert result.exit_code == 0 and result.exception is None, f"bake {extra_context} failed: {result.exception!r}"
        return result.project_path


def cookiecutter_cli(tmp_path: Path, config: Path, *answers: str) -> subprocess.CompletedProcess:
    """Run `python -m cookiecutter --no-input` on the template from `tmp_path`, output to tmp_path/out."""
    args = [sys.executable, "-m", "cookiecutter", "--no-input", "--config-file", str(config),
            str(TEMPLATE), "-o", str(tmp_path / "out"), *answers]
    return run(args, cwd=tmp_path, timeout=120)


def python_digest(project: Path) -> str:
    """A hash of every .py file's path and bytes: equal digests mean identical Python code."""
    digest = hashlib.sha256()
    for path in sorted(project.rglob("*.py")):
        if "__pycache__" not in path.parts:
            digest.update(path.relative_to(project).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def same_training_state(path: Path, reference: Path) -> None:
    """Assert two checkpoints hold bit-identical model and optimizer tensors at the same epoch and step."""
    import torch  # only the run-comparing tests need it; the rest of the template suite imports no torch

    mine, theirs = (torch.load(p, map_location="cpu", weights_only=True) for p in (path, reference))
    for key in ("model", "optimizer"):
        flat, other = dict(_tensors(mine[key])), dict(_tensors(theirs[key]))
        different = [name for name, tensor in flat.items() if not torch.equal(tensor, other[name])]
        assert flat and flat.keys() == other.keys() and not different, f"{key}: {len(different)} tensors differ"
    assert (mine["epoch"], mine["step"]) == (theirs["epoch"], theirs["step"])


def _tensors(obj, prefix: str = "") -> Iterator[tuple[str, object]]:
    """Every tensor in a nested checkpoint value, named by its path of keys and indices."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _tensors(value, f"{prefix}/{key}")
    elif isinstance(obj, (list, tuple)):
        for index, value in enumerate(obj):
            yield from _tensors(value, f"{prefix}/{index}")
