"""Careless use, round 4: the commands' edges that lost a finished run or wrote before refusing (a name too long
for any file system, a closed or full stdout/stderr) and exported class names that forge output rows. Each test is
one finding of that round, met the way a user meets it: real files, real descriptors, real processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import HANG_S
from run_helpers import PROJECT, train_env

import export
import predict
import train

BASE = ["--device", "cpu", "--batch-size", "4", "--image-size", "32", "--no-pretrained", "--precision", "fp32",
        "--parallel", "none", "--workers", "0"]
RUN_FILES = {"last.pt", "best.pt", "metrics.csv", "config.json", "curves.png"}


def test_an_out_name_longer_than_any_file_system_takes_is_one_line_and_exit_2(tiny_data, tmp_path, capsys):
    """--out with a 300-character folder name (beside or under a new folder): refused before anything is made."""
    long_name = "x" * 300
    for out in (tmp_path / long_name, tmp_path / "new" / long_name / "run"):
        assert train.main(["--data", str(tiny_data), "--out", str(out), "--epochs", "1", *BASE]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --out") and "300 bytes" in err[0], err
    assert sorted(os.listdir(tmp_path)) == []


def _close(fd: int):
    return lambda: os.close(fd)


@pytest.mark.slow
@pytest.mark.parametrize("streams", ["stdout closed, --progress bar", "stderr closed", "stdout on /dev/full"])
def test_a_closed_or_full_output_stream_loses_no_finished_run(tiny_data, tmp_path, streams):
    """Printing is best-effort: the run trains to the end (loader workers on), exit 0, its files complete."""
    if "/dev/full" in streams and not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    out = tmp_path / "run"
    command = [sys.executable, "train.py", "--data", str(tiny_data), "--out", str(out), "--epochs", "2",
               *BASE[:-1], "1"]
    options = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    if streams.startswith("stdout closed"):
        command += ["--progress", "bar"]
        options["preexec_fn"] = _close(1)
    elif streams == "stderr closed":
        options["preexec_fn"] = _close(2)
    with open("/dev/full" if streams.endswith("/dev/full") else os.devnull, "w") as full:
        if streams.endswith("/dev/full"):
            options["stdout"] = full
        result = subprocess.run(command, cwd=PROJECT, env=train_env(), timeout=HANG_S, **options)
    assert result.returncode == 0
    assert RUN_FILES <= set(os.listdir(out))
    state = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    assert (state["epoch"], state["step"]) == (2, 0)


def _one_error(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in lines[0], lines
    return lines[0]


@pytest.mark.parametrize("forged", ["circle\nphotos/cat.jpg  square  1.000", "circle\rsquare", "circle\x1b[2K"])
def test_a_class_name_that_would_forge_a_predict_row_is_refused_at_export_and_by_predict(checkpoint, tiny_data,
                                                                                         tmp_path, capsys, forged):
    """A checkpoint (or a model folder's config.json) from elsewhere whose class name holds a line break or a
    control character: export refuses it (one line, exit 2, nothing written), and predict prints no row for it."""
    image = str(next((tiny_data / "val").rglob("*.png")))
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    state["class_names"][0] = forged
    (tmp_path / "run").mkdir()
    torch.save(state, tmp_path / "run" / "best.pt")
    assert export.main([str(tmp_path / "run" / "best.pt"), "--format", "safetensors", "--out",
                        str(tmp_path / "folder")]) == 2
    assert "line break or control character" in _one_error(capsys)
    assert not (tmp_path / "folder").exists() and sorted(os.listdir(tmp_path)) == ["run"]
    assert predict.main([str(tmp_path / "run" / "best.pt"), image, "--device", "cpu"]) == 2
    assert "line break or control character" in _one_error(capsys)
    # A folder exported whole, its config.json edited afterwards
    assert export.main([str(checkpoint), "--format", "safetensors", "--out", str(tmp_path / "shared")]) == 0
    settings = json.loads((tmp_path / "shared" / "config.json").read_text())
    settings["class_names"][0] = forged
    (tmp_path / "shared" / "config.json").write_text(json.dumps(settings))
    capsys.readouterr()
    assert predict.main([str(tmp_path / "shared"), image, "--device", "cpu"]) == 2
    assert "line break or control character" in _one_error(capsys)
