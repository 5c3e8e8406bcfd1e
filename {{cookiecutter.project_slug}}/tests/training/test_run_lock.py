"""A run folder belongs to one live run: an OS lock taken before anything is written, dying with its process."""

import os
import signal
import subprocess

import pytest
from conftest import HANG_S
from run_helpers import PROJECT, load_cpu, start_train, train_command, train_env, wait_for

from {{ cookiecutter.package_name }}.training import run_folder


def test_a_claimed_folder_cannot_be_claimed_again_until_released(tmp_path):
    """A second claim on a locked folder is a RunDirError naming it; once released, it is free at once."""
    plan = run_folder.Plan(tmp_path / "run", None)
    with run_folder.claim(plan) as folder:
        assert folder == tmp_path / "run"
        with pytest.raises(run_folder.RunDirError, match="in use by another training run"):
            with run_folder.claim(plan):
                pass
    with run_folder.claim(plan):
        pass


def test_timestamped_folders_are_created_exclusively(tmp_path):
    """Two runs planned on the same runs/<timestamp> get two folders: the second takes a suffix."""
    plan = run_folder.Plan(tmp_path / "runs" / "20250101-000000", None, link_latest=True)
    with run_folder.claim(plan) as first, run_folder.claim(plan) as second:
        assert first != second and first.is_dir() and second.is_dir()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork: POSIX only")
def test_a_forked_child_does_not_keep_the_folder_locked(tmp_path):
    """A process forked while the run holds its folder (a loader worker) drops its copy of the lock: once the run
    releases the folder, another claim succeeds while the child still lives."""
    plan = run_folder.Plan(tmp_path / "run", None)
    forked, release = os.pipe(), os.pipe()
    with run_folder.claim(plan):
        child = os.fork()
        if child == 0:  # the fork handlers have run: say so, then live on until the parent has claimed
            os.write(forked[1], b"1")
            os.read(release[0], 1)
            os._exit(0)
    try:
        os.read(forked[0], 1)
        with run_folder.claim(plan):
            pass
    finally:
        os.write(release[1], b"1")
        os.waitpid(child, 0)


def test_a_fresh_run_refuses_a_checkpoint_that_appeared_after_its_plan(tmp_path):
    """Under the lock, a fresh start checks again: a run that finished meanwhile is not overwritten."""
    plan = run_folder.Plan(tmp_path / "run", None)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "last.pt").write_bytes(b"another run's")
    with pytest.raises(run_folder.RunDirError, match="holds another run's checkpoints"):
        with run_folder.claim(plan):
            pass


@pytest.mark.slow
def test_a_second_train_py_on_a_live_runs_folder_is_refused(tiny_data, tmp_path):
    """Run A paused mid-epoch; run B on the same --out (--resume auto) gets one line and exit 2, A's files intact."""
    out = tmp_path / "run"
    log = tmp_path / "a.log"
    first = start_train(tiny_data, out, 0, resume=False, pause="step:1:1", log=log)
    try:
        wait_for(first, log, "paused at step:1:1")
        before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
        second = subprocess.run(train_command(tiny_data, out, 0, "auto"), cwd=PROJECT,
                                env=train_env(), capture_output=True, text=True, timeout=HANG_S)
        assert second.returncode == 2, second.stderr
        errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "in use by another training run" in errors[0]
        assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
        first.send_signal(signal.SIGTERM)  # A saves the step it is at and stops: its own files, its own run
        assert first.wait(timeout=HANG_S) == 143
    finally:
        first.kill()
    assert load_cpu(out / "last.pt")["step"] == 1


@pytest.mark.slow
def test_a_sigkilled_runs_folder_is_usable_again_at_once(tiny_data, tmp_path):
    """SIGKILL leaves no stale lock: --resume auto on the same folder runs to the end right away."""
    out = tmp_path / "run"
    log = tmp_path / "a.log"
    one_epoch = ("--epochs", "1")  # the point is the lock, not the training: as short as it gets
    first = start_train(tiny_data, out, 0, resume=False, pause="step:1:1", log=log, extra=one_epoch)
    try:
        wait_for(first, log, "paused at step:1:1")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=HANG_S)
    finally:
        first.kill()
    assert (out / run_folder.LOCK_FILE).exists()  # the file stays; the lock died with the process
    again = subprocess.run(train_command(tiny_data, out, 0, "auto", one_epoch), cwd=PROJECT, env=train_env(),
                           capture_output=True, text=True, timeout=HANG_S)
    assert again.returncode == 0, again.stderr
