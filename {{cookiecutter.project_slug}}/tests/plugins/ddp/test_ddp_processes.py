"""The ranks as the core sees them (DistributedProcesses): rank 0's decisions on every rank, the validation figures of
the whole split on every rank, the per-step agreement kept on the host, leaving the group while a gloo worker still
needs the GIL, and which GPU a rank may train on."""

from __future__ import annotations

import os
import time
import types

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import HANG_S
from ddp_helpers import free_port, torchrun_env
from torch import nn

from {{ cookiecutter.package_name }}.errors import ConfigError
from {{ cookiecutter.package_name }}.plugins.ddp import PLUGIN
from {{ cookiecutter.package_name }}.plugins.ddp.processes import DistributedProcesses
from {{ cookiecutter.package_name }}.processes import Processes
from {{ cookiecutter.package_name }}.task import Metrics
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
    metrics = Metrics(3, CPU)
    shard = processes.eval_indices(samples)
    loader = torch.utils.data.DataLoader(samples if shard is None else torch.utils.data.Subset(samples, shard),
                                         batch_size=4)
    loop.evaluate(Fixed(3), nn.CrossEntropyLoss(), loader, Hardware.create(CPU, processes=processes),
                  progress=False, metrics=metrics)
    return metrics.confusion


def _outcome(decide, processes: DistributedProcesses) -> str:
    """What `processes.decide(decide)` came to on this rank: the decision, or the error it raised."""
    try:
        return f"decided {processes.decide(decide)}"
    except Exception as error:
        return f"{type(error).__name__}: {error}"


def _refuse() -> None:
    raise ConfigError("--out runs/x is another run's folder")


def _crash() -> None:
    raise OSError("disk gone")


def _rank(rank: int, world: int, port: int, result_dir: str) -> None:
    """One rank of a real two-rank gloo job: its confusion matrix, and what rank 0's decisions came to here."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.pop("TORCHELASTIC_RESTART_COUNT", None)
    processes = DistributedProcesses(CPU)
    try:
        outcomes = [_outcome(lambda: f"rank {processes.rank}'s folder", processes),
                    _outcome(_refuse, processes), _outcome(_crash, processes)]
        torch.save({"confusion": _matrix(_dataset(), processes), "outcomes": outcomes,
                    "flags": processes.max([0, rank, 5 * (1 - rank)]), "gathered": processes.gather(f"rank {rank}")},
                   os.path.join(result_dir, f"rank{rank}.pt"))
    finally:
        processes.close()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[dict]:
    """What each rank of a two-rank gloo job (mp.spawn, a process each) saved."""
    results = tmp_path_factory.mktemp("two-ranks")
    mp.spawn(_rank, args=(2, free_port(), str(results)), nprocs=2, join=True)
    return [torch.load(results / f"rank{rank}.pt", map_location="cpu", weights_only=True) for rank in range(2)]


@pytest.mark.slow
def test_every_rank_gets_the_confusion_matrix_of_the_whole_split(two_ranks):
    """Two gloo ranks, each evaluating its half of the images: both end with the matrix one process gets from all."""
    whole = _matrix(_dataset(), Processes())
    assert whole.sum() == 24
    for saved in two_ranks:
        assert torch.equal(saved["confusion"], whole)


@pytest.mark.slow
def test_the_ranks_agree_on_each_flags_maximum_and_see_every_ranks_value(two_ranks):
    """A flag one rank raised (a stop signal, a save due) is every rank's after the per-step agreement."""
    assert [saved["flags"] for saved in two_ranks] == [[0, 1, 5]] * 2
    assert [saved["gathered"] for saved in two_ranks] == [["rank 0", "rank 1"]] * 2


@pytest.mark.slow
def test_rank_0_decides_for_every_rank_and_its_refusal_or_failure_reaches_them_all(two_ranks):
    """Rank 0's decision is every rank's; its refusal is every rank's one line; when it fails, the others fail too
    instead of waiting for a decision forever."""
    decided, refused, crashed = zip(*(saved["outcomes"] for saved in two_ranks))
    assert decided == ("decided rank 0's folder",) * 2
    assert refused == ("ConfigError: --out runs/x is another run's folder",) * 2
    assert crashed[0] == "OSError: disk gone" and crashed[1].startswith("ConfigError: rank 0 failed"), crashed


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


def _until_the_group_is_gone(_) -> None:
    """Python for a gloo worker to run after a collective (as when it frees tensors Python let go of): it needs the
    GIL until its rank has destroyed the group."""
    while dist.is_initialized():
        time.sleep(0.01)


def _leave(rank: int, port: int, attached) -> None:
    """One rank of a two-rank gloo job ending a run (DistributedProcesses.finish, then close): rank 0 leaves while its
    last collective's worker still has Python to run; rank 1 completes that collective once rank 0 has set it up."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.pop("TORCHELASTIC_RESTART_COUNT", None)
    processes = DistributedProcesses(CPU)
    try:
        processes.gather("digest")
        if rank == 0:  # the callback is attached before the collective can complete: a gloo worker runs it
            dist.all_reduce(torch.ones(1), async_op=True).get_future().then(_until_the_group_is_gone)
            attached.set()
        else:
            attached.wait(HANG_S)
            processes.total(torch.ones(1))
    finally:
        processes.close()


def test_a_rank_leaves_its_group_while_a_gloo_worker_still_needs_the_gil():
    """Closing returns while a gloo worker still needs the GIL (to free the last collective's tensors, or to run a
    callback): leaving the group must not hold the GIL while it waits for that worker. Before, a rank hung in
    destroy_process_group now and then right after its last agreement (seen on torch 2.4)."""
    context = mp.get_context("spawn")
    attached, port = context.Event(), free_port()
    ranks = [context.Process(target=_leave, args=(rank, port, attached)) for rank in range(2)]
    for rank in ranks:
        rank.start()
    for rank in ranks:
        rank.join(timeout=HANG_S)
    hung = [number for number, rank in enumerate(ranks) if rank.is_alive()]
    for number in hung:
        ranks[number].kill()
    assert not hung, f"ranks {hung} hung while leaving the process group"
    assert [rank.exitcode for rank in ranks] == [0, 0]


def test_ddp_rank_must_train_on_its_own_gpu(fake_cuda, monkeypatch):
    """Under torchrun, LOCAL_RANK=0 asking for cuda:1 is refused: two ranks would share a GPU."""
    fake_cuda(free_gib=[10, 70])
    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "localhost",
                        "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)
    assert "local rank 0 must train on its own GPU, not cuda:1" in wrapping.why_not("ddp", CUDA1, [PLUGIN])
    assert wrapping.why_not("ddp", torch.device("cuda", 0), [PLUGIN]) is None
