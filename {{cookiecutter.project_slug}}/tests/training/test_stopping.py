"""Stopping: on SIGINT/SIGTERM after a completed step, on a non-finite loss with the last good checkpoint kept, and
early (--patience) once validation has stopped improving."""

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
from {{ cookiecutter.package_name }}.outputs import read_metrics
from {{ cookiecutter.package_name }}.processes import Processes
from {{ cookiecutter.package_name }}.training import epochs, recipe, run_state
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


def test_epochs_without_improvement_counts_from_the_first_best_epoch():
    """A tie is no improvement; a plugin's validated weights (an `<name>_val_acc` column) count as the epoch's score."""
    def rows(*scores, **others):
        return [{"val_acc": score, **{key: values[i] for key, values in others.items()}}
                for i, score in enumerate(scores)]

    assert recipe.epochs_without_improvement([]) == 0
    assert recipe.epochs_without_improvement(rows(0.5)) == 0
    assert recipe.epochs_without_improvement(rows(0.5, 0.5, 0.4)) == 2
    assert recipe.epochs_without_improvement(rows(0.5, 0.4, 0.6, 0.6)) == 1
    assert recipe.epochs_without_improvement(rows(0.5, 0.4, 0.4, ema_val_acc=[0.3, 0.3, 0.7])) == 0


def _val_acc_of_epoch(monkeypatch, scores: dict[int, float]) -> None:
    """Train and validate for real, then report `scores[epoch]` as the epoch's val_acc: what the run does next
    is decided by these numbers, not by what a few tiny images happen to score."""
    real = epochs.run_epoch

    def run_epoch(run, epoch, out):
        return {**real(run, epoch, out), "val_acc": scores[epoch]}

    monkeypatch.setattr(epochs, "run_epoch", run_epoch)


def _epochs_in(out) -> list[int]:
    return [int(row["epoch"]) for row in read_metrics(out / "metrics.csv")]


def test_patience_stops_a_run_after_that_many_epochs_without_improvement(tiny_data, tmp_path, monkeypatch, capsys):
    """--patience 2 of --epochs 6: val_acc best at epoch 1 (a tie at 2 does not count as better), so the run ends
    after epoch 3, with exit 0, a line saying why, last.pt at epoch 3 and best.pt at epoch 1."""
    _val_acc_of_epoch(monkeypatch, {1: 0.5, 2: 0.5, 3: 0.4, 4: 0.9, 5: 0.9, 6: 0.9})
    out = tmp_path / "run"
    code = train.main(["--data", str(tiny_data), "--epochs", "6", "--patience", "2", "--out", str(out), *ARGS])
    printed = capsys.readouterr().out
    assert code == 0 and _epochs_in(out) == [1, 2, 3]
    assert "early stop: val_acc has not improved for 2 epochs (best 0.500)" in printed
    assert load_checkpoint(out / "last.pt")["epoch"] == 3 and load_checkpoint(out / "best.pt")["epoch"] == 1


def test_patience_counts_the_epochs_before_a_resume(tiny_data, tmp_path, monkeypatch, capsys):
    """A run that ended one epoch past its best, resumed for more epochs with --patience 2, stops after one more
    epoch without improvement: the count comes from the run's own metrics, not from the resume."""
    _val_acc_of_epoch(monkeypatch, {1: 0.5, 2: 0.4, 3: 0.4, 4: 0.4, 5: 0.4, 6: 0.4})
    out = tmp_path / "run"
    assert train.main(["--data", str(tiny_data), "--epochs", "2", "--patience", "2", "--out", str(out), *ARGS]) == 0
    assert "early stop" not in capsys.readouterr().out and _epochs_in(out) == [1, 2]
    assert train.main(["--data", str(tiny_data), "--epochs", "6", "--resume", str(out), *ARGS]) == 0
    assert "early stop: val_acc has not improved for 2 epochs" in capsys.readouterr().out
    assert _epochs_in(out) == [1, 2, 3]
