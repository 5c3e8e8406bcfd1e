"""The task: the loss (its class weights are a buffer, so they follow it to any device) and the validation
metrics (counted on the device, summed over the processes, read back once)."""

import pytest
import torch

from {{ cookiecutter.package_name }} import task
from {{ cookiecutter.package_name }}.task import (
    Metrics,
    WeightedCrossEntropy,
    balanced_class_weights,
    build_loss,
    class_report,
    format_report,
)

META = torch.device("meta")


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


def test_f1_and_macro_f1_follow_their_definitions():
    """F1 = 2PR / (P + R) per class; a class never predicted and absent scores 0 and still counts in the mean."""
    matrix = torch.tensor([[2, 1, 0, 0], [0, 3, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    report = class_report(matrix)
    expected = [2 * p * r / (p + r) if p + r else 0.0 for p, r in zip(report.precision, report.recall)]
    assert report.f1 == pytest.approx(expected) and report.f1[2:] == [0.0, 0.0]
    assert report.macro_f1 == pytest.approx(sum(expected) / 4)
    table = format_report(report, ["a", "b", "c", "d"])
    [macro_line] = [line for line in table.splitlines() if line.startswith("macro-F1")]  # a project may add lines
    assert f"{report.macro_f1:.6f}" in macro_line and "f1" in table.splitlines()[0]


def test_top_k_counts_an_image_whose_class_is_among_its_k_most_probable(monkeypatch):
    """Top-2 hits: the true class first or second; top-5 is not reported with five classes or fewer."""
    logits = torch.tensor([[0.9, 0.5, 0.1], [0.1, 0.5, 0.9], [0.5, 0.9, 0.1], [0.9, 0.1, 0.5]])
    targets = torch.tensor([0, 0, 0, 1])  # first; third; second; third
    assert "top5_acc" not in Metrics(5, torch.device("cpu")).compute() and "top5" in Metrics(6, META).counts
    monkeypatch.setattr(task, "TOP_K", (2,))  # as a project that edits TOP_K has it
    metrics = Metrics(3, torch.device("cpu"))
    metrics.update(logits, targets)
    figures = metrics.compute()
    assert figures["acc"] == pytest.approx(1 / 4) and figures["top2_acc"] == pytest.approx(2 / 4)


def test_compute_sums_every_count_over_the_processes_before_reading_it():
    """`total` (Processes.total under ddp) is applied to every count: two ranks' halves give the whole."""
    logits, targets = torch.eye(6)[[0, 1, 2, 3, 4, 5, 0, 0]] * 5, torch.tensor([0, 1, 2, 3, 4, 5, 1, 1])
    whole, halves = Metrics(6, torch.device("cpu")), [Metrics(6, torch.device("cpu")) for _ in range(2)]
    whole.update(logits, targets)
    halves[0].update(logits[:4], targets[:4])
    halves[1].update(logits[4:], targets[4:])
    others = iter(halves[1].counts.values())  # compute sums the counts in their order
    figures = halves[0].compute(lambda counts: counts.add_(next(others)))
    assert figures == whole.compute() and figures["top5_acc"] == pytest.approx(6 / 8)


def test_the_loss_and_metrics_run_on_meta():
    """build_loss and Metrics.update allocate on the device they are given and never read it back (meta holds no
    data): the device suite's meta checks cover the task as a user changes it."""
    logits, targets = torch.randn(4, 8, device=META), torch.zeros(4, dtype=torch.long, device=META)
    loss = build_loss([3, 1, 2, 5, 1, 1, 1, 1], 0.1, META)(logits, targets)
    metrics = Metrics(8, META)
    metrics.update(logits, targets)
    assert loss.device == META and loss.dim() == 0
    assert all(count.device == META for count in metrics.counts.values()) and "top5" in metrics.counts
