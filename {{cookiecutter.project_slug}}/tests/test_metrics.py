"""Macro-F1 and per-class figures from the validation confusion matrix, summed over every ddp rank."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from {{ cookiecutter.package_name }}.metrics import class_report, format_report, new_confusion
from {{ cookiecutter.package_name }}.training import loop
from {{ cookiecutter.package_name }}.training.hardware import Hardware

CPU = torch.device("cpu")


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


class Fixed(nn.Module):
    """Predicts class (sum of the image's pixels) mod C: a deterministic, data-dependent classifier."""

    def __init__(self, classes: int):
        super().__init__()
        self.classes = classes
        self.dummy = nn.Parameter(torch.zeros(()))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        predicted = images.flatten(1).sum(dim=1).long() % self.classes  # (B,)
        return nn.functional.one_hot(predicted, self.classes).float() + self.dummy


def _dataset(classes: int = 3, count: int = 24) -> list[tuple[torch.Tensor, int]]:
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 4, (count, 3, 2, 2), generator=generator).float()
    return [(images[i], i % classes) for i in range(count)]


def _matrix(samples: list, rank: int = 0, world: int = 1) -> torch.Tensor:
    """The confusion matrix loop.evaluate fills from this rank's share of the samples."""
    confusion = new_confusion(3, CPU)
    shard = samples[rank::world]
    loader = torch.utils.data.DataLoader(shard, batch_size=4)
    loop.evaluate(Fixed(3), nn.CrossEntropyLoss(), loader, Hardware.create(CPU), progress=False, confusion=confusion)
    return confusion


def _rank(rank: int, world: int, init_file: str, result_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.save(_matrix(_dataset(), rank, world), os.path.join(result_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_every_rank_gets_the_confusion_matrix_of_the_whole_split(tmp_path: Path):
    """Two gloo ranks, each evaluating half the images: both end with the matrix one process gets from all."""
    mp.spawn(_rank, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    whole = _matrix(_dataset())
    assert whole.sum() == 24
    for rank in range(2):
        assert torch.equal(torch.load(tmp_path / f"rank{rank}.pt", map_location="cpu", weights_only=True), whole)
