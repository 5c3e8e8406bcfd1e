"""The ranks as the core sees them (DistributedProcesses): the validation figures of the whole split on every rank,
the per-step agreement kept on the host, and which GPU a rank may train on."""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from ddp_helpers import free_port, torchrun_env
from torch import nn

from {{ cookiecutter.package_name }}.metrics import new_confusion
from {{ cookiecutter.package_name }}.plugins.ddp import PLUGIN
from {{ cookiecutter.package_name }}.plugins.ddp.processes import DistributedProcesses
from {{ cookiecutter.package_name }}.processes import Processes
from {{ cookiecutter.package_name }}.training import epochs, loop, stopping, wrapping
from {{ cookiecutter.package_name }}.training.hardware import Hardware

CPU, META, CUDA1 = torch.device("cpu"), torch.device("meta"), torch.device("cuda", 1)


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


def _matrix(samples: list, processes: Processes) -> torch.Tensor:
    """The confusion matrix loop.evaluate fills from this process's share of the samples (as the run's loader)."""
    confusion = new_confusion(3, CPU)
    shard = processes.eval_indices(samples)
    loader = torch.utils.data.DataLoader(samples if shard is None else torch.utils.data.Subset(samples, shard),
                                         batch_size=4)
    loop.evaluate(Fixed(3), nn.CrossEntropyLoss(), loader, Hardware.create(CPU, processes=processes),
                  progress=False, confusion=confusion)
    return confusion


def _rank(rank: int, world: int, port: int, result_dir: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.pop("TORCHELASTIC_RESTART_COUNT", None)
    processes = DistributedProcesses(CPU)
    try:
        torch.save(_matrix(_dataset(), processes), os.path.join(result_dir, f"rank{rank}.pt"))
    finally:
        processes.close()


@pytest.mark.slow
def test_every_rank_gets_the_confusion_matrix_of_the_whole_split(tmp_path: Path):
    """Two gloo ranks, each evaluating its half of the images: both end with the matrix one process gets from all."""
    mp.spawn(_rank, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    whole = _matrix(_dataset(), Processes())
    assert whole.sum() == 24
    for rank in range(2):
        assert torch.equal(torch.load(tmp_path / f"rank{rank}.pt", map_location="cpu", weights_only=True), whole)


def test_the_ddp_step_agreement_keeps_its_flags_on_the_host(monkeypatch):
    """Under ddp the ranks agree on stop/save with host values: a run whose device cannot be read (meta) agrees."""
    torchrun_env(monkeypatch)
    processes = DistributedProcesses(CPU)
    try:
        run = types.SimpleNamespace(stop=stopping.StopRequest(), save_clock=stopping.SaveClock(0), device=META,
                                    plugins=[], processes=processes)
        totals = loop.RunningTotals.start(META)
        for step in (1, 2, 3):
            epochs.at_step_boundary(run, None, 1, step, totals)
        assert processes.max([0, 3]) == [0, 3]
    finally:
        processes.close()


def test_ddp_rank_must_train_on_its_own_gpu(fake_cuda, monkeypatch):
    """Under torchrun, LOCAL_RANK=0 asking for cuda:1 is refused: two ranks would share a GPU."""
    fake_cuda(free_gib=[10, 70])
    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "localhost",
                        "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)
    assert "local rank 0 must train on its own GPU, not cuda:1" in wrapping.why_not("ddp", CUDA1, [PLUGIN])
    assert wrapping.why_not("ddp", torch.device("cuda", 0), [PLUGIN]) is None
