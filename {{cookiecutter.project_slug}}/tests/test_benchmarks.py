"""The benchmark scripts run end to end with tiny settings and print their figures (smoke tests, not timings)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
TINY = ["--device", "cpu", "--batch-size", "4", "--image-size", "32", "--batches", "2",
        "--warmup", "1", "--repeats", "1", "--threads", "1"]


def run_script(name: str, *args: str) -> subprocess.CompletedProcess:
    """Run benchmarks/<name> as a user would, from outside the project folder."""
    return subprocess.run([sys.executable, str(PROJECT / "benchmarks" / name), *args],
                          capture_output=True, text=True, timeout=300, cwd=PROJECT.parent)


@pytest.mark.slow  # a subprocess: importing torch costs seconds
def test_loop_overhead_prints_images_per_second_and_both_median_ratios():
    """loop_overhead.py exits 0 and prints each loop's images/s and the ratios to the hand-written loop."""
    result = run_script("loop_overhead.py", *TINY)
    assert result.returncode == 0, result.stderr
    assert re.search(r"median images/s: hand-written [\d.]+, project [\d.]+, project\+tqdm [\d.]+", result.stdout)
    assert re.search(r"median ratio project / hand-written: \d+\.\d+", result.stdout)
    assert re.search(r"median ratio project\+tqdm / hand-written: \d+\.\d+", result.stdout)


@pytest.mark.slow  # a subprocess: importing torch costs seconds
def test_data_throughput_prints_a_row_per_worker_count_and_the_model_rate(tiny_data):
    """data_throughput.py exits 0 with loader images/s for each --workers value, cached too, and the model's rate."""
    result = run_script("data_throughput.py", *TINY, "--data", str(tiny_data), "--workers", "0,1",
                        "--epochs", "2", "--cache-images")
    assert result.returncode == 0, result.stderr
    rows = re.findall(r"^\s*(files|cached)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+[\d.]+x$", result.stdout, re.MULTILINE)
    assert rows == [("files", "0"), ("files", "1"), ("cached", "0"), ("cached", "1")]
    assert re.search(r"model consumption .*: [\d.]+ images/s", result.stdout)


@pytest.mark.slow  # a subprocess: importing torch costs seconds
def test_benchmarks_refuse_a_bad_device_with_one_line_and_exit_2():
    """A device that is not there is refused like train.py refuses it: exit 2, one line, no traceback."""
    result = run_script("loop_overhead.py", "--device", "tpu")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


@pytest.mark.slow  # a subprocess: importing torch costs seconds
def test_pipeline_vs_memory_prints_both_feeds_and_their_median_ratio():
    """pipeline_vs_memory.py exits 0 with images/s fed by the run's JPEG loader and from memory, and the ratio."""
    result = run_script("pipeline_vs_memory.py", "--device", "cpu", "--images", "8", "--image-size", "32",
                        "--batch-size", "4", "--repeats", "1", "--warmup", "0")
    assert result.returncode == 0, result.stderr
    assert re.search(r"^ *pipeline: .*median [\d.]+$", result.stdout, re.MULTILINE)
    assert re.search(r"median ratio pipeline / in memory: \d+\.\d+", result.stdout)
