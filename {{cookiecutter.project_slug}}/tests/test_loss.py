"""The loss's class weights are a buffer, so they follow the loss to any device."""

import torch

from {{ cookiecutter.package_name }}.task import WeightedCrossEntropy, balanced_class_weights


def test_class_weights_follow_the_loss_to_the_device(device):
    """After .to(device) the class weights are on that device and in its state_dict."""
    loss_fn = WeightedCrossEntropy(torch.tensor([1.0, 2.0, 3.0]), label_smoothing=0.1).to(device)
    assert loss_fn.class_weights.device == device
    assert "class_weights" in loss_fn.state_dict()


def test_loss_runs_on_the_device_and_is_float32(device):
    """Logits and targets on the device give a float32 scalar there (also for half logits)."""
    loss_fn = WeightedCrossEntropy(torch.ones(4)).to(device)
    logits = torch.randn(8, 4, device=device, dtype=torch.float16)
    targets = torch.zeros(8, dtype=torch.long, device=device)
    loss = loss_fn(logits, targets)
    assert loss.device == device and loss.dtype == torch.float32 and loss.dim() == 0


def test_balanced_weights_favour_rare_classes():
    """A class with fewer images gets a larger weight; weights average 1 over the samples."""
    counts = torch.tensor([30.0, 10.0])
    weights = balanced_class_weights(counts)
    assert weights[1] > weights[0]
    assert torch.isclose((weights * counts).sum() / counts.sum(), torch.tensor(1.0))
