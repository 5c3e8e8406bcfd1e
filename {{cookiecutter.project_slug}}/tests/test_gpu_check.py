"""benchmarks/gpu_check.sh, the proof on a GPU, checked here by its plumbing: its dry run on the CPU.

The quick tests give the script a stand-in for python (a shell script that prints a pytest-like count line
and exits as told), so what they check is the script's own work: which steps run, in which order, which are
skipped and why, the status, exit code and figure each step records, the files it writes and appends to, and
the exit status. The slow test runs the training steps' dry run for real: train.py on the CPU, SIGTERM and
--resume, torchrun, predict.py.
"""

from __future__ import annotations

import csv
import os
import re
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
# What the GPU call must bring back first, in this order, before --compile and the rest.
EVIDENCE_FIRST = ["env", "tests-cuda", "train-fp32", "resume-reference", "resume-sigterm-resume",
                  "device-cuda1-refused", "ddp-nccl", "train-bf16", "train-fp16-gradscaler", "throughput-resnet50"]

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="gpu_check.sh needs bash and coreutils' timeout")


def gpu_check(tmp_path: Path, *args: str, python: str, **env: str) -> subprocess.CompletedProcess:
    """Run the script as the GPU machine would, its results and work files under tmp_path."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": python, "OUT": str(tmp_path / "out"),
                   "GPU_CHECK_WORK": str(tmp_path / "work"), "GPU_CHECK_BUDGET_S": "3000", **env}
    environment.pop("GPU_CHECK_DRY_RUN", None)
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env=environment, capture_output=True,
                          text=True, timeout=HANG_S)


def results(tmp_path: Path, call: int | None = None) -> dict[str, dict[str, str]]:
    """results.tsv's rows by step name (of one call, or the latest row of each step)."""
    with open(tmp_path / "out" / "results.tsv", newline="") as handle:
        return {row["step"]: row for row in csv.DictReader(handle, delimiter="\t")
                if call is None or row["call"] == str(call)}


def logs(tmp_path: Path) -> dict[str, str]:
    """The packed logs, by their path under logs/ (call-N/NAME)."""
    with tarfile.open(tmp_path / "out" / "logs.tgz") as packed:
        return {str(Path(member.name).relative_to("logs")): packed.extractfile(member).read().decode(errors="replace")
                for member in packed.getmembers() if member.isfile()}


def steps_and_limits() -> dict[str, int]:
    """--list: every step, in the order a call runs them, with its limit in seconds."""
    listing = subprocess.run(["bash", str(SCRIPT), "--list"], capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    return {line.split()[0]: int(line.split()[1]) for line in listing.stdout.splitlines()[1:]}


@pytest.fixture
def stand_in(tmp_path) -> str:
    """A `python` that prints a pytest count line and exits with $STUB_EXIT."""
    path = tmp_path / "python"
    path.write_text(STUB)
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("args", [("--only", "tests-cuda,tset"), ("--from", "nope"), ("--from",), ("phase",)])
def test_an_unknown_step_or_argument_is_refused_with_one_line_and_exit_2(tmp_path, stand_in, args):
    """Nothing runs and nothing is written: exit 2 and one line."""
    result = gpu_check(tmp_path, *args, python=stand_in)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("error: ")
    assert not (tmp_path / "out").exists()


def test_the_gpu_evidence_comes_first_and_no_cpu_only_tier_is_in_the_call():
    """env, the CUDA tier, the training steps and the throughput figure lead; the fake-CUDA and quick tiers are CI's."""
    order = list(steps_and_limits())
    assert order[:len(EVIDENCE_FIRST)] == EVIDENCE_FIRST
    assert order.index("throughput-resnet50") < order.index("train-compile")
    assert not any("quick" in name or "fake" in name for name in order)


def test_only_runs_the_named_step_after_env_and_records_its_status_seconds_and_figure(tmp_path, stand_in):
    """--only tests-cuda: env (the record) and the CUDA tier alone; four files come out."""
    result = gpu_check(tmp_path, "--dry-run", "--only", "tests-cuda", python=stand_in)
    assert result.returncode == 0, result.stdout + result.stderr
    assert {path.name for path in (tmp_path / "out").iterdir()} == OUT_FILES
    rows = results(tmp_path)
    assert list(rows) == ["env", "tests-cuda"]
    assert (rows["tests-cuda"]["status"], rows["tests-cuda"]["exit"]) == ("ok", "0")
    assert rows["tests-cuda"]["figure"].startswith("7 passed, 2 skipped") and rows["tests-cuda"]["seconds"].isdigit()
    assert "-m cuda" in logs(tmp_path)["call-1/tests-cuda.log"]
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "dry run" in summary and "0 step(s) failed" in summary and "--only tests-cuda" in summary


def test_from_runs_a_step_and_every_step_after_it(tmp_path, stand_in):
    """--from loop-fp16: env, then loop-fp16 to the end (CUDA-only steps are skipped by name in a dry run)."""
    result = gpu_check(tmp_path, "--dry-run", "--from", "loop-fp16", python=stand_in)
    assert result.returncode == 0, result.stdout + result.stderr
    order = list(steps_and_limits())
    assert list(results(tmp_path)) == ["env", *order[order.index("loop-fp16"):]]
    assert results(tmp_path)["loop-fp16"]["status"] == "skipped (no cuda)"


def test_a_failing_step_is_recorded_with_its_exit_code_and_the_script_exits_1(tmp_path, stand_in):
    """The table says which step failed and with what code, and so does the exit status."""
    result = gpu_check(tmp_path, "--dry-run", "--only", "tests-cuda,devkit-auto-free", python=stand_in,
                       STUB_EXIT="3")
    assert result.returncode == 1
    rows = results(tmp_path)
    assert (rows["tests-cuda"]["status"], rows["tests-cuda"]["exit"]) == ("FAIL", "3")
    assert "step(s) failed" in (tmp_path / "out" / "summary.txt").read_text()


def test_a_step_whose_limit_does_not_fit_is_skipped_not_cut_and_the_call_exits_3(tmp_path, stand_in):
    """Budget one second short of the CUDA tier's limit: it never starts, a later step that fits still runs."""
    limits = steps_and_limits()
    assert limits["devkit-auto-free"] < limits["tests-cuda"] and limits["env"] < limits["tests-cuda"]
    result = gpu_check(tmp_path, "--dry-run", "--only", "tests-cuda,devkit-auto-free", python=stand_in,
                       GPU_CHECK_BUDGET_S=str(limits["tests-cuda"] - 1))
    assert result.returncode == 3, result.stdout + result.stderr
    rows = results(tmp_path)
    assert {name: row["status"] for name, row in rows.items()} == {
        "env": "ok", "tests-cuda": "skipped (time budget)", "devkit-auto-free": "ok"}
    assert "call-1/tests-cuda.log" not in logs(tmp_path)
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "NOT CHECKED, out of time: tests-cuda" in summary and "--dry-run --only tests-cuda" in summary


def test_a_step_that_needs_an_earlier_one_waits_for_its_success(tmp_path, stand_in):
    """predict-cpu without a passed train-fp32 is skipped, and says which step it needs."""
    result = gpu_check(tmp_path, "--dry-run", "--only", "predict-cpu", python=stand_in)
    assert result.returncode == 0, result.stdout
    assert results(tmp_path)["predict-cpu"]["status"] == "skipped (needs train-fp32)"


def test_a_second_call_appends_its_results_and_fresh_starts_over(tmp_path, stand_in):
    """Two calls with one $OUT keep both calls' rows, summaries, env records and logs; --fresh deletes them."""
    first = gpu_check(tmp_path, "--dry-run", "--only", "tests-cuda", python=stand_in, GPU_CHECK_BUDGET_S="60")
    second = gpu_check(tmp_path, "--dry-run", "--only", "tests-cuda", python=stand_in)
    assert (first.returncode, second.returncode) == (3, 0)
    assert results(tmp_path, call=1)["tests-cuda"]["status"] == "skipped (time budget)"
    assert results(tmp_path, call=2)["tests-cuda"]["status"] == "ok"
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert summary.index("call 1:") < summary.index("NOT CHECKED") < summary.index("call 2:")
    assert (tmp_path / "out" / "env.txt").read_text().count("=== call ") == 2
    assert {"call-1/env.log", "call-2/env.log", "call-2/tests-cuda.log"} <= set(logs(tmp_path))
    assert gpu_check(tmp_path, "--dry-run", "--fresh", "--only", "env", python=stand_in).returncode == 0
    assert {row["call"] for row in results(tmp_path).values()} == {"1"}
    assert set(logs(tmp_path)) == {"call-1/env.log", "call-1/results.tsv"}


def test_without_a_gpu_a_real_call_stops_after_the_record_with_exit_2(tmp_path, stand_in):
    """No CUDA device seen: env.txt is written, nothing else runs, one error line."""
    result = gpu_check(tmp_path, python=stand_in)
    assert result.returncode == 2
    assert list(results(tmp_path)) == ["env"] and "stand-in python" in (tmp_path / "out" / "env.txt").read_text()
    assert result.stderr.count("\n") == 1 and "no CUDA device" in result.stderr


def test_a_flag_this_bake_lacks_skips_the_step_as_not_in_this_bake(tmp_path, stand_in):
    """The stand-in's --help lists no flags: the step is skipped by name, and that is no failure."""
    result = gpu_check(tmp_path, "--dry-run", "--only", "ddp-nccl,throughput-resnet50", python=stand_in)
    assert result.returncode == 0, result.stdout
    rows = results(tmp_path)
    assert rows["ddp-nccl"]["status"] == "skipped (not in this bake: train.py has no --parallel ddp (bake with " \
                                        "multi_gpu=ddp))"
    assert rows["throughput-resnet50"]["status"].startswith("skipped (not in this bake: benchmarks/")


def has_ddp() -> bool:
    """Whether this bake's train.py offers --parallel ddp."""
    text = subprocess.run([sys.executable, "train.py", "--help"], cwd=PROJECT, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "400"}, timeout=HANG_S).stdout
    return "ddp}" in text or "ddp," in text


@pytest.mark.slow  # real train.py runs on the CPU on 96 small images, and torchrun: about two minutes
def test_the_dry_run_trains_resumes_bit_identically_joins_a_process_group_and_predicts_on_the_cpu(tmp_path):
    """The training steps' dry run with the real python: the CPU steps pass, the CUDA-only ones are skipped by name."""
    steps = ["train-fp32", "resume-reference", "resume-sigterm-resume", "device-cuda1-refused", "ddp-nccl",
             "train-bf16", "devkit-auto-free", "predict-cpu", "evaluate-device", "predict-device-half",
             "export-pt2-predict"]
    # limits 20 times the GPU's and no budget to speak of: a busy CPU makes this slower, not red
    result = gpu_check(tmp_path, "--dry-run", "--only", ",".join(steps), python=sys.executable,
                       GPU_CHECK_LIMIT_SCALE="20", GPU_CHECK_BUDGET_S="1000000")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = results(tmp_path)
    for name in ("env", "train-fp32", "resume-reference", "resume-sigterm-resume", "devkit-auto-free",
                 "predict-cpu", "evaluate-device", "export-pt2-predict"):
        assert rows[name]["status"] == "ok", rows[name]
    assert re.fullmatch(r"ok|skipped \(\d+ GPUs: cuda:1 exists\)", rows["device-cuda1-refused"]["status"])
    for name in ("train-bf16", "predict-device-half"):
        assert rows[name]["status"] == "skipped (no cuda)"
    if has_ddp():
        assert rows["ddp-nccl"]["status"] == "ok", rows["ddp-nccl"]
        assert rows["ddp-nccl"]["figure"].startswith("gloo, world size 1; ")
    else:
        assert rows["ddp-nccl"]["status"].startswith("skipped (not in this bake")
    assert "predictions on cpu" in rows["export-pt2-predict"]["figure"]
    assert "val_acc" in rows["train-fp32"]["figure"]
    assert "exit 143" in rows["resume-sigterm-resume"]["figure"] and "bit-identical" in rows[
        "resume-sigterm-resume"]["figure"]
    assert rows["devkit-auto-free"]["figure"].startswith("auto:free -> ")
    assert "predictions on the CPU" in rows["predict-cpu"]["figure"]
    assert {"call-1/train-fp32.log", "call-1/resume-sigterm-resume.interrupted.log",
            "call-1/run-fp32-metrics.csv"} <= set(logs(tmp_path))
    assert "python" in (tmp_path / "out" / "env.txt").read_text()
