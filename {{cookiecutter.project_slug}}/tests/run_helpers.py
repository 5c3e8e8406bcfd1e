"""Helpers for the tests that run real train.py processes and kill, signal or resume them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from conftest import HANG_S, nested_tensors
from paused_train import PAUSE_ENV_VAR

PROJECT = Path(__file__).resolve().parent.parent  # the project root: train.py and the package
PAUSED_TRAIN = "tests/paused_train.py"  # train.py with the tests' pause points (PAUSE_ENV_VAR names one)


def paused(command: list[str]) -> list[str]:
    """`command` (a train.py or torchrun command line) with train.py run through the tests' pause points."""
    return [PAUSED_TRAIN if arg == "train.py" else arg for arg in command]
EPOCHS = 3


def train_command(data: Path, out: Path, workers: int, resume: bool | str, extra: tuple[str, ...] = ()) -> list[str]:
    command = [sys.executable, "train.py", "--data", str(data), "--device", "cpu", "--epochs", str(EPOCHS),
               "--batch-size", "8", "--image-size", "32", "--workers", str(workers), "--seed", "7",
               "--no-pretrained", "--precision", "fp32", "--parallel", "none", "--out", str(out), *extra]
    if resume:
        command += ["--resume", resume if isinstance(resume, str) else str(out)]
    return command

def train_env(pause: str | None = None, threads: int = 1) -> dict[str, str]:
    # One thread per process (train.py's default follows OMP_NUM_THREADS): the test machine has few cores and
    # several processes at once, and runs compared bit for bit need the same count.
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    env.pop(PAUSE_ENV_VAR, None)
    if pause:
        env[PAUSE_ENV_VAR] = pause
    return env

def start_train(data: Path, out: Path, workers: int, *, resume: bool | str, pause: str | None, log: Path,
                extra: tuple[str, ...] = (), command: list[str] | None = None, group: bool = False,
                threads: int = 1) -> subprocess.Popen:
    """Start train.py (or `command`) in the background, its stderr going to `log`.

    `group`: in a process group of its own (its pid is the group's id), for signals sent to the whole group
    as SLURM, systemd, GNU timeout and a closed terminal send them.
    """
    with open(log, "wb") as handle:  # the child keeps its own copy of the descriptor
        command = command or train_command(data, out, workers, resume, extra)
        return subprocess.Popen(paused(command) if pause else command, cwd=PROJECT,
                                env=train_env(pause, threads), stdout=subprocess.DEVNULL, stderr=handle,
                                start_new_session=group)

def wait_for(process: subprocess.Popen, log: Path, text: str, timeout: float = HANG_S) -> None:
    """Wait until `text` appears in the process's stderr."""
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, (f"train.py exited {process.returncode} before {text!r}:\n"
                                        f"{log.read_text()[-2000:]}")
        assert time.monotonic() < deadline, f"no {text!r} within {timeout} s"
        time.sleep(0.05)

def killed_at(command: list[str], log: Path, pause: str) -> None:
    """Run `command` (a train.py command line) until it pauses at `pause`, then SIGKILL it there."""
    process = start_train(Path(), Path(), 0, resume=False, pause=pause, log=log, command=command)
    try:
        wait_for(process, log, f"paused at {pause}")
    finally:
        process.kill()
        process.wait()

def load_cpu(path: Path) -> dict:
    """A checkpoint file read the strict way: on the CPU, weights_only."""
    return torch.load(path, map_location="cpu", weights_only=True)

def assert_same_run(resumed: dict, reference: dict) -> None:
    """Every tensor (model, optimizer, RNG states) is bit-for-bit equal, and so is the schedule."""
    mine, theirs = dict(nested_tensors(resumed)), dict(nested_tensors(reference))
    assert mine.keys() == theirs.keys()
    different = [key for key in theirs if not torch.equal(mine[key], theirs[key])]
    assert not different, f"{len(different)} tensors differ, first: {different[:3]}"
    assert any(key.startswith("/model/") for key in mine) and any(key.startswith("/optimizer/") for key in mine)
    for key in ("epoch", "scheduler", "best_val_acc"):
        assert resumed[key] == reference[key], key
    assert resumed["rng"]["python"] == reference["rng"]["python"]


def evaluated_figures(printed: str) -> list[dict[str, float]]:
    """The figures each evaluate.py run printed under metrics.csv's names (its `val_loss ...` line), in order."""
    lines = [line.split() for line in printed.splitlines() if line.startswith("val_loss ")]
    return [{name: float(value) for name, value in zip(words[::2], words[1::2])} for words in lines]


def assert_evaluate_equals_training(printed: str, out: Path, names: tuple[str, ...] = ("best.pt", "last.pt")) -> None:
    """evaluate.py on each of `names` in `out` (their output in `printed`, in that order) printed every val_ column
    that metrics.csv holds for the checkpoint's epoch, and no other, to 1e-4."""
    from {{ cookiecutter.package_name }}.outputs import read_metrics

    rows = {row["epoch"]: row for row in read_metrics(out / "metrics.csv")}
    figures = evaluated_figures(printed)
    assert len(figures) == len(names), printed[-2000:]
    for name, printed_figures in zip(names, figures):
        row = rows[load_cpu(out / name)["epoch"]]
        recorded = {key: value for key, value in row.items() if key.startswith("val_")}
        assert printed_figures.keys() == recorded.keys(), (name, printed_figures, recorded)
        for key, value in recorded.items():
            assert abs(printed_figures[key] - value) <= 1e-4, (name, key, printed_figures[key], value)
