"""--optimizer and --schedule: every registered choice builds on any device, follows its epochs, is refused when
misused, and stands exactly where it stood after a resume, also one with more epochs or other steps per epoch."""

import dataclasses
import io

import pytest
import torch
from torch import nn

from {{ cookiecutter.package_name }} import settings, startup
from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.errors import ConfigError
from {{ cookiecutter.package_name }}.training import optimization

CPU, META = torch.device("cpu"), torch.device("meta")


def _model(device: torch.device = CPU) -> nn.Module:
    """A tiny stand-in with the Classifier's layout (backbone and head), built on `device`."""
    torch.manual_seed(0)
    with device:
        model = nn.Module()
        model.backbone, model.head = nn.Linear(4, 4), nn.Linear(4, 2)
    return model


def _cfg(**changes) -> TrainConfig:
    """Settings as train.py settles them: the chosen optimizer's own lr and weight decay unless given."""
    chosen = {"epochs": 3, "warmup_epochs": 1, "step_epochs": 1, **changes}
    own = optimization.OPTIMIZERS[chosen.get("optimizer", TrainConfig.optimizer)]
    return dataclasses.replace(TrainConfig(), **{"lr": own.lr, "weight_decay": own.weight_decay, **chosen})


def _lrs(scheduler, steps: int) -> list[float]:
    """The head's lr after each of `steps` optimizer steps (the first entry: before any)."""
    lrs = [scheduler.optimizer.param_groups[-1]["lr"]]
    for _ in range(steps):
        scheduler.optimizer.step()
        scheduler.step()
        lrs.append(scheduler.optimizer.param_groups[-1]["lr"])
    return lrs


@pytest.mark.parametrize("name", list(optimization.OPTIMIZERS))
@pytest.mark.parametrize("device", [CPU, META], ids=str)
def test_each_optimizer_builds_beside_the_weights_and_its_state_survives_a_checkpoint(name, device):
    """Every --optimizer builds over every parameter on the model's device (meta too), with its own defaults; on
    the CPU its state after a step loads weights_only into a fresh one and steps identically."""
    model = _model(device)
    optimizer = optimization.make_optimizer(model, _cfg(optimizer=name))
    assert [len(group["params"]) for group in optimizer.param_groups] == [len(list(model.parameters()))]
    assert optimizer.param_groups[-1]["lr"] == optimization.OPTIMIZERS[name].lr
    if device == META:
        return
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    twin = _model()
    twin.load_state_dict(model.state_dict())
    again = optimization.make_optimizer(twin, _cfg(optimizer=name))
    buffer.seek(0)
    again.load_state_dict(torch.load(buffer, map_location="cpu", weights_only=True))
    for net, opt in ((model, optimizer), (twin, again)):
        for p in net.parameters():
            p.grad = torch.full_like(p, 0.5)
        opt.step()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters(), strict=True))


@pytest.mark.parametrize("schedule", list(optimization.SCHEDULES))
def test_each_schedule_warms_up_then_never_rises_and_resumes_exactly_at_any_step(schedule):
    """After the linear warmup every --schedule stays positive up to its end and never rises; a scheduler
    rebuilt from a checkpoint taken after any step gives the very lrs of the uninterrupted one (bit for bit)."""
    steps_per_epoch, cfg = 4, _cfg(schedule=schedule)
    model = _model()
    scheduler = optimization.make_scheduler(optimization.make_optimizer(model, cfg), cfg, steps_per_epoch)
    saved, lrs = [], [scheduler.optimizer.param_groups[-1]["lr"]]
    for _ in range(cfg.epochs * steps_per_epoch):
        saved.append(scheduler.state_dict())
        lrs += _lrs(scheduler, 1)[1:]
    base = cfg.lr
    assert lrs[:steps_per_epoch] == pytest.approx([base * (k + 1) / steps_per_epoch for k in range(steps_per_epoch)])
    after = lrs[steps_per_epoch:-1]
    assert all(x > 0 for x in after) and all(b <= a for a, b in zip(after, after[1:]))
    for done, state in enumerate(saved):
        fresh = optimization.make_scheduler(optimization.make_optimizer(_model(), cfg), cfg, steps_per_epoch)
        optimization.restore_position(fresh, state, done)
        assert _lrs(fresh, len(lrs) - 1 - done) == lrs[done:], done


def test_step_schedule_drops_at_epoch_boundaries():
    """--schedule step --step-epochs 1 --step-gamma 0.5: the lr halves as each epoch ends, not in between."""
    cfg = _cfg(schedule="step", step_gamma=0.5, warmup_epochs=0)
    scheduler = optimization.make_scheduler(optimization.make_optimizer(_model(), cfg), cfg, 3)
    assert _lrs(scheduler, 6) == pytest.approx([cfg.lr] * 3 + [cfg.lr / 2] * 3 + [cfg.lr / 4])


def test_a_schedule_restored_into_a_longer_run_spans_the_epochs_the_run_now_has():
    """A finished 1-epoch cosine run resumed with --epochs 3: the schedule is the 3-epoch one at the end of epoch 1
    (lr above 0), not the old one that had reached 0; with twice the steps per epoch it stands at the same epoch."""
    short, long = _cfg(epochs=1, warmup_epochs=0), _cfg(epochs=3, warmup_epochs=0)
    finished = optimization.make_scheduler(optimization.make_optimizer(_model(), short), short, 4)
    assert _lrs(finished, 4)[-1] == pytest.approx(0.0, abs=1e-12)
    for steps_per_epoch in (4, 8):  # the same ranks, or half of them
        expected = optimization.make_scheduler(optimization.make_optimizer(_model(), long), long, steps_per_epoch)
        _lrs(expected, steps_per_epoch)
        resumed = optimization.make_scheduler(optimization.make_optimizer(_model(), long), long, steps_per_epoch)
        optimization.restore_position(resumed, finished.state_dict(), steps_per_epoch)
        assert resumed.get_last_lr() == expected.get_last_lr() and resumed.get_last_lr()[-1] > 0


@pytest.mark.parametrize("argv", [["--optimizer", "lion"], ["--schedule", "linear"], ["--momentum", "0.5"],
                                  ["--nesterov"], ["--optimizer", "sgd", "--momentum", "1.5"],
                                  ["--optimizer", "sgd", "--momentum", "0", "--nesterov"], ["--step-epochs", "2"],
                                  ["--schedule", "step", "--step-gamma", "0"],
                                  ["--schedule", "step", "--step-epochs", "0"]])
def test_bad_or_misplaced_optimisation_values_are_refused(argv):
    """An unknown name, a value out of range, or a flag for an optimizer or schedule not in use: refused."""
    with pytest.raises((ConfigError, SystemExit)):
        settings.settle(argv)


def test_sgd_brings_its_own_defaults_and_help_names_each_optimizers():
    """--optimizer sgd without --lr takes SGD's lr and weight decay; --help states both optimizers' defaults."""
    cfg = settings.settle(["--optimizer", "sgd", "--nesterov"]).cfg
    choice = optimization.OPTIMIZERS["sgd"]
    assert (cfg.lr, cfg.weight_decay, cfg.nesterov) == (choice.lr, choice.weight_decay, True)
    assert settings.settle(["--optimizer", "sgd", "--lr", "0.5"]).cfg.lr == 0.5
    text = " ".join(settings.get_args_parser().format_help().split())
    default = TrainConfig.optimizer
    assert f"(default: {optimization.OPTIMIZERS[default].lr:g})" in text
    assert all(f"--optimizer {name}: {choice.lr:g}" in text for name, choice in optimization.OPTIMIZERS.items()
               if name != default)


@pytest.mark.parametrize("argv", [["--optimizer", "sgd"], ["--schedule", "constant"]])
def test_resume_refuses_another_optimizer_or_schedule(argv):
    """They change what is trained: --resume with another one is refused by name."""
    saved = TrainConfig().to_dict()
    with pytest.raises(ConfigError, match=argv[0]):
        startup.own_settings(settings.settle(argv), saved, "runs/x/last.pt")
