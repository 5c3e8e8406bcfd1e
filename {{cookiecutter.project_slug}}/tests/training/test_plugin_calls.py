"""A user's plug-in that fails in a hook loses nothing the run had finished (training/plugin_calls.py).

The plug-in is written the way a user writes one: a module of their own that subclasses `Plugin` and hands it to
`train.main(argv, plugins=[...])`, run as its own process with loader workers on. Which hook fails (and when) is
the environment variable FAIL_AT ("after_step:2:1" = after epoch 2's first optimizer step); unset, it never fails:
the user's fixed plug-in, rerun with the same command line.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import HANG_S
from run_helpers import EPOCHS, PROJECT, assert_same_run, load_cpu, train_command, train_env

import train

WORKERS = 1

USER_PLUGIN = '''
import os
import sys

import train
from {{ cookiecutter.package_name }}.plugins import Plugin


class Flaky(Plugin):
    """A user's callback with a bug that shows at one moment of the run."""

    name = "my_callback"

    def __init__(self):
        hook, self.epoch, self.step = (os.environ.get("FAIL_AT") or "never:0:0").split(":")
        self.hook, self.epoch, self.step = hook, int(self.epoch), int(self.step)

    def fail(self, hook, epoch=0, step=0):
        if (hook, epoch, step) == (self.hook, self.epoch, self.step):
            raise KeyError(f"{hook} went wrong")

    def start(self, run, out):
        self.fail("start")

    def before_epoch(self, run, epoch):
        self.fail("before_epoch", epoch)

    def after_step(self, run, epoch, step):
        self.fail("after_step", epoch, step)

    def validated(self, run, row):
        self.fail("validated", row["epoch"])

    def after_epoch(self, run, row):
        self.fail("after_epoch", row["epoch"])

    def close(self, run):
        self.fail("close")


if __name__ == "__main__":
    sys.exit(train.main(sys.argv[1:], plugins=[Flaky()]))
'''


def _run_user_script(script: Path, data: Path, out: Path, fail_at: str | None, resume: bool = False):
    """The user's script as its own process (their plug-in installed), loader workers on."""
    command = [arg if arg != "train.py" else str(script) for arg in train_command(data, out, WORKERS, resume)]
    env = {**train_env(), "PYTHONPATH": str(PROJECT)}
    env.pop("FAIL_AT", None)
    if fail_at:
        env["FAIL_AT"] = fail_at
    return subprocess.run(command, cwd=script.parent, env=env, capture_output=True, text=True, timeout=HANG_S)


@pytest.fixture
def script(tmp_path) -> Path:
    (tmp_path / "my_train.py").write_text(USER_PLUGIN)
    return tmp_path / "my_train.py"


@pytest.fixture(scope="module")
def reference(tiny_data, tmp_path_factory) -> dict:
    """last.pt of one uninterrupted run with the same settings."""
    out = tmp_path_factory.mktemp("reference") / "run"
    assert train.main(train_command(tiny_data, out, WORKERS, False)[2:]) == 0
    return load_cpu(out / "last.pt")


def _one_error(result) -> str:
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    return errors[0]


@pytest.mark.slow
@pytest.mark.parametrize(("fail_at", "held"), [
    ("after_step:2:1", (2, 1)),   # the steps trained in epoch 2 are kept
    ("validated:2:0", (2, 0)),    # the validated epoch is kept whole
])
def test_a_plugin_failing_mid_run_saves_what_was_trained_and_resumes_exactly(tiny_data, tmp_path, script,
                                                                             reference, fail_at, held):
    """Exit 1 with one line naming the plug-in and how to continue; last.pt holds the point of the failure, as a
    SIGTERM there would have saved it; --resume (the plug-in fixed) ends bit for bit where an unbroken run ends."""
    out = tmp_path / "run"
    failed = _run_user_script(script, tiny_data, out, fail_at)
    assert failed.returncode == 1, failed.stderr
    line = _one_error(failed)
    assert "my_callback" in line and "went wrong" in line and f"--resume {out}" in line
    state = load_cpu(out / "last.pt")
    assert (state["epoch"], state["step"]) == held
    resumed = _run_user_script(script, tiny_data, out, None, resume=True)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(load_cpu(out / "last.pt"), reference)


@pytest.mark.slow
def test_a_plugin_failing_in_close_after_a_complete_run_is_a_warning(tiny_data, tmp_path, script):
    """The run finished and its files are written: exit 0, a warning naming the plug-in."""
    out = tmp_path / "run"
    result = _run_user_script(script, tiny_data, out, "close:0:0")
    assert result.returncode == 0, result.stderr
    assert "warning: plugin my_callback failed in close" in result.stderr and "error" not in result.stderr
    assert load_cpu(out / "last.pt")["epoch"] == EPOCHS and (out / "metrics.csv").is_file()


@pytest.mark.slow
def test_a_plugin_failing_before_the_first_step_leaves_the_folder_to_the_same_command(tiny_data, tmp_path, script):
    """Nothing was trained: exit 1, one line; the identical command (the plug-in fixed) then trains in that folder,
    with no "--out holds a checkpoint" refusal and no lock left behind."""
    out = tmp_path / "run"
    failed = _run_user_script(script, tiny_data, out, "before_epoch:1:0")
    assert failed.returncode == 1, failed.stderr
    assert "my_callback" in _one_error(failed)
    again = _run_user_script(script, tiny_data, out, None)
    assert again.returncode == 0, again.stderr
    assert load_cpu(out / "last.pt")["epoch"] == EPOCHS
    assert not [name for name in os.listdir(out) if name.endswith(".tmp")]
