"""Exact resume: train.py killed (SIGKILL, SIGTERM, Ctrl-C) at chosen moments ends where an uninterrupted run ends.

The moments are chosen with the tests' pause points (tests/paused_train.py, PAUSE_ENV_VAR): the process waits at
a named point ("step:2:1" = after epoch 2's first optimizer step, "save:last.pt:2" = epoch 2's
last.pt fully written to its temp file but not yet renamed into place, "save:last.pt:2:1" = the
same for the mid-epoch last.pt after epoch 2's first step, ...), says so on stderr, and the test
kills it there. Every process is a real `python train.py` on real files. The killed runs save a
mid-epoch checkpoint after every step (`--save-every-minutes`) and each restart is the very same
command with `--resume auto`, as a requeued job would be.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import HANG_S, nested_tensors
from run_helpers import (
    EPOCHS,
    assert_same_run,
    killed_at,
    load_cpu,
    start_train,
    train_command,
    wait_for,
)

import train
from {{ cookiecutter.package_name }}.config import TrainConfig, usable_cores

EVERY_STEP = ["--save-every-minutes", "1e-6"]  # a mid-epoch last.pt after every step

# (pause point, (epoch, step) that last.pt must hold once the process is killed there)
KILLS_WORKERS_0 = [
    ("step:1:2", (1, 1)),          # between steps: the checkpoint of step 1
    ("save:best.pt:1", (1, 3)),    # during the write of best.pt: last.pt is still the last step's
    ("save:last.pt:2:1", (1, 0)),  # during a mid-epoch write of last.pt: the old file survives whole
    ("saved:last.pt:2:3", (2, 3)), # the last step's checkpoint in place, before validation: no step left
    ("step:3:2", (3, 1)),
]
KILLS_WORKERS_2 = [
    ("step:1:1", (0, 0)),          # before the first save: only the epoch-0 checkpoint exists
    ("save:last.pt:2", (2, 3)),    # during the epoch-end write
    ("step:3:2", (3, 1)),
]


def _train(data: Path, out: Path, workers: int = 0, *, resume: bool | str = False, extra: tuple[str, ...] = ()) -> None:
    """Run train.py's main() to completion in this process (saves an interpreter start), on one thread too."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert train.main(train_command(data, out, workers, resume, extra)[2:]) == 0
    finally:
        torch.set_num_threads(threads)


def _kill_at(data: Path, out: Path, workers: int, pause: str, *, resume: bool | str,
             extra: tuple[str, ...] = (), threads: int = 1) -> None:
    """Start train.py (on `threads` by OMP_NUM_THREADS), SIGKILL it at `pause`."""
    log = out.parent / f"{out.name}-{pause.replace(':', '_')}.log"
    process = start_train(data, out, workers, resume=resume, pause=pause, log=log, extra=extra, threads=threads)
    try:
        wait_for(process, log, f"paused at {pause}")
    finally:
        process.kill()  # SIGKILL: no handler, no cleanup, no flush
        process.wait()


@pytest.fixture(scope="module")
def reference_run(tiny_data, tmp_path_factory) -> Path:
    """The run directory of one uninterrupted run."""
    out = tmp_path_factory.mktemp("reference") / "run"
    _train(tiny_data, out)
    return out


@pytest.fixture(scope="module")
def reference(reference_run) -> dict:
    """last.pt of the uninterrupted run."""
    state = load_cpu(reference_run / "last.pt")
    assert state["epoch"] == EPOCHS
    return state


def test_last_pt_holds_every_piece_as_plain_cpu_data(reference):
    """Model (plain keys), optimizer, scheduler, scaler, epoch, RNG states, config, classes, version; CPU only."""
    expected = {"model", "optimizer", "scheduler", "scaler", "epoch", "rng", "config", "class_names", "version"}
    assert expected <= reference.keys()
    assert {"python", "numpy", "torch", "cuda"} <= reference["rng"].keys()
    assert all(tensor.device.type == "cpu" for _, tensor in nested_tensors(reference))
    assert not any(key.startswith(("module.", "_orig_mod.")) for key in reference["model"])
    assert reference["class_names"] == ["circle", "cross", "square", "triangle"]


def test_last_pt_loads_with_plain_torch_and_no_gpu(reference_run):
    """A fresh interpreter that never imports this project, with CUDA hidden, loads last.pt weights_only."""
    code = ("import sys, torch; s = torch.load(sys.argv[1], weights_only=True); "
            "assert all(t.device.type == 'cpu' for t in s['model'].values()); print(s['epoch'])")
    result = subprocess.run([sys.executable, "-c", code, str(reference_run / "last.pt")], cwd=reference_run,
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, capture_output=True, text=True,
                            timeout=HANG_S)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == str(EPOCHS)


def _kill_chain(data: Path, out: Path, workers: int, kills: list[tuple[str, tuple[int, int]]]) -> None:
    """Run one `--resume auto` command, killing it at each moment in turn, check last.pt after each, then finish."""
    for pause, position in kills:
        _kill_at(data, out, workers, pause, resume="auto", extra=tuple(EVERY_STEP))
        state = load_cpu(out / "last.pt")
        assert (state["epoch"], state["step"]) == position, pause
    _train(data, out, workers, resume="auto", extra=tuple(EVERY_STEP))
    assert not list(out.glob(".*.tmp"))  # temp files of killed writes were cleaned up on resume


@pytest.mark.slow
def test_sigkill_at_five_moments_then_resume_auto_matches_an_uninterrupted_run(tiny_data, tmp_path, reference):
    """Killed between steps, mid-write of best.pt and of a mid-epoch last.pt, before validation: same final tensors."""
    _kill_chain(tiny_data, tmp_path / "run", 0, KILLS_WORKERS_0)
    assert_same_run(load_cpu(tmp_path / "run" / "last.pt"), reference)


@pytest.mark.slow
def test_sigkill_with_two_persistent_workers_then_resume_matches_an_uninterrupted_run(tiny_data, tmp_path, reference):
    """With --workers 2 (persistent workers) mid-epoch resume re-derives the rest of the epoch: same final tensors."""
    _kill_chain(tiny_data, tmp_path / "run", 2, KILLS_WORKERS_2)
    assert_same_run(load_cpu(tmp_path / "run" / "last.pt"), reference)


@pytest.mark.slow
def test_sigterm_saves_the_step_in_progress_exits_143_and_resumes_from_it(tiny_data, tmp_path, reference):
    """SIGTERM mid-epoch 2: exit 143, one line naming the resume, last.pt holds epoch 2 step 1; resuming ends exact."""
    out, log = tmp_path / "run", tmp_path / "term.log"
    process = start_train(tiny_data, out, 0, resume=False, pause="step:2:1", log=log)
    wait_for(process, log, "paused at step:2:1")
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=HANG_S) == 143
    text = log.read_text()
    assert "stopped by SIGTERM at epoch 2 step 1" in text and "--resume" in text and "Traceback" not in text
    state = load_cpu(out / "last.pt")
    assert (state["epoch"], state["step"]) == (2, 1) and state["epoch_totals"]["seen"] == 8
    _train(tiny_data, out, resume=True)
    resumed = load_cpu(out / "last.pt")
    assert_same_run(resumed, reference)
    # The resumed epoch's row covers the whole epoch, as the uninterrupted run's does.
    assert resumed["metrics"][1]["train_loss"] == pytest.approx(reference["metrics"][1]["train_loss"], rel=1e-6)


@pytest.mark.slow
def test_a_second_ctrl_c_aborts_at_once_and_leaves_last_pt_whole(tiny_data, tmp_path):
    """The first SIGINT asks politely; the second, while the first is still pending, exits 130 immediately."""
    out, log = tmp_path / "run", tmp_path / "int.log"
    process = start_train(tiny_data, out, 0, resume=False, pause="validate:1", log=log)
    wait_for(process, log, "paused at validate:1")
    process.send_signal(signal.SIGINT)
    wait_for(process, log, "Ctrl-C again")
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=HANG_S) == 130
    assert "Traceback" not in log.read_text()
    assert load_cpu(out / "last.pt")["epoch"] == 0


RECIPE_FLAGS = ("--accum-steps", "2", "--warmup-epochs", "1", "--clip-grad", "1.0", "--schedule", "step",
                "--step-epochs", "1", "--optimizer", "sgd", "--nesterov")


@pytest.mark.slow
def test_the_training_recipe_resumes_exactly_after_a_kill(tiny_data, tmp_path):
    """With accumulation, warmup, clipping and SGD on a step schedule: SIGKILL mid-epoch 2, resume, and the final
    tensors equal an uninterrupted run's (the fine_tuning answer's controls: tests/plugins/fine_tuning)."""
    reference_out, out, log = tmp_path / "reference", tmp_path / "run", tmp_path / "kill.log"
    _train(tiny_data, reference_out, extra=RECIPE_FLAGS)
    killed_at([*train_command(tiny_data, out, 0, False), *RECIPE_FLAGS], log, "step:2:1")
    assert load_cpu(out / "last.pt")["epoch"] == 1
    _train(tiny_data, out, resume=True, extra=RECIPE_FLAGS)  # one thread, as the others: same float sums
    resumed, reference = load_cpu(out / "last.pt"), load_cpu(reference_out / "last.pt")
    assert reference["optimizer"]["param_groups"][0]["nesterov"] and reference["scheduler"]["last_epoch"] == 2 * EPOCHS
    assert_same_run(resumed, reference)


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_to_the_process_group_with_loader_workers_saves_the_step_and_resumes_exactly(
        tiny_data, tmp_path, reference, signum, code):
    """SIGTERM (a scheduler, systemd, timeout) or SIGHUP (a closed terminal) sent to every process of the group,
    persistent loader workers included, mid-epoch 2: the workers live on, the run saves epoch 2 step 1 and exits
    143 / 129, and resuming with workers ends where an uninterrupted run ends."""
    out, log = tmp_path / "run", tmp_path / "group.log"
    process = start_train(tiny_data, out, 1, resume=False, pause="step:2:1", log=log, group=True)
    try:
        wait_for(process, log, "paused at step:2:1")
        os.killpg(process.pid, signum)
        assert process.wait(timeout=HANG_S) == code, log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    text = log.read_text()
    assert f"stopped by {signal.Signals(signum).name} at epoch 2 step 1" in text, text[-3000:]
    assert "Traceback" not in text and "killed by signal" not in text
    state = load_cpu(out / "last.pt")
    assert (state["epoch"], state["step"]) == (2, 1)
    _train(tiny_data, out, 1, resume=True)
    assert_same_run(load_cpu(out / "last.pt"), reference)


def test_resuming_a_finished_run_with_more_epochs_keeps_learning(tiny_data, tmp_path):
    """--resume DIR --epochs 3 after a finished 1-epoch run: the schedule spans the 3 epochs the run now has, so
    the lr of the first added epoch (metrics.csv) is above 0 and the run's loss still moves; the note says so."""
    from {{ cookiecutter.package_name }}.outputs import read_metrics

    out = tmp_path / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert train.main(train_command(tiny_data, out, 0, False, ("--epochs", "1"))[2:]) == 0
        first = load_cpu(out / "last.pt")
        assert train.main(train_command(tiny_data, out, 0, True, ("--epochs", "3"))[2:]) == 0
    finally:
        torch.set_num_threads(threads)
    rows = read_metrics(out / "metrics.csv")
    assert [row["epoch"] for row in rows] == [1, 2, 3]
    assert rows[0]["lr"] == 0.0 < rows[1]["lr"]  # the 1-epoch run had reached 0; its continuation has not
    weights = load_cpu(out / "last.pt")["model"]
    assert any(not torch.equal(weights[name], tensor) for name, tensor in first["model"].items())


def _choices() -> list[tuple[str, ...]]:
    """Every registered --optimizer and --schedule, paired so that each is in a run and no run is spent twice on one
    (a step schedule that drops every epoch, so the drop is seen)."""
    from {{ cookiecutter.package_name }}.training import optimization

    optimizers, schedules = list(optimization.OPTIMIZERS), list(optimization.SCHEDULES)
    pairs = [(optimizers[i % len(optimizers)], schedules[i % len(schedules)])
             for i in range(max(len(optimizers), len(schedules)))]
    return [("--optimizer", optimizer, "--schedule", schedule, *(("--step-epochs", "1") if schedule == "step" else ()))
            for optimizer, schedule in pairs]


@pytest.mark.slow
@pytest.mark.parametrize("choice", _choices(), ids=lambda choice: f"{choice[1]}-{choice[3]}")
def test_each_optimizer_and_schedule_resumes_exactly_after_a_kill(tiny_data, tmp_path, choice, request):
    """Each registered --optimizer and --schedule: SIGKILL mid-epoch 2 (after a save), resume, and the final tensors
    (the optimizer's own state included) and the schedule equal an uninterrupted run's."""
    reference_out, out = tmp_path / "reference", tmp_path / "run"
    if choice == ("--optimizer", TrainConfig.optimizer, "--schedule", TrainConfig.schedule):
        reference_out = request.getfixturevalue("reference_run")  # the defaults' run: the module's, trained once
    else:
        _train(tiny_data, reference_out, extra=choice)
    _kill_at(tiny_data, out, 0, "step:2:2", resume=False, extra=(*choice, *EVERY_STEP))
    assert (load_cpu(out / "last.pt")["epoch"], load_cpu(out / "last.pt")["step"]) == (2, 1)  # saved after step 1
    _train(tiny_data, out, resume=True, extra=choice)
    assert_same_run(load_cpu(out / "last.pt"), load_cpu(reference_out / "last.pt"))


@pytest.mark.slow
@pytest.mark.skipif(usable_cores() < 2, reason="needs two cores to choose between one thread and two")
def test_a_resumed_run_keeps_the_thread_count_it_chose_though_the_machine_now_suggests_another(
        tiny_data, tmp_path, monkeypatch, capsys):
    """Started on the default thread count (two here), killed, resumed where the default would be one: the
    resumed process keeps the run's two (as they change CPU sums' last bits) and ends where an unbroken run ends."""
    reference, out = tmp_path / "reference", tmp_path / "run"
    # Two epochs, killed in the last one: a mid-run resume as in the others, and two threads on a busy machine's two
    # cores wait on each other at every parallel region, so each epoch spared here counts.
    two_epochs = ("--epochs", "2")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the default's choice on an idle two-core machine
    _train(tiny_data, reference, 2, extra=two_epochs)
    _kill_at(tiny_data, out, 2, "step:2:1", resume=False, extra=two_epochs, threads=2)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # and on a busy one
    capsys.readouterr()
    _train(tiny_data, out, 2, resume="auto", extra=two_epochs)
    assert "torch threads: 2" in capsys.readouterr().out
    assert_same_run(load_cpu(out / "last.pt"), load_cpu(reference / "last.pt"))


def test_resuming_on_data_with_other_classes_is_one_line_and_exit_2(checkpoint, tiny_data, tmp_path, capsys):
    """--resume on data whose classes differ from the checkpoint's (one class folder renamed): exit 2, one line
    naming both class lists, and no run folder."""
    data = Path(shutil.copytree(tiny_data, tmp_path / "data"))
    for split in ("train", "val"):
        (data / split / "circle").rename(data / split / "disc")
    out = tmp_path / "run"
    code = train.main(["--resume", str(checkpoint), "--data", str(data), "--device", "cpu", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "was trained on classes" in err[0] and "'disc'" in err[0], err
    assert not out.exists()
