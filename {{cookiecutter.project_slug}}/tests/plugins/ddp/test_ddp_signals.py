"""torchrun's ranks stopped by signals, resumed (also by another number of ranks), and refusing data that differs.

When SLURM stops a step (requeue, preemption, `scancel --signal=TERM`), slurmstepd sends SIGTERM to
every process of the step, torchrun included, and torchrun forwards one more to each worker a few
milliseconds later. The second one must not cut the save the first one asked for. The same signals
reach a run's process group from systemd, GNU timeout or a closed terminal. The full story on a real
cluster is the template's tests/test_slurm.py (and a scheduler=slurm project's docs/preemption.md).
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import HANG_S
from run_helpers import PAUSE_ENV_VAR, paused

PROJECT = Path(__file__).resolve().parents[3]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]  # torchrun with this interpreter (works in any venv)


@pytest.mark.slow
def test_sigterm_to_a_worker_then_to_torchrun_saves_that_step(tiny_data, tmp_path):
    """Worker paused after step 2 gets SIGTERM, torchrun 50 ms later: the worker saves epoch 1 step 2 and exits 143."""
    out, log = tmp_path / "run", tmp_path / "term.log"
    # resnet18: its 45 MB checkpoint takes a few hundred ms to write, so torchrun's copy lands mid-save
    command = paused([*TORCHRUN, "--standalone", "--nproc_per_node=1", "train.py", "--device", "cpu", "--parallel",
                      "ddp", "--data", str(tiny_data), "--image-size", "32", "--batch-size", "4", "--epochs", "1",
                      "--backbone", "resnet18", "--no-pretrained", "--workers", "0", "--out", str(out)])
    env = {**os.environ, "OMP_NUM_THREADS": "1", PAUSE_ENV_VAR: "step:1:2"}
    with open(log, "wb") as handle:
        process = subprocess.Popen(command, cwd=PROJECT, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        deadline = time.monotonic() + HANG_S
        while not (match := re.search(r"paused at step:1:2 \(rank 0, pid (\d+)\)", log.read_text())):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        os.kill(int(match.group(1)), signal.SIGTERM)  # slurmstepd's, to the worker
        time.sleep(0.05)
        os.kill(process.pid, signal.SIGTERM)  # slurmstepd's, to torchrun, which forwards one more to the worker
        process.wait(timeout=HANG_S)
    finally:
        if process.poll() is None:  # the test failed: take torchrun's workers down with it
            os.killpg(process.pid, signal.SIGKILL)
    text = log.read_text()
    # train.py prints this line and returns 143; torchrun itself exits 1 on SIGTERM (its SignalException)
    assert "stopped by SIGTERM at epoch 1 step 2" in text and "interrupted" not in text, text[-3000:]
    state = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    assert (state["epoch"], state["step"]) == (1, 2)


def _torchrun_2(data: Path, out: Path, *extra: str) -> list[str]:
    """Two CPU ranks under torchrun, each with a persistent loader worker, as a user's multi-process run has them."""
    return [*TORCHRUN, "--standalone", "--nproc_per_node=2", "train.py", "--device", "cpu", "--parallel", "ddp",
            "--data", str(data), "--image-size", "32", "--batch-size", "4", "--epochs", "2", "--seed", "3",
            "--no-pretrained", "--precision", "fp32", "--workers", "1", "--out", str(out), *extra]


def _run_group(command: list[str], log: Path, pause: str | None = None, signum: int | None = None) -> int:
    """Run `command` in a process group of its own; with `signum`, signal the whole group once at `pause`."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop(PAUSE_ENV_VAR, None)
    if pause:
        env[PAUSE_ENV_VAR], command = pause, paused(command)
    with open(log, "wb") as handle:
        process = subprocess.Popen(command, cwd=PROJECT, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        if signum is not None:
            deadline = time.monotonic() + HANG_S
            while log.read_text(errors="replace").count(f"paused at {pause}") < 2:  # both ranks there
                assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.05)
            os.killpg(process.pid, signum)  # torchrun, both ranks and their loader workers
        return process.wait(timeout=HANG_S)
    finally:
        if process.poll() is None:  # the test failed: take the whole group down with it
            os.killpg(process.pid, signal.SIGKILL)


@pytest.mark.slow
def test_sigterm_to_torchruns_process_group_with_loader_workers_saves_and_resumes_exactly(tiny_data, tmp_path):
    """torchrun, 2 ranks, 1 loader worker each: SIGTERM to the whole group mid-epoch 1 saves epoch 1 step 2 on the
    rank that writes, every rank says it stopped there, and resuming under torchrun ends bit-for-bit where an
    uninterrupted 2-rank run ends."""
    reference, out = tmp_path / "reference", tmp_path / "run"
    assert _run_group(_torchrun_2(tiny_data, reference), tmp_path / "reference.log") == 0
    _run_group(_torchrun_2(tiny_data, out), tmp_path / "term.log", pause="step:1:2", signum=signal.SIGTERM)
    text = (tmp_path / "term.log").read_text()
    # torchrun reports its own exit; each rank's line says the save happened at the step both agreed on
    assert "stopped by SIGTERM at epoch 1 step 2" in text and "killed by signal" not in text, text[-3000:]
    state = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    assert (state["epoch"], state["step"]) == (1, 2)
    assert _run_group(_torchrun_2(tiny_data, out, "--resume", str(out)), tmp_path / "resume.log") == 0
    resumed = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    expected = torch.load(reference / "last.pt", map_location="cpu", weights_only=True)
    assert resumed["epoch"] == expected["epoch"] == 2
    for name, tensor in expected["model"].items():
        assert torch.equal(resumed["model"][name], tensor), name


@pytest.mark.slow
def test_another_number_of_ranks_continues_a_mid_epoch_checkpoint_at_its_sample_with_the_schedule_rebuilt(
        tiny_data, tmp_path, capsys):
    """Stopped by SIGTERM after epoch 1's first step on 2 ranks: one process without ddp (another order) is refused
    with one line and exit 2; one ddp rank continues at the same sample (step 2 of its twice-as-long epoch) and
    the cosine spans the 3 epochs at that rank count: epoch 2 ends at a quarter of the lr, not 0."""
    import train
    from {{ cookiecutter.package_name }}.outputs import read_metrics

    out = tmp_path / "run"
    three = ("--epochs", "3", "--lr", "0.004")
    _run_group(_torchrun_2(tiny_data, out, *three), tmp_path / "term.log", pause="step:1:1", signum=signal.SIGTERM)
    state = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    assert (state["epoch"], state["step"], state["layout"]["world_size"]) == (1, 1, 2)
    alone = _torchrun_2(tiny_data, out, *three, "--resume", str(out))[5:]  # train.py and its flags
    alone[alone.index("--parallel") + 1] = "none"
    capsys.readouterr()
    assert train.main(alone[1:]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "saved mid-epoch by 2" in err[0], err
    one_rank = [arg if arg != "--nproc_per_node=2" else "--nproc_per_node=1"
                for arg in _torchrun_2(tiny_data, out, *three, "--resume", str(out))]
    assert _run_group(one_rank, tmp_path / "resume.log") == 0, (tmp_path / "resume.log").read_text()[-3000:]
    assert "resume: 1 ddp rank (the run had 2 ddp ranks)" in (tmp_path / "resume.log").read_text()
    rows = read_metrics(out / "metrics.csv")
    assert [row["epoch"] for row in rows] == [1, 2, 3]
    assert rows[1]["lr"] == pytest.approx(0.004 * 0.25) and rows[2]["lr"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.slow
def test_ranks_whose_data_differ_all_refuse_with_one_line_instead_of_hanging(tiny_data, tmp_path):
    """Two ranks under torchrun whose --data folders differ by one training image (a stale copy on one node): both
    refuse before training, each with one line naming rank 1 and the sizes, and the launch ends (no hang)."""
    other = tmp_path / "other"
    shutil.copytree(tiny_data, other)
    next(iter(sorted((other / "train").rglob("*.png")))).unlink()
    per_rank = tmp_path / "per_rank_data.py"  # the same command on every rank, each rank's own --data
    per_rank.write_text("import os, runpy, sys\n"
                        "sys.argv[sys.argv.index('--data') + 1] = os.environ['DATA_' + os.environ['RANK']]\n"
                        f"runpy.run_path({str(PROJECT / 'train.py')!r}, run_name='__main__')\n")
    command = [arg if arg != "train.py" else str(per_rank) for arg in _torchrun_2(tiny_data, tmp_path / "run")]
    log = tmp_path / "launch.log"
    env = {**os.environ, "DATA_0": str(tiny_data), "DATA_1": str(other),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT), os.environ.get("PYTHONPATH")]))}
    with open(log, "wb") as handle:
        process = subprocess.Popen(command, cwd=PROJECT, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        code = process.wait(timeout=HANG_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    text = log.read_text()
    # Both ranks write into one log at once, so their lines can interleave: count the messages, not the lines.
    assert code != 0 and text.count("ranks see different data") == 2, text[-3000:]
    assert text.count("rank 1 of 2 has 23 training") == 2
    assert not (tmp_path / "run" / "last.pt").exists()
