"""One training step and one evaluation pass on a real (tiny) model and real data."""

import math

import torch

from {{ cookiecutter.package_name }}.data.folders import load_splits
from {{ cookiecutter.package_name }}.data.loaders import build_loader
from {{ cookiecutter.package_name }}.model import build_model
from {{ cookiecutter.package_name }}.task import WeightedCrossEntropy
from {{ cookiecutter.package_name }}.training.hardware import Hardware
from {{ cookiecutter.package_name }}.training.loop import evaluate, train_one_epoch

CPU = torch.device("cpu")


def _setup(tiny_data):
    train_set, val_set = load_splits(tiny_data, image_size=32)
    model = build_model("{{ cookiecutter.backbone }}", 4, pretrained=False, device=CPU)
    loss_fn = WeightedCrossEntropy(torch.ones(4)).to(CPU)
    return model, loss_fn, train_set, val_set


def test_a_training_epoch_has_a_finite_loss_and_changes_the_weights(tiny_data):
    """Training updates the weights and reports a finite loss over every image."""
    torch.manual_seed(0)
    model, loss_fn, train_set, _ = _setup(tiny_data)
    before = model.head.weight.detach().clone()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    stats = train_one_epoch(model, loss_fn, optimizer, build_loader(train_set, 12, CPU, train=True),
                            Hardware.create(CPU), progress=False)
    assert math.isfinite(stats.loss) and stats.images == len(train_set)
    assert not torch.equal(before, model.head.weight)


def test_evaluation_changes_nothing_and_counts_every_image(tiny_data):
    """Evaluation is gradient-free and leaves the model's weights and BN statistics alone."""
    model, loss_fn, _, val_set = _setup(tiny_data)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats = evaluate(model, loss_fn, build_loader(val_set, 5, CPU, train=False), Hardware.create(CPU), progress=False)
    assert stats.images == len(val_set) and 0.0 <= stats.acc <= 1.0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
