"""Flags first, then torch: every command answers --help, a mistyped or out-of-range flag, a path that is not
there and a misspelt --device before it imports torch (ARCHITECTURE.md, "Flags first, then torch").

Each case runs the command as a user does, in its own process, and reads that process's sys.modules at the end:
a command that imported torch on the way to its answer, however fast the machine, fails here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from {{ cookiecutter.package_name }} import config

PROJECT = Path(__file__).resolve().parents[1]
PACKAGE = config.PACKAGE
# Runs a script (or `-m module`) as __main__, then says on stderr's last line which heavy modules it imported
RUNNER = """
import runpy, sys
target, sys.argv = sys.argv[1], sys.argv[1:]
try:
    if target == "-m":
        sys.argv = sys.argv[1:]
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(target, run_name="__main__")
    code = 0
except SystemExit as stop:
    code = stop.code
sys.stderr.write("\\nimported: " + " ".join(name for name in ("torch", "torchvision") if name in sys.modules) + "\\n")
sys.exit(code)
"""
MISSING = "no/such/path"
THERE = "exists.pt"  # a file that is there (empty): the next check in line must refuse first

CASES = {
    "train --help": (["train.py", "--help"], 0),
    "train mistyped value": (["train.py", "--epochs", "abc"], 2),
    "train mistyped flag": (["train.py", "--epoch", "3"], 2),
    "train out of range": (["train.py", "--epochs", "0"], 2),
    "train out of range (seed)": (["train.py", "--seed", str(2**64)], 2),
    "train missing --data": (["train.py", "--data", MISSING], 2),
    "train missing --resume": (["train.py", "--resume", MISSING], 2),
    "train missing --init-from": (["train.py", "--init-from", MISSING], 2),
    "train missing --config": (["train.py", "--config", MISSING], 2),
    "train misspelt --device": (["train.py", "--device", "cuda1"], 2),
    "evaluate --help": (["evaluate.py", "--help"], 0),
    "evaluate mistyped flag": (["evaluate.py", THERE, "--split-name", "val"], 2),
    "evaluate out of range": (["evaluate.py", THERE, "--batch-size", "0"], 2),
    "evaluate missing checkpoint": (["evaluate.py", MISSING], 2),
    "evaluate missing --data": (["evaluate.py", THERE, "--data", MISSING], 2),
    "evaluate misspelt --device": (["evaluate.py", THERE, "--device", "gpu"], 2),
    "predict --help": (["predict.py", "--help"], 0),
    "predict mistyped value": (["predict.py", THERE, "x.png", "--topk", "two"], 2),
    "predict out of range": (["predict.py", THERE, "x.png", "--topk", "0"], 2),
    "predict missing checkpoint": (["predict.py", MISSING, "x.png"], 2),
    "predict misspelt --device": (["predict.py", THERE, "x.png", "--device", "cuda:01"], 2),
    "export --help": (["export.py", "--help"], 0),
    "export mistyped value": (["export.py", THERE, "--format", "onxx", "--out", "m.onnx"], 2),
    "export out of range": (["export.py", THERE, "--format", "onnx", "--out", "m.onnx", "--tolerance", "nan"], 2),
    "export missing checkpoint": (["export.py", MISSING, "--format", "onnx", "--out", "m.onnx"], 2),
    "data check --help": (["-m", f"{PACKAGE}.data", "check", "--help"], 0),
    "data check mistyped flag": (["-m", f"{PACKAGE}.data", "check", THERE, "--worker", "2"], 2),
    "data check out of range": (["-m", f"{PACKAGE}.data", "check", THERE, "--workers", "0"], 2),
    "data check missing data": (["-m", f"{PACKAGE}.data", "check", MISSING], 2),
}


def answer(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The command's answer, run as a user runs it, from `cwd` (where THERE is a file)."""
    argv = [str(PROJECT / command[0]) if command[0].endswith(".py") else command[0], *command[1:]]
    return subprocess.run([sys.executable, "-c", RUNNER, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(PROJECT)})


@pytest.mark.parametrize("case", CASES)
def test_the_answer_comes_before_torch_is_imported(case, tmp_path):
    """--help prints the usage (exit 0); bad input is one line on stderr (exit 2); neither imports torch."""
    command, code = CASES[case]
    (tmp_path / THERE).write_bytes(b"")
    result = answer(command, tmp_path)
    said = [line.rstrip() for line in result.stderr.splitlines() if line.strip()]
    assert said[-1] == "imported:", f"{case}: {said[-1]}\n{result.stderr[-2000:]}"
    assert result.returncode == code, result.stderr
    if code == 0:
        assert "usage:" in result.stdout
    else:
        assert len(said) == 2 and said[0].startswith("error: ") and "Traceback" not in result.stderr, said


def test_a_bad_backbone_is_refused_in_the_same_line_once_torch_has_loaded(tmp_path):
    """--backbone needs torch's list of models: checked after the import, one line and exit 2 all the same."""
    result = answer(["train.py", "--backbone", "resnet9", "--out", str(tmp_path / "run")], tmp_path)
    said = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and said[0].startswith("error: unknown backbone 'resnet9'"), result.stderr
    assert not (tmp_path / "run").exists()
