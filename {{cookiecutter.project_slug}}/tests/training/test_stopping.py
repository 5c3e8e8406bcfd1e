"""Stopping: on SIGINT/SIGTERM after a completed step, and on a non-finite loss with the last good checkpoint kept."""

import os
import signal
import time
import types
from unittest import mock

import pytest
import torch

import train
from {{ cookiecutter.package_name }}.data.folders import load_splits
from {{ cookiecutter.package_name }}.data.loaders import build_loader
from {{ cookiecutter.package_name }}.devkit.checkpoint import load_checkpoint, save_checkpoint
from {{ cookiecutter.package_name }}.model import build_model
from {{ cookiecutter.package_name }}.processes import Processes
from {{ cookiecutter.package_name }}.training import epochs, run_state
from {{ cookiecutter.package_name }}.training.hardware import Hardware
from {{ cookiecutter.package_name }}.training.loop import NonFiniteLossError, RunningTotals, train_one_epoch
from {{ cookiecutter.package_name }}.training.stopping import SaveClock, StopRequest, TrainingInterrupted

CPU = torch.device("cpu")
ARGS = ["--device", "cpu", "--batch-size", "8", "--image-size", "32", "--no-pretrained",
        "--precision", "fp32", "--parallel", "none"]


def test_the_first_signal_only_raises_a_flag_and_the_step_boundary_stops(tmp_path):
    """SIGTERM sets the flag and nothing else; the next step boundary saves that step and raises
    TrainingInterrupted with exit code 143."""
    saved = []
    run = types.SimpleNamespace(plugins=[], processes=Processes(), stop=StopRequest(), save_clock=SaveClock(0),
                                hw=Hardware.create(CPU), state=lambda epoch, step, totals: (epoch, step))
    with run.stop.installed():
        epochs.at_step_boundary(run, tmp_path, 1, 1, RunningTotals.start(CPU))  # nothing requested yet
        os.kill(os.getpid(), signal.SIGTERM)
        assert run.stop()
        with mock.patch.object(run_state, "save", lambda path, state: saved.append((path.name, state))):
            with pytest.raises(TrainingInterrupted) as caught:
                epochs.at_step_boundary(run, tmp_path, 2, 3, RunningTotals.start(CPU))
    assert caught.value.exit_code == 143 and (caught.value.epoch, caught.value.step) == (2, 3)
    assert saved == [("last.pt", (2, 3))]


def test_a_second_signal_aborts_at_once_and_handlers_are_restored():
    """A second SIGINT raises KeyboardInterrupt in the handler; after the block the old handler is back."""
    before = signal.getsignal(signal.SIGINT)
    stop = StopRequest()
    with pytest.raises(KeyboardInterrupt):
        with stop.installed():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before and stop.signum == signal.SIGINT


def test_a_repeated_sigterm_changes_nothing_but_a_later_sigint_aborts():
    """SIGTERM twice is one stop request (exit 143 when the run stops); Ctrl-C after it still aborts at once.

    Schedulers send SIGTERM more than once (under SLURM, slurmstepd's and torchrun's copy milliseconds apart):
    the second must not cut the save the first asked for."""
    stop = StopRequest()
    with stop.installed():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)  # handlers run between bytecodes: let both run inside this block
        except KeyboardInterrupt:
            pytest.fail("the repeated SIGTERM aborted (KeyboardInterrupt)")
        assert stop() and stop.signum == signal.SIGTERM
        assert TrainingInterrupted(stop.signum, 1, 2).exit_code == 143
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs between bytecodes: give it one


class _NaNFromStep:
    """Cross-entropy that turns NaN from the given 1-based step on (the stimulus, not the thing tested)."""

    def __init__(self, bad_step: int):
        self.bad_step, self.calls = bad_step, 0

    def __call__(self, logits, targets):
        self.calls += 1
        loss = torch.nn.functional.cross_entropy(logits, targets)
        return loss * float("nan") if self.calls >= self.bad_step else loss


def test_a_non_finite_loss_names_its_epoch_and_step(tiny_data):
    """The first NaN step is named exactly, even though it is read back only at the end of the epoch."""
    train_set, _ = load_splits(tiny_data, image_size=32)
    model = build_model("{{ cookiecutter.backbone }}", 4, pretrained=False, device=CPU)
    with pytest.raises(NonFiniteLossError, match=r"epoch 4 step 2\b"):
        train_one_epoch(model, _NaNFromStep(2), torch.optim.SGD(model.parameters(), lr=0.1),
                        build_loader(train_set, 4, CPU, train=True), Hardware.create(CPU), epoch=4, progress=False)


@pytest.mark.slow
def test_a_non_finite_loss_exits_1_with_one_line_and_keeps_last_pt(tiny_data, tmp_path, capsys):
    """Resuming weights that give NaN: exit 1, one stderr line naming epoch 2 step 1, last.pt byte-identical."""
    out = tmp_path / "run"
    assert train.main(["--data", str(tiny_data), "--epochs", "1", "--out", str(out), *ARGS]) == 0
    state = load_checkpoint(out / "last.pt")
    state["model"]["head.weight"].fill_(3e38)  # finite (a NaN or inf weight is refused on reading), logits overflow
    save_checkpoint(out / "last.pt", state)
    before = (out / "last.pt").read_bytes()
    capsys.readouterr()
    code = train.main(["--data", str(tiny_data), "--epochs", "2", "--out", str(out), "--resume", str(out), *ARGS])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert code == 1
    assert len(err) == 1 and "non-finite loss at epoch 2 step 1" in err[0]
    assert (out / "last.pt").read_bytes() == before
