"""The signals a SLURM job step gets, without SLURM: a SIGTERM to every process, then torchrun's copy.

When SLURM stops a step (requeue, preemption, `scancel --signal=TERM`), slurmstepd sends SIGTERM to
every process of the step, torchrun included, and torchrun forwards one more to each worker a few
milliseconds later. The second one must not cut the save the first one asked for. The full story,
on a real cluster, is the template's tests/test_slurm.py and docs/preemption.md.
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import HANG_S

from {{ cookiecutter.package_name }}.training.pause_points import PAUSE_ENV_VAR
from {{ cookiecutter.package_name }}.training.stopping import StopRequest, TrainingInterrupted

PROJECT = Path(__file__).resolve().parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]  # torchrun with this interpreter (works in any venv)


def test_a_repeated_sigterm_changes_nothing_but_a_later_sigint_aborts():
    """SIGTERM twice is one stop request (exit 143 at the next check); Ctrl-C after it still aborts at once."""
    stop = StopRequest()
    with stop.installed():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)  # handlers run between bytecodes: let both run inside this block
        except KeyboardInterrupt:
            pytest.fail("the repeated SIGTERM aborted (KeyboardInterrupt)")
        with pytest.raises(TrainingInterrupted) as caught:
            stop.check(1, 2)
        assert caught.value.exit_code == 143
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs between bytecodes: give it one


@pytest.mark.slow
def test_sigterm_to_a_worker_then_to_torchrun_saves_that_step(tiny_data, tmp_path):
    """Worker paused after step 2 gets SIGTERM, torchrun 50 ms later: the worker saves epoch 1 step 2 and exits 143."""
    out, log = tmp_path / "run", tmp_path / "term.log"
    # resnet18: its 45 MB checkpoint takes a few hundred ms to write, so torchrun's copy lands mid-save
    command = [*TORCHRUN, "--standalone", "--nproc_per_node=1", "train.py", "--device", "cpu", "--parallel", "ddp",
               "--data", str(tiny_data), "--image-size", "32", "--batch-size", "4", "--epochs", "1",
               "--backbone", "resnet18", "--no-pretrained", "--workers", "0", "--out", str(out)]
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
