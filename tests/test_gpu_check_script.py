"""scripts/gpu_check.sh, the GPU proof over three bakes, checked by its dry run with a stand-in python.

The stand-in prints a pytest-like count line, so what is checked is the script's own work: which bake runs
which phase, the combined table, the exit status, and the bakes the time budget left unchecked.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TEMPLATE, subprocess_env

SCRIPT = TEMPLATE / "scripts" / "gpu_check.sh"
STUB = """#!/bin/sh
echo "stand-in python: $*"
echo "7 passed, 2 skipped in 0.01s"
"""

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="gpu_check.sh needs bash and coreutils' timeout")


@pytest.fixture(scope="module")
def bakes(tmp_path_factory) -> Path:
    """The script's own `bake` step: the default, fp16 and ddp bakes, made with this interpreter's cookiecutter."""
    folder = tmp_path_factory.mktemp("gpu-bakes") / "bakes"
    result = subprocess.run(["bash", str(SCRIPT), "bake"], env=subprocess_env(PYTHON=sys.executable,
                            GPU_CHECK_BAKES=str(folder)), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return folder


def gpu_check(tmp_path: Path, bakes: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """The script as the GPU machine would run it, with the stand-in python and its files under tmp_path."""
    stub = tmp_path / "python"
    stub.write_text(STUB)
    stub.chmod(0o755)
    environment = subprocess_env(**{"PYTHON": str(stub), "GPU_CHECK_BAKES": str(bakes), "OUT": str(tmp_path / "out"),
                                    "GPU_CHECK_WORK": str(tmp_path / "work"), "GPU_CHECK_BUDGET_S": "600", **env})
    return subprocess.run(["bash", str(SCRIPT), *args], env=environment, capture_output=True, text=True,
                          timeout=300)


def rows(tmp_path: Path) -> list[dict[str, str]]:
    """The combined results.tsv."""
    with open(tmp_path / "out" / "results.tsv", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def test_each_bake_runs_the_phase_it_is_named_with_and_the_table_says_which(tmp_path, bakes):
    """default:tests runs the three test steps in the default bake, fp16:cuda the CUDA tier alone in the fp16 bake."""
    result = gpu_check(tmp_path, bakes, "--dry-run", "default:tests", "fp16:cuda")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [(row["bake"], row["step"]) for row in rows(tmp_path)] == [
        ("default", "tests-cuda"), ("default", "tests-fake-cuda"), ("default", "tests-quick"), ("fp16", "tests-cuda")]
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "=== bake fp16 (default_precision=fp16), phase cuda: exit 0" in summary
    assert {path.name for path in (tmp_path / "out").iterdir()} == {"summary.txt", "results.tsv", "env.txt",
                                                                     "logs.tgz"}


def test_a_bake_the_budget_left_unchecked_is_named_and_the_call_exits_3(tmp_path, bakes):
    """No time left: the default bake's test steps are not started, the summary names it, and the exit is not 0."""
    result = gpu_check(tmp_path, bakes, "--dry-run", "default:tests", "ddp:cuda", GPU_CHECK_BUDGET_S="0")
    assert result.returncode == 3, result.stdout
    assert "NOT FULLY CHECKED, out of time (exit 3): default:tests" in (tmp_path / "out" / "summary.txt").read_text()


@pytest.mark.parametrize("args", [(), ("default:tset",), ("gpu:tests",)], ids=["nothing", "phase", "bake"])
def test_a_bad_argument_is_one_line_and_exit_2_before_anything_runs(tmp_path, bakes, args):
    """Nothing is written: one line naming what it accepts."""
    result = gpu_check(tmp_path, bakes, *args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "error:" in result.stderr
    assert not (tmp_path / "out").exists()


def test_baking_refuses_a_folder_it_did_not_make(tmp_path):
    """GPU_CHECK_BAKES may name any folder: one holding other files is left alone (exit 2), not emptied."""
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    result = subprocess.run(["bash", str(SCRIPT), "bake"], env=subprocess_env(PYTHON=sys.executable,
                            GPU_CHECK_BAKES=str(keep)), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and (keep / "notes.txt").read_text() == "mine"
    assert os.listdir(keep) == ["notes.txt"]
