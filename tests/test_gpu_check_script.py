"""scripts/gpu_check.sh, the GPU proof on bakes made here, checked by its dry run with a stand-in python.

The stand-in prints a pytest-like count line, so what is checked is the real scripts' own work (the template's
and the bake's benchmarks/gpu_check.sh): which bake runs, the time budget (a step whose limit does not fit is
never started, and the call exits 3), and a second call in the same command appending to the first's results.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import tarfile
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
    """The script's own `bake` step: the ddp, fp16 and default bakes, made with this interpreter's cookiecutter."""
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
    """results.tsv, every call's rows."""
    with open(tmp_path / "out" / "results.tsv", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def limits(bakes: Path) -> dict[str, int]:
    """The ddp bake's steps with their limits, from its --list."""
    listing = subprocess.run(["bash", str(SCRIPT), "--list"], env=subprocess_env(GPU_CHECK_BAKES=str(bakes)),
                             capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    return {line.split()[0]: int(line.split()[1]) for line in listing.stdout.splitlines()[1:]}


def test_the_budget_cuts_whole_steps_and_a_second_call_appends_its_own_results(tmp_path, bakes):
    """A budget short of the CUDA tier's limit: it is skipped, never started or cut, a step that fits still runs,
    exit 3; then the fp16 bake's CUDA tier in a second call lands beside the first call's rows, not over them."""
    limit = limits(bakes)
    budget = limit["tests-cuda"] - 1
    assert limit["env"] <= budget and limit["devkit-auto-free"] <= budget
    first = gpu_check(tmp_path, bakes, "--dry-run", "--only", "tests-cuda,devkit-auto-free",
                      GPU_CHECK_BUDGET_S=str(budget))
    assert first.returncode == 3, first.stdout + first.stderr
    second = gpu_check(tmp_path, bakes, "--bake", "fp16", "--dry-run", "--only", "tests-cuda")
    assert second.returncode == 0, second.stdout + second.stderr
    assert [(row["call"], row["step"], row["status"]) for row in rows(tmp_path)] == [
        ("1", "env", "ok"), ("1", "tests-cuda", "skipped (time budget)"), ("1", "devkit-auto-free", "ok"),
        ("2", "env", "ok"), ("2", "tests-cuda", "ok")]
    summary = (tmp_path / "out" / "summary.txt").read_text()
    first_part, second_part = summary.split("=== gpu_check.sh call 2")
    assert "multi_gpu=ddp" in first_part
    assert "run them next: bash scripts/gpu_check.sh --bake ddp --dry-run --only tests-cuda" in first_part
    assert "default_precision=fp16" in second_part and "NOT CHECKED" not in second_part
    with tarfile.open(tmp_path / "out" / "logs.tgz") as packed:
        names = set(packed.getnames())
    assert {"logs/call-1/devkit-auto-free.log", "logs/call-2/tests-cuda.log"} <= names
    assert "logs/call-1/tests-cuda.log" not in names


@pytest.mark.parametrize("args", [("--bake", "gpu"), ("--bake",)], ids=["unknown", "missing"])
def test_a_bad_bake_is_one_line_and_exit_2_before_anything_runs(tmp_path, bakes, args):
    """Nothing is written: one line naming the bakes it accepts."""
    result = gpu_check(tmp_path, bakes, *args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "ddp, fp16 or default" in result.stderr
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


def test_a_step_named_alone_brings_the_step_it_needs_into_a_fresh_call(tmp_path, bakes):
    """The device tool empties $OUT and may start a fresh machine for a second call: `--only export-pt2-predict`
    (what a first call's budget left) takes train-fp32 before it, which it would otherwise skip as missing. (The
    stand-in python offers no flags, so the steps themselves record "not in this bake": the order is the point.)"""
    result = gpu_check(tmp_path, bakes, "--dry-run", "--only", "export-pt2-predict")
    assert [row["step"] for row in rows(tmp_path)] == ["env", "train-fp32", "export-pt2-predict"], result.stdout
