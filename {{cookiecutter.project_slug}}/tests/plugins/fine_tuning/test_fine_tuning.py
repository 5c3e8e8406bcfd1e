"""The fine_tuning answer's plugin: its settings join train.py's, its controls do what their flags say, the EMA
never waits for the device, and a run with all of them resumes exactly after a kill.

The controls are tested on the real Classifier (resnet18 at 32 px, or on meta for structure); the plugin's
hooks through the run's own step boundary (a stand-in Run, tests/host_reads.py) or a real train.py.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from conftest import TIMM_FAMILIES, nested_tensors
from host_reads import HostReads, epoch_reads, stand_in_run
from run_helpers import EPOCHS, assert_same_run, killed_at, load_cpu, train_command
from torch import nn
from torchvision import models

import train
from {{ cookiecutter.package_name }} import settings
from {{ cookiecutter.package_name }}.config import config_class
from {{ cookiecutter.package_name }}.devkit.checkpoint import CheckpointError, save_checkpoint
from {{ cookiecutter.package_name }}.errors import ConfigError
from {{ cookiecutter.package_name }}.model import Classifier, build_model, weights_file
from {{ cookiecutter.package_name }}.plugins.fine_tuning import PLUGIN, FineTuning
from {{ cookiecutter.package_name }}.plugins.fine_tuning.controls import (
    DeviceEMA,
    backbone_frozen,
    batch_mixer,
    freeze_backbone,
    parameter_groups,
)
from {{ cookiecutter.package_name }}.training import epochs, loop, run_state
from {{ cookiecutter.package_name }}.training.hardware import Hardware
from {{ cookiecutter.package_name }}.training.run import Run

CPU, META = torch.device("cpu"), torch.device("meta")
BACKBONE = "resnet18"  # has BatchNorm, cheap at 32 px
ALL_FLAGS = ("--ema", "0.9", "--accum-steps", "2", "--warmup-epochs", "1", "--mixup", "0.2", "--cutmix", "1.0",
             "--freeze-backbone", "--unfreeze-at", "2", "--backbone-lr-scale", "0.5", "--clip-grad", "1.0")


def _train(data, out, resume: bool = False, extra: tuple[str, ...] = ALL_FLAGS, workers: int = 0) -> None:
    """train.py's main() to completion in this process, on one thread (runs compared bit for bit need the same)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert train.main(train_command(data, out, workers, resume, extra)[2:]) == 0
    finally:
        torch.set_num_threads(threads)


def _model(device=CPU, classes=3, seed=0):
    torch.manual_seed(seed)
    return build_model(BACKBONE, classes, pretrained=False, device=device)


def test_the_settings_join_train_py_flags_and_are_checked():
    """--ema and the rest are TrainConfig fields of this project: typed, defaulted, refused when out of range."""
    cfg = settings.settle(["--ema", "0.5", "--freeze-backbone", "--unfreeze-at", "2"], [PLUGIN]).cfg
    assert (cfg.ema, cfg.freeze_backbone, cfg.unfreeze_at, cfg.mixup) == (0.5, True, 2, FineTuning.mixup)
    assert isinstance(cfg, config_class([PLUGIN])) and cfg.to_dict()["ema"] == 0.5
    for argv, says in ((["--ema", "2"], "--ema is a decay"), (["--unfreeze-at", "2"], "needs --freeze-backbone"),
                       (["--cutmix", "-1"], "--cutmix must not be negative"), (["--ema", "nan"], "finite")):
        with pytest.raises(ConfigError, match=says):
            settings.settle(argv, [PLUGIN])
    with pytest.raises(SystemExit):  # a project without the answer has no such flag: argparse's exit 2
        settings.settle(["--ema", "0.5"], [])


@pytest.mark.parametrize("backbone", [BACKBONE, *TIMM_FAMILIES])
def test_frozen_backbone_keeps_its_weights_and_batchnorm_statistics_while_the_head_learns(backbone):
    """Training steps with the backbone frozen change the head only: backbone weights and running stats stay."""
    torch.manual_seed(0)
    model = build_model(backbone, 3, pretrained=False, device=CPU, image_size=32)
    freeze_backbone(model, True)
    before = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    head_before = model.head.weight.detach().clone()
    optimizer = torch.optim.AdamW(parameter_groups(model, 1e-2), lr=1e-2)
    model.train()
    for _ in range(2):
        optimizer.zero_grad()
        F.cross_entropy(model(torch.randn(4, 3, 32, 32)), torch.tensor([0, 1, 2, 0])).backward()
        optimizer.step()
    assert all(torch.equal(before[k], v) for k, v in model.backbone.state_dict().items())
    assert not torch.equal(model.head.weight, head_before)
    assert not model.backbone.training and model.head.training


def test_a_frozen_own_module_is_frozen_whole_and_keeps_its_batchnorm_in_eval():
    """Your own module as the backbone (any nn.Module): all of it stops learning, its BatchNorm keeps its statistics."""
    own = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    model = Classifier(own, 4, 3)
    freeze_backbone(model, True)
    model.train()
    assert not any(p.requires_grad for p in model.backbone.parameters())
    assert all(p.requires_grad for p in model.head.parameters()) and not own[1].training


def test_unfreezing_restores_gradients_and_training_mode():
    """--unfreeze-at: from that epoch on, the backbone trains again (gradients, BatchNorm in training mode)."""
    model = _model(META)
    assert backbone_frozen(1, True, 3) and not backbone_frozen(3, True, 3)
    assert freeze_backbone(model, True) and not freeze_backbone(model, True)
    assert freeze_backbone(model, False)
    model.train()
    assert all(p.requires_grad for p in model.parameters()) and model.backbone.training


def test_unfreezing_at_its_epoch_rewraps_the_model_once():
    """DDP and torch.compile note which parameters train when they wrap: the epoch that unfreezes wraps again,
    and no other epoch does."""
    cfg = config_class([PLUGIN])(freeze_backbone=True, unfreeze_at=3)
    wraps = []
    run = stand_in_run(CPU, [PLUGIN], model=_model(META), cfg=cfg, class_names=list("abc"),
                       wrap=lambda: wraps.append(1))
    PLUGIN.build(run)
    assert not any(p.requires_grad for p in run.model.backbone.parameters())
    for epoch in (1, 2, 3, 4):
        PLUGIN.before_epoch(run, epoch)
        assert len(wraps) == (epoch >= 3), epoch
    assert all(p.requires_grad for p in run.model.parameters())


def test_backbone_and_head_get_their_own_learning_rates():
    """--backbone-lr-scale 0.1: two groups, every parameter in exactly one, the backbone at a tenth."""
    model = _model(META)
    groups = parameter_groups(model, 1e-3, backbone_lr_scale=0.1)
    assert [g["name"] for g in groups] == ["backbone", "head"]
    assert groups[0]["lr"] == pytest.approx(1e-4) and groups[1]["lr"] == 1e-3
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
    assert {id(p) for p in groups[1]["params"]} == {id(p) for p in model.head.parameters()}


@pytest.mark.parametrize("device", [CPU, META], ids=str)
def test_ema_copy_and_its_counter_are_born_on_the_models_device(device):
    """--ema: the averaged copy and AveragedModel's step counter sit beside the weights (meta included)."""
    ema = DeviceEMA(_model(device), decay=0.5)
    assert {t.device for t in [*ema.parameters(), *ema.buffers()]} == {device}


def test_the_ema_update_runs_on_the_meta_device_without_reading_its_counter():
    """The EMA's first-update copy is decided on the device: its update works where nothing can be read."""
    model = _model(META)
    ema = DeviceEMA(model, 0.9)
    ema.update_parameters(model)
    ema.update_parameters(model)
    assert ema.n_averaged.device == META


def test_the_ema_copies_first_then_follows_at_its_decay_for_every_buffer_too():
    """Same rule as torch's EMA: the first update copies weights and buffers, later ones move (1 - decay)."""
    model = _model()
    ema = DeviceEMA(model, 0.75)
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            tensor.add_(1)
    ema.update_parameters(model)
    assert all(torch.equal(a, b) for a, b in zip(ema.module.state_dict().values(), model.state_dict().values()))
    before = ema.module.head.weight.detach().clone()
    with torch.no_grad():
        model.head.weight.add_(4.0)
    ema.update_parameters(model)
    torch.testing.assert_close(ema.module.head.weight, 0.75 * before + 0.25 * model.head.weight)
    assert int(ema.n_averaged) == 2


def test_mixup_and_cutmix_give_soft_targets_for_the_whole_batch():
    """--mixup / --cutmix: torchvision's batch transforms turn (B,) labels into (B, C) probabilities."""
    assert batch_mixer(0.0, 0.0, 4) is None
    torch.manual_seed(0)
    for mixup, cutmix in ((0.2, 0.0), (0.0, 1.0), (0.2, 1.0)):
        images, targets = batch_mixer(mixup, cutmix, 4)(torch.randn(6, 3, 16, 16), torch.arange(6) % 4)
        assert images.shape == (6, 3, 16, 16) and targets.shape == (6, 4)
        assert torch.allclose(targets.sum(dim=1), torch.ones(6))


def test_the_ema_follows_each_optimizer_step_through_the_step_boundary_and_mixed_batches_count_labels(tiny_data):
    """With --ema, --accum-steps 2 and --mixup in a run's own step boundary: 3 batches make 2 optimizer steps and
    2 EMA updates, the EMA validates, and accuracy is measured against the original labels."""
    model = _model(classes=4)
    cfg = config_class([PLUGIN])(ema=0.9, mixup=0.4, accum_steps=2, progress="none")
    hw = Hardware.create(CPU)
    run = stand_in_run(CPU, [PLUGIN], model=model, cfg=cfg, class_names=list("abcd"), hw=hw,
                       loss_fn=nn.CrossEntropyLoss(), val_loader=[(torch.randn(4, 3, 32, 32), torch.arange(4))])
    PLUGIN.build(run)
    batches = [(torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 0])) for _ in range(3)]
    after_step = lambda step, totals: epochs.at_step_boundary(run, None, 1, step, totals)  # noqa: E731
    stats = loop.train_one_epoch(model, run.loss_fn, torch.optim.SGD(model.parameters(), lr=0.1), batches, hw,
                                 recipe=loop.StepRecipe(accum_steps=2, mix=run.mix),
                                 epoch=loop.EpochPlan(1, after_step=after_step), progress=False)
    row = {}
    PLUGIN.validated(run, row)
    assert int(PLUGIN.ema.n_averaged) == 2 and stats.images == 12 and 0.0 <= stats.acc <= 1.0
    assert set(row) == {"ema_val_loss", "ema_val_acc"}


def test_an_epoch_with_every_control_reads_the_device_as_often_with_twelve_steps_as_with_three(tiny_data,
                                                                                             monkeypatch):
    """The EMA's update after every step and its validation add no host read per step (nor do the two learning
    rates). MixUp/CutMix draw their mixing weight on the host (torchvision's), a CPU value, not a device read."""
    reads = HostReads(monkeypatch)
    options = {"plugins": [PLUGIN], "ema": 0.9, "backbone_lr_scale": 0.5}
    few, many = epoch_reads(tiny_data, CPU, 8, reads, **options), epoch_reads(tiny_data, CPU, 2, reads, **options)
    assert many == few, f"{many - few} more host reads for 9 more steps: a read per step crept in"
    assert int(PLUGIN.ema.n_averaged) == 12  # the plugin's EMA took every step of the last epoch


def test_plugin_state_is_refused_without_the_answer_and_checked_with_it(tiny_data, tmp_path):
    """The checkpoint says which plugin kept state in it: a project without fine_tuning stops with one line,
    rather than continuing without the EMA and the frozen backbone; one with it refuses an EMA state that is not
    one by name."""
    out = tmp_path / "run"
    _train(tiny_data, out, extra=("--ema", "0.9", "--epochs", "1"))
    assert load_cpu(out / "last.pt")["plugins"]["fine_tuning"]["ema"]["n_averaged"] > 0
    options = {"data": str(tiny_data), "out": str(out), "workers": 0, "batch_size": 8, "image_size": 32,
               "pretrained": False, "parallel": "none", "precision": "fp32"}  # whatever this project's defaults
    with pytest.raises(CheckpointError, match="used the fine_tuning plugin, which this project lacks"):
        Run(config_class([])(**options), CPU, plugins=[]).resume(run_state.read(out / "last.pt"), str(out))
    Run(config_class([PLUGIN])(**options, ema=0.9), CPU, plugins=[PLUGIN]).resume(run_state.read(out / "last.pt"),
                                                                                  str(out))  # its own
    state = load_cpu(out / "last.pt")
    for hostile in ([1], {"model": {}, "n_averaged": -1}, {"model": {}, "n_averaged": True}, {"n_averaged": 1}):
        state["plugins"]["fine_tuning"]["ema"] = hostile
        save_checkpoint(tmp_path / "edited.pt", state)
        with pytest.raises(CheckpointError, match="plugins.fine_tuning.ema is not the EMA's"):
            Run(config_class([PLUGIN])(**options, ema=0.9), CPU, plugins=[PLUGIN]).resume(
                run_state.read(tmp_path / "edited.pt"), str(tmp_path / "edited.pt"))


@pytest.mark.slow
def test_pretrained_frozen_backbone_ends_the_epoch_equal_to_the_weights_file(tiny_data, tmp_path):
    """--pretrained --freeze-backbone: after an epoch every backbone tensor (BatchNorm statistics included)
    equals the file in the hub cache; the head has learned."""
    path = weights_file(BACKBONE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.manual_seed(5)
    torch.save(models.get_model(BACKBONE, weights=None).state_dict(), path)
    assert train.main(["--data", str(tiny_data), "--backbone", BACKBONE, "--pretrained", "--freeze-backbone",
                       "--epochs", "1", "--image-size", "32", "--device", "cpu", "--batch-size", "8",
                       "--precision", "fp32", "--parallel", "none", "--out", str(tmp_path / "run")]) == 0
    pretrained = torch.load(path, map_location="cpu", weights_only=True)
    trained = torch.load(tmp_path / "run" / "last.pt", map_location="cpu", weights_only=True)["model"]
    backbone = {key.removeprefix("backbone."): value for key, value in trained.items() if key.startswith("backbone.")}
    assert backbone and all(torch.equal(value, pretrained[key]) for key, value in backbone.items())
    assert len(backbone) == len(pretrained) - 2  # all but the ImageNet classifier (fc.weight, fc.bias)


@pytest.mark.slow
@pytest.mark.parametrize("backbone", [BACKBONE, *TIMM_FAMILIES])
def test_every_control_resumes_exactly_after_a_kill(tiny_data, tmp_path, backbone):
    """With EMA, accumulation, warmup, mixup/cutmix, a backbone unfrozen at epoch 2, two learning rates and
    clipping, loader workers on: SIGKILL mid-epoch 2, resume, and the final tensors (EMA included) equal an
    uninterrupted run's; for a torchvision backbone and for timm's CNN, ViT and hybrid."""
    reference_out, out, log = tmp_path / "reference", tmp_path / "run", tmp_path / "kill.log"
    flags = (*ALL_FLAGS, "--backbone", backbone)
    _train(tiny_data, reference_out, extra=flags, workers=2)  # loader workers on, as users run it
    killed_at([*train_command(tiny_data, out, 2, False), *flags], log, "step:2:1")
    frozen = load_cpu(out / "last.pt")  # the end of epoch 1, the backbone frozen all through it
    assert frozen["epoch"] == 1
    _train(tiny_data, out, resume=True, extra=flags, workers=2)
    resumed, reference = load_cpu(out / "last.pt"), load_cpu(reference_out / "last.pt")
    assert reference["plugins"]["fine_tuning"]["ema"]["n_averaged"] == 2 * EPOCHS  # 3 batches of 8, two a step
    assert_same_run(resumed, reference)
    assert any(key.startswith("/plugins/fine_tuning/ema/model/") for key, _ in nested_tensors(resumed))
    backbone = [key for key in reference["model"] if key.startswith("backbone.") and key.endswith("weight")]
    assert any(not torch.equal(frozen["model"][key], reference["model"][key]) for key in backbone)  # unfrozen at 2
