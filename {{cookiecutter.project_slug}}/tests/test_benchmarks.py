"""The benchmark scripts run end to end with tiny settings and print their figures (smoke tests, not timings)."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import HANG_S

PROJECT = Path(__file__).resolve().parent.parent
TINY = ["--device", "cpu", "--batch-size", "4", "--image-size", "32", "--batches", "2",
        "--warmup", "1", "--repeats", "1", "--threads", "1"]


def run_script(name: str, *args: str) -> subprocess.CompletedProcess:
    """Run benchmarks/<name> as a user would, from outside the project folder."""
    return subprocess.run([sys.executable, str(PROJECT / "benchmarks" / name), *args],
                          capture_output=True, text=True, timeout=HANG_S, cwd=PROJECT.parent)


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


def load_script(name: str):
    """benchmarks/<name> as a module, to call its main() in this process (no torch import to pay for)."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{Path(name).stem}", PROJECT / "benchmarks" / name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def one_thread():
    """The scripts set torch's thread count for their process; the suite gets its own back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_peers_gives_every_script_one_stratified_split_of_the_same_files(tiny_data, tmp_path):
    """peers.py's train/ and val/ hold every image once, each class in both, and the same split for the same seed."""
    peers = load_script("peers.py")
    first, second = tmp_path / "a", tmp_path / "b"
    train_count = peers.write_split(tiny_data, first, 0.25, seed=0)
    peers.write_split(tiny_data, second, 0.25, seed=0)
    names = lambda root, split: sorted(p.relative_to(root / split).as_posix()  # noqa: E731
                                       for p in (root / split).rglob("*.png"))
    source = sorted(p.read_bytes() for p in tiny_data.rglob("*.png"))
    copied = sorted(p.read_bytes() for p in first.rglob("*.png"))
    assert copied == source and train_count == len(names(first, "train"))
    assert {p.parent.name for p in (first / "val").rglob("*.png")} == {p.name for p in (tiny_data / "train").iterdir()}
    assert names(first, "train") == names(second, "train") and names(first, "val") == names(second, "val")
    command = peers.project_command(peers.get_args_parser().parse_args(["--data", "x"]), first, tmp_path / "out")
    assert command[1].endswith("train.py") and "--no-pretrained" in command


def test_host_cost_prints_cpu_milliseconds_per_sample_for_each_data_path(tiny_data, one_thread, capsys):
    """host_cost.py reads the training dataset in a worker's way and the main process's, the device path's worker
    share (in a bake with the gpu_decode answer) and torchvision's presets, and prints each (the project's with its
    ratio to the preset)."""
    load_script("host_cost.py").main(["--data", str(tiny_data), "--samples", "4", "--repeats", "1"])
    out = capsys.readouterr().out
    device_path = (PROJECT / "{{ cookiecutter.package_name }}" / "plugins" / "gpu_decode").is_dir()  # the answer's
    if not device_path:
        assert "  device none, device standard: not in this bake" in out
    for name in ("project none", "project main", "project standard",
                 *(("device none", "device standard") if device_path else ())):
        assert re.search(rf"^  {name} +median \d+\.\d+  runs \d+\.\d+  / presets (eval|train) \d+\.\d+$", out,
                         re.MULTILINE), out
    for name in ("presets eval", "presets train"):
        assert re.search(rf"^  {name} +median \d+\.\d+  runs \d+\.\d+$", out, re.MULTILINE), out


def test_save_overhead_times_the_projects_own_epoch_save_and_its_parts(tiny_data, one_thread, tmp_path, capsys):
    """save_overhead.py calls epochs.save_epoch for improved and unimproved epochs and prints each part's time."""
    load_script("save_overhead.py").main(["--data", str(tiny_data), "--repeats", "1", "--out", str(tmp_path),
                                          "--backbone", "mobilenet_v3_small"])  # small checkpoints: a quick test
    out = capsys.readouterr().out
    assert re.search(r"mobilenet_v3_small \+ AdamW, checkpoint \d+\.\d MB", out), out
    for kind in ("first", "improved", "not improved"):
        assert re.search(rf"^{kind} +wall \d+\.\d+ s  cpu \d+\.\d+ s  \|  state \d.* link \d+\.\d+$", out,
                         re.MULTILINE), out
    assert list(tmp_path.iterdir()) == []  # its checkpoints went into a temp folder, removed at the end


def test_pipeline_vs_memory_says_device_decode_is_not_in_a_bake_without_it(capsys):
    """In a bake without the gpu_decode answer, --decode device is one line saying so, and nothing is measured."""
    if (PROJECT / "{{ cookiecutter.package_name }}" / "plugins" / "gpu_decode").is_dir():
        pytest.skip("this bake has the gpu_decode answer: pipeline_vs_memory.py --decode device measures it")
    assert load_script("pipeline_vs_memory.py").main(["--decode", "device"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "skipped: --decode device is not in this bake (the gpu_decode answer brings it)"]


@pytest.mark.slow  # subprocesses that each import torch
def test_startup_prints_each_answer_time_and_their_medians():
    """startup.py times train.py's refusal, --help and first optimizer step, and prints the medians."""
    result = run_script("startup.py", "--repeats", "1", "--workers", "0", "--batch-size", "4")
    assert result.returncode == 0, result.stderr
    for measure in ("error", "help", "step"):
        assert re.search(rf"^median {measure}\s+train\.py \d+\.\d+ s$", result.stdout, re.MULTILINE), result.stdout
