"""DistributedDataParallel for real: train.py launched by torchrun, two processes on CPU (gloo)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import train
from {{ cookiecutter.package_name }}.parallel import weights_digest
from {{ cookiecutter.package_name }}.run_checkpoint import model_from_state

PROJECT = Path(__file__).resolve().parent.parent
CUDA_COUNT = torch.cuda.device_count() if torch.cuda.is_available() else 0
RUN_FILES = ["best.pt", "config.json", "curves.png", "last.pt", "metrics.csv"]


def torchrun(nproc: int, *args: str) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc_per_node=N train.py ARGS` with this interpreter (works in any venv)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "train.py", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # two ranks share the cores; torchrun's own default, said quietly
    return subprocess.run(command, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def ddp_run(tiny_data, tmp_path_factory):
    """One two-rank, one-epoch DDP run on the CPU, shared by the tests that inspect it."""
    out = tmp_path_factory.mktemp("ddp") / "run"
    # The smallest stock backbone: DDP does not care, and 18 MB checkpoints keep this run near 30 s
    result = torchrun(2, "--device", "cpu", "--parallel", "ddp", "--data", str(tiny_data), "--image-size", "32",
                      "--batch-size", "4", "--epochs", "1", "--backbone", "mobilenet_v3_small", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    return result, out


@pytest.mark.slow
def test_two_rank_ddp_on_cpu_leaves_one_set_of_files_and_a_plain_checkpoint(ddp_run):
    """Exit 0, exactly one last.pt/best.pt/metrics/config/plot (no temp files), model keys without `module.`."""
    _, out = ddp_run
    assert sorted(path.name for path in out.iterdir()) == RUN_FILES
    state = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    assert state["epoch"] == 1 and state["config"]["parallel"] == "ddp"
    assert not any(key.startswith(("module.", "_orig_mod.")) for key in state["model"])
    assert len((out / "metrics.csv").read_text().strip().splitlines()) == 2  # header + one epoch


@pytest.mark.slow
def test_both_ranks_end_with_the_weights_that_were_saved(ddp_run):
    """The ranks' parameter digests were all-gathered and equal, and equal the digest of the saved weights."""
    result, out = ddp_run
    match = re.search(r"ddp: weights identical on every rank \(sha256 ([0-9a-f]{12})\)", result.stdout)
    assert match, result.stdout
    state = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    saved = model_from_state(state, torch.device("cpu"))
    assert weights_digest(saved)[:12] == match.group(1)


@pytest.mark.slow
def test_only_rank_0_prints_the_run(ddp_run):
    """The device line, the epoch line and the summary appear once, not once per rank."""
    result, _ = ddp_run
    assert result.stdout.count("device: cpu, one of 2 ddp ranks") == 1
    assert result.stdout.count("epoch 1/1") == 1 and result.stdout.count("done: ") == 1


def test_ddp_without_torchrun_is_exit_2_naming_torchrun(tiny_data, tmp_path, capsys, monkeypatch):
    """An explicit --parallel ddp in a plain `python train.py` stops with one line on how to launch it."""
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "run"
    code = train.main(["--data", str(tiny_data), "--device", "cpu", "--parallel", "ddp", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "torchrun" in err[0]
    assert not out.exists()


@pytest.mark.cuda
@pytest.mark.skipif(CUDA_COUNT < 1, reason="needs a CUDA device")
def test_ddp_with_nccl_puts_each_rank_on_its_own_gpu(tiny_data, tmp_path):
    """On GPUs, `--device auto` gives rank r cuda:r, nccl carries the gradients, and the run finishes."""
    out = tmp_path / "run"
    result = torchrun(min(CUDA_COUNT, 2), "--device", "auto", "--parallel", "ddp", "--data", str(tiny_data),
                      "--image-size", "32", "--batch-size", "4", "--epochs", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "device: cuda:0" in result.stdout and "weights identical on every rank" in result.stdout
    assert sorted(path.name for path in out.iterdir()) == RUN_FILES
