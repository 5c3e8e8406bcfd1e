"""The training recipe in every project: warmup + cosine, accumulation, clipping, init from a checkpoint."""

import io

import pytest
import torch

import train
from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.model import build_model
from {{ cookiecutter.package_name }}.training import optimization, recipe
from {{ cookiecutter.package_name }}.training.hardware import Hardware
from {{ cookiecutter.package_name }}.training.loop import StepRecipe, train_one_epoch

CPU, META = torch.device("cpu"), torch.device("meta")
BACKBONE = "resnet18"  # has BatchNorm, cheap at 32 px


def _model(device=CPU, classes=3, seed=0):
    torch.manual_seed(seed)
    return build_model(BACKBONE, classes, pretrained=False, device=device)


def test_warmup_rises_linearly_then_cosine_decays_to_zero_and_the_schedule_survives_a_checkpoint():
    """--warmup-epochs: lr climbs to its base over the warmup steps, then follows a cosine to zero;
    the scheduler's state is plain numbers that load with weights_only."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    scheduler = optimization.make_scheduler(optimizer, TrainConfig(warmup_epochs=4, epochs=12), steps_per_epoch=1)
    lrs = [optimizer.param_groups[0]["lr"]]
    for _ in range(12):
        optimizer.step()
        scheduler.step()
        lrs.append(optimizer.param_groups[0]["lr"])
    assert lrs[:5] == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0])
    assert lrs[8] == pytest.approx(0.5) and lrs[12] == pytest.approx(0.0, abs=1e-12)
    buffer = io.BytesIO()
    torch.save(scheduler.state_dict(), buffer)
    buffer.seek(0)
    fresh = optimization.make_scheduler(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0),
                                        TrainConfig(warmup_epochs=1, epochs=2), steps_per_epoch=1)
    fresh.load_state_dict(torch.load(buffer, map_location="cpu", weights_only=True))
    assert fresh.get_last_lr() == scheduler.get_last_lr()


def test_init_from_another_label_set_copies_the_backbone_and_keeps_a_fresh_head():
    """--init-from a run with other classes: backbone weights copied, head left as built (its shape differs)."""
    source = _model(classes=5, seed=1)
    target = _model(classes=3, seed=2)
    head_before = target.head.weight.detach().clone()
    fresh = recipe.init_from_state(target, source.state_dict())
    assert fresh == ["head.weight", "head.bias"]
    assert torch.equal(target.backbone.conv1.weight, source.backbone.conv1.weight)
    assert torch.equal(target.head.weight, head_before)
    same_classes = _model(classes=5, seed=3)
    assert recipe.init_from_state(same_classes, source.state_dict()) == []
    assert torch.equal(same_classes.head.weight, source.head.weight)


def _tiny_linear(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 3))


def _epoch(model, batches, lr=0.5, **options):
    """One epoch of `batches`; `options` are StepRecipe fields (accum_steps, clip_grad, mix) or loop flags."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    step_recipe = StepRecipe(**{k: options.pop(k) for k in ("accum_steps", "clip_grad", "mix") if k in options})
    return train_one_epoch(model, torch.nn.CrossEntropyLoss(), optimizer, batches, Hardware.create(CPU),
                           recipe=step_recipe, progress=False, **options)


def test_accumulating_two_half_batches_takes_the_step_of_one_full_batch():
    """--accum-steps 2 over batches of 4 updates the weights as one batch of 8 would."""
    torch.manual_seed(0)
    images, labels = torch.randn(8, 3, 4, 4), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    whole, halves = _tiny_linear(), _tiny_linear()
    _epoch(whole, [(images, labels)])
    _epoch(halves, [(images[:4], labels[:4]), (images[4:], labels[4:])], accum_steps=2)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(whole.parameters(), halves.parameters()))
    unaccumulated = _tiny_linear()
    _epoch(unaccumulated, [(images[:4], labels[:4]), (images[4:], labels[4:])])
    assert not torch.allclose(unaccumulated[1].weight, whole[1].weight)


def test_clipping_bounds_the_step_by_the_gradient_norm():
    """--clip-grad 0.01 with SGD at lr 1: no step moves the weights further than 0.01."""
    model = _tiny_linear()
    before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    _epoch(model, [(torch.randn(4, 3, 4, 4) * 100, torch.tensor([0, 1, 2, 0]))], lr=1.0, clip_grad=0.01)
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert 0 < (after - before).norm() <= 0.01 + 1e-6


def _run(args: list[str], out) -> int:
    return train.main([*args, "--device", "cpu", "--batch-size", "8", "--precision", "fp32", "--parallel", "none",
                       "--out", str(out)])


@pytest.mark.slow
def test_init_from_a_run_on_other_classes_trains_with_a_fresh_head(tiny_data, tmp_path, capsys):
    """A run on 4 classes seeds one on 2 classes held as plain class folders (split by --val-split):
    the head is new, the split is recorded in config.json, and evaluate.py sees the same split."""
    import json
    import shutil

    import evaluate

    assert _run(["--data", str(tiny_data), "--epochs", "1", "--image-size", "32"], tmp_path / "source") == 0
    flat = tmp_path / "two"
    for name in ("circle", "square"):
        shutil.copytree(tiny_data / "train" / name, flat / name)
    assert _run(["--data", str(flat), "--epochs", "1", "--init-from", str(tmp_path / "source" / "last.pt")],
                tmp_path / "run") == 0
    out = capsys.readouterr().out
    assert "a fresh head.weight, head.bias" in out and "image size: 32 px" in out
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())
    assert recorded["val_split"] == 0.2 and recorded["class_names"] == ["circle", "square"]
    assert evaluate.main([str(tmp_path / "run" / "last.pt"), "--data", str(flat), "--device", "cpu",
                          "--out", str(tmp_path / "cm.png")]) == 0
    assert "(2 images, 2 classes" in capsys.readouterr().out  # one of each class's 6 images validates
