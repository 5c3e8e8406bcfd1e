"""benchmarks/gpu_check.sh, the proof on a GPU, checked here by its plumbing: its dry run on the CPU.

The quick tests give the script a stand-in for python (a shell script that prints a pytest-like count line
and exits as told), so what they check is the script's own work: which steps run or are skipped, the
status, exit code and figure each step records, the four files it writes and the exit status. The slow
test runs the train phase's dry run for real: train.py on the CPU, SIGTERM and --resume, predict.py.
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
from conftest import HANG_S

PROJECT = Path(__file__).resolve().parent.parent
SCRIPT = PROJECT / "benchmarks" / "gpu_check.sh"
OUT_FILES = {"summary.txt", "results.tsv", "env.txt", "logs.tgz"}
STUB = """#!/bin/sh
echo "stand-in python: $*"
echo "7 passed, 2 skipped in 0.01s"
exit "${STUB_EXIT:-0}"
"""

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="gpu_check.sh needs bash and coreutils' timeout")


def gpu_check(tmp_path: Path, *args: str, python: str, **env: str) -> subprocess.CompletedProcess:
    """Run the script as the GPU machine would, its results and work files under tmp_path."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": python, "OUT": str(tmp_path / "out"),
                   "GPU_CHECK_WORK": str(tmp_path / "work"), "GPU_CHECK_BUDGET_S": "1500", **env}
    environment.pop("GPU_CHECK_DRY_RUN", None)
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env=environment, capture_output=True,
                          text=True, timeout=HANG_S)


def results(tmp_path: Path) -> dict[str, dict[str, str]]:
    """results.tsv's rows by step name."""
    with open(tmp_path / "out" / "results.tsv", newline="") as handle:
        return {row["step"]: row for row in csv.DictReader(handle, delimiter="\t")}


def logs(tmp_path: Path) -> dict[str, str]:
    """The packed logs, by file name."""
    with tarfile.open(tmp_path / "out" / "logs.tgz") as packed:
        return {Path(member.name).name: packed.extractfile(member).read().decode(errors="replace")
                for member in packed.getmembers() if member.isfile()}


@pytest.fixture
def stand_in(tmp_path) -> str:
    """A `python` that prints a pytest count line and exits with $STUB_EXIT."""
    path = tmp_path / "python"
    path.write_text(STUB)
    path.chmod(0o755)
    return str(path)


def test_no_phase_or_an_unknown_one_is_refused_with_one_line_and_exit_2(tmp_path, stand_in):
    """Nothing runs and nothing is written: exit 2 and one line naming the phases."""
    for args in ((), ("--dry-run", "tset")):
        result = gpu_check(tmp_path, *args, python=stand_in)
        assert result.returncode == 2
        assert len(result.stderr.strip().splitlines()) == 1 and "tests cuda train compile bench" in result.stderr
        assert not (tmp_path / "out").exists()


def test_the_dry_run_records_each_step_with_its_status_seconds_and_figure(tmp_path, stand_in):
    """tests phase: the CUDA tier is skipped, the others run pytest with their marks; four files come out."""
    result = gpu_check(tmp_path, "--dry-run", "tests", python=stand_in)
    assert result.returncode == 0, result.stdout + result.stderr
    assert {path.name for path in (tmp_path / "out").iterdir()} == OUT_FILES
    rows = results(tmp_path)
    assert list(rows) == ["tests-cuda", "tests-fake-cuda", "tests-quick"]
    assert rows["tests-cuda"]["status"] == "skipped (no cuda)"
    for name in ("tests-fake-cuda", "tests-quick"):
        assert (rows[name]["status"], rows[name]["exit"]) == ("ok", "0")
        assert rows[name]["figure"] == "7 passed, 2 skipped" and rows[name]["seconds"].isdigit()
    packed = logs(tmp_path)
    # the quick tier leaves out what the two steps before it ran
    assert "-m not slow and not cuda and not fake_cuda" in packed["tests-quick.log"]
    assert "-m fake_cuda" in packed["tests-fake-cuda.log"]
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "dry run" in summary and "0 step(s) failed" in summary
    assert any(line.split()[:2] == ["tests-quick", "ok"] and line.endswith("7 passed, 2 skipped")
               for line in summary.splitlines())


def test_a_failing_step_is_recorded_with_its_exit_code_and_the_script_exits_1(tmp_path, stand_in):
    """Every step still runs after a failure; the table says which failed, and so does the exit status."""
    result = gpu_check(tmp_path, "--dry-run", "tests", python=stand_in, STUB_EXIT="3")
    assert result.returncode == 1
    rows = results(tmp_path)
    assert [(rows[name]["status"], rows[name]["exit"]) for name in ("tests-fake-cuda", "tests-quick")] == [
        ("FAIL", "3"), ("FAIL", "3")]
    assert "2 step(s) failed" in (tmp_path / "out" / "summary.txt").read_text()


def test_steps_past_the_time_budget_are_skipped_named_and_exit_3(tmp_path, stand_in):
    """With the budget spent nothing runs (no log), and a call that proved nothing does not exit 0."""
    result = gpu_check(tmp_path, "--dry-run", "tests", python=stand_in, GPU_CHECK_BUDGET_S="0")
    assert result.returncode == 3
    assert {row["status"] for name, row in results(tmp_path).items() if name != "tests-cuda"} == {
        "skipped (time budget)"}
    assert "tests-quick.log" not in logs(tmp_path)
    assert "NOT CHECKED, out of time: tests-fake-cuda tests-quick" in (tmp_path / "out" / "summary.txt").read_text()


def test_the_quick_tier_spreads_over_xdist_workers_where_xdist_imports(tmp_path, stand_in):
    """GPU_CHECK_XDIST workers for the quick tier only: the CUDA tiers stay in one process."""
    result = gpu_check(tmp_path, "--dry-run", "tests", python=stand_in, GPU_CHECK_XDIST="6")
    assert result.returncode == 0, result.stdout
    packed = logs(tmp_path)
    assert "-n 6" in packed["tests-quick.log"] and "-n 6" not in packed["tests-fake-cuda.log"]


@pytest.mark.slow  # real train.py runs on the CPU on 96 small images: about a minute and a half
def test_the_train_and_compile_dry_run_trains_resumes_bit_identically_evaluates_and_predicts_on_the_cpu(tmp_path):
    """--dry-run train compile with the real python: the CPU steps pass, the CUDA-only ones are skipped by name."""
    result = gpu_check(tmp_path, "--dry-run", "train", "compile", python=sys.executable)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = results(tmp_path)
    for name in ("tiny-demo", "train-fp32", "resume-reference", "resume-sigterm-resume", "devkit-auto-free",
                 "predict-cpu", "evaluate-device", "export-pt2-predict"):
        assert rows[name]["status"] == "ok", rows[name]
    assert rows["device-cuda1-refused"]["status"] in ("ok", "skipped (2+ gpus: cuda:1 exists)")
    for name in ("ddp-nccl-1proc", "predict-device-half", "train-bf16", "train-fp16-clip-accum", "train-mixup-cutmix",
                 "train-channels-last", "train-cache-images", "train-workers-pinned", "train-compile"):
        assert rows[name]["status"] == "skipped (no cuda)"
    assert "predictions on cpu" in rows["export-pt2-predict"]["figure"]
    assert "val_acc" in rows["train-fp32"]["figure"]
    assert "exit 143" in rows["resume-sigterm-resume"]["figure"] and "bit-identical" in rows[
        "resume-sigterm-resume"]["figure"]
    assert rows["devkit-auto-free"]["figure"].startswith("auto:free -> ")
    assert "predictions on the CPU" in rows["predict-cpu"]["figure"]
    assert {"train-fp32.log", "resume-sigterm-resume.interrupted.log", "run-fp32-metrics.csv"} <= set(logs(tmp_path))
    assert "python" in (tmp_path / "out" / "env.txt").read_text()
