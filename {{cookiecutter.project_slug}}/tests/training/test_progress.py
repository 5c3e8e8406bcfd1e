"""Progress as its reader needs it: a bar on a terminal, short plain lines in a log file (nohup, SLURM, > log.txt)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest
from conftest import HANG_S
from run_helpers import PROJECT

from {{ cookiecutter.package_name }}.training import progress
from {{ cookiecutter.package_name }}.training.progress import Progress

ARGS = ["train.py", "--device", "cpu", "--epochs", "1", "--batch-size", "4", "--image-size", "32", "--workers", "1",
        "--no-pretrained"]


def test_lines_mode_prints_short_plain_lines_and_a_last_one(capsys, monkeypatch):
    """In a log file: no carriage return, one line per interval and one at the pass's end, each short."""
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)
    with Progress(range(5), "epoch 1 train", "lines") as bar:
        for index in bar:
            bar.show(index + 1, loss="0.1234", img_s="99")
    err = capsys.readouterr().err
    assert "\r" not in err and err.splitlines()[-1] == "epoch 1 train: 5/5  loss 0.1234  img_s 99"
    assert len(err.splitlines()) == 5 and all(len(line) < 200 for line in err.splitlines())


def test_a_slow_last_step_prints_its_line_once(capsys, monkeypatch):
    """Under load every step outlasts the interval, the last one too: its line is printed once, not again at the
    pass's end (no line twice in a row)."""
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)  # every step slower than the interval
    with Progress(range(3), "validate", "lines") as bar:
        for index in bar:
            bar.show(index + 1, loss="0.5")
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["validate: 1/3  loss 0.5", "validate: 2/3  loss 0.5", "validate: 3/3  loss 0.5"]


def test_auto_is_a_bar_on_a_terminal_and_lines_elsewhere(monkeypatch):
    """auto follows stderr: a terminal gets the bar, a pipe or file the lines; an explicit mode is kept."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert progress.resolve("auto") == "bar" and progress.resolve("lines") == "lines"
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert progress.resolve("auto") == "lines" and progress.resolve("bar") == "bar"


def test_an_error_inside_a_bar_is_printed_on_a_line_of_its_own(capsys):
    """The bar is cleared before the error propagates: the CLI's one line does not land on the bar's line."""
    with pytest.raises(RuntimeError):
        with Progress(range(3), "validate", "bar") as bar:
            for _ in bar:
                raise RuntimeError("bad")
    print("error: bad", file=sys.stderr)
    last = capsys.readouterr().err.split("\r")[-1]  # what a terminal shows on the last line
    assert last.strip() == "error: bad"


@pytest.mark.slow
def test_train_py_into_a_log_file_writes_no_carriage_returns(tiny_data, tmp_path):
    """`python train.py ... > log.txt 2>&1`: every line plain and under 200 characters, no bar."""
    log = tmp_path / "log.txt"
    with open(log, "wb") as handle:
        code = subprocess.run([sys.executable, *ARGS, "--data", str(tiny_data), "--out", str(tmp_path / "run")],
                              cwd=PROJECT, stdout=handle, stderr=subprocess.STDOUT, timeout=HANG_S,
                              env={**os.environ, "OMP_NUM_THREADS": "1"}).returncode
    text = log.read_text()
    assert code == 0, text[-2000:]
    assert "\r" not in text and all(len(line) < 200 for line in text.splitlines())
    assert "epoch 1/1" in text and "train: " in text  # the epoch line and the pass's own progress line


@pytest.mark.slow
def test_train_py_on_a_terminal_still_draws_its_bar(tiny_data, tmp_path):
    """On a terminal (a pseudo-terminal here) the same command draws tqdm's bar."""
    out, command = tmp_path / "run", [sys.executable, *ARGS, "--data", str(tiny_data)]
    pid, fd = pty.fork()
    if pid == 0:  # the child: stdout and stderr are the terminal
        os.chdir(PROJECT)
        os.environ["OMP_NUM_THREADS"] = "1"
        os.execv(sys.executable, [*command, "--out", str(out)])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a new pty is 0 columns wide
    captured = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        captured += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, captured[-2000:]
    assert b"epoch 1 train:" in captured and b"it/s" in captured  # tqdm's bar, redrawn in place
