"""Past two nodes without the nodes: the sampler's sharding, the resume arithmetic and the data agreement at 8, 64
and 256 ranks, computed with the very DistributedSampler and functions a run uses (no processes, no group)."""

import math
import shutil

import pytest
import torch
from torch.utils.data import DistributedSampler

from {{ cookiecutter.package_name }}.data.sampling import EpochSampler
from {{ cookiecutter.package_name }}.plugins.ddp import data_agreement, layout
from {{ cookiecutter.package_name }}.processes import ResumeLayoutError
from {{ cookiecutter.package_name }}.training.optimization import optimizer_steps_per_epoch

SEED, EPOCH, BATCH, ACCUM = 3, 2, 2, 1
SAMPLES = 256 * BATCH * 12  # whole batches on every rank at every world size: no padding to tell apart
ODD = 6001  # padded by DistributedSampler at every world size
WORLDS = [8, 64, 256]


class _Sized(torch.utils.data.Dataset):
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


def _shards(world: int, samples: int = SAMPLES) -> list[list[int]]:
    """Each rank's sample order for EPOCH, as a run's EpochSampler around a DistributedSampler yields it."""
    shards = []
    for rank in range(world):
        inner = DistributedSampler(_Sized(samples), num_replicas=world, rank=rank, shuffle=True, seed=SEED)
        sampler = EpochSampler(samples, SEED, inner=inner, batch_size=BATCH)
        sampler.set_epoch(EPOCH)
        shards.append([index for index, _ in sampler])
    return shards


def _layout(world: int, shards: list[list[int]]) -> layout.Layout:
    return layout.Layout(world, BATCH, ACCUM, optimizer_steps_per_epoch(math.ceil(len(shards[0]) / BATCH), ACCUM),
                           sharded=True)


@pytest.fixture(scope="module")
def shards() -> dict[int, list[list[int]]]:
    return {world: _shards(world) for world in WORLDS}


@pytest.mark.parametrize("world", WORLDS)
def test_every_rank_gets_an_equal_shard_covering_the_data(world):
    """World sizes a CI machine cannot start, on data that does not divide evenly: equal shard lengths (equal steps
    per rank, so no rank waits forever for another), every sample in some shard but a lone last one per rank (a
    batch of one cannot train BatchNorm, sampling.EpochSampler), fewer repeats than ranks (the padding)."""
    shards = _shards(world, ODD)
    assert len({len(shard) for shard in shards}) == 1
    seen = [index for shard in shards for index in shard]
    lone = world if math.ceil(ODD / world) % BATCH == 1 else 0
    assert len(set(range(ODD)) - set(seen)) <= lone and len(seen) - len(set(seen)) < world


@pytest.mark.parametrize(("saved_world", "new_world"), [(8, 64), (64, 8), (256, 64), (64, 256), (8, 256)])
def test_a_mid_epoch_resume_under_another_world_size_continues_at_the_same_sample(shards, saved_world, new_world):
    """Saved after `step` steps by one world size, resumed by another: the new ranks' remaining samples are exactly
    the epoch's samples the old ranks had not reached, or the resume is refused with one line."""
    before = _layout(saved_world, shards[saved_world])
    now = _layout(new_world, shards[new_world])
    continued = 0
    for step in (1, 2, 3, 4, before.steps_per_epoch // 2):
        done = {index for shard in shards[saved_world] for index in shard[:step * BATCH * ACCUM]}
        try:
            new_step = layout.continue_at(before.to_dict(), step, now.to_dict(), "last.pt")
        except ResumeLayoutError as refusal:
            assert "\n" not in str(refusal) and str(saved_world) in str(refusal)
            assert (step * before.global_batch) % now.global_batch  # refused only where no whole step fits
            continue
        rest = {index for shard in shards[new_world] for index in shard[new_step * BATCH * ACCUM:]}
        assert not done & rest and len(done) == step * before.global_batch, step
        assert done | rest == set(range(SAMPLES))
        continued += 1
    assert continued  # some step of every pair is a whole number of the other's steps


def test_the_same_world_size_resumes_at_its_own_step_and_one_process_cannot_continue_a_sharded_epoch(shards):
    """Unchanged layouts change nothing; one process without ddp draws another order, so it is refused mid-epoch
    and allowed at an epoch's end."""
    sixty_four = _layout(64, shards[64])
    saved, single = sixty_four.to_dict(), layout.Layout(1, BATCH, ACCUM, SAMPLES // BATCH, sharded=False).to_dict()
    assert layout.continue_at(saved, 3, saved, "last.pt") == 3
    with pytest.raises(ResumeLayoutError):
        layout.continue_at(saved, 3, single, "last.pt")
    assert layout.continue_at(saved, 0, single, "last.pt") == 0
    assert layout.continue_at(saved, sixty_four.steps_per_epoch, single, "last.pt") == single["steps_per_epoch"]


@pytest.mark.parametrize("world", WORLDS)
def test_ranks_with_the_same_data_agree_and_one_odd_rank_is_named(tiny_data, tmp_path, world):
    """The data agreement over `world` ranks' fingerprints: identical data agrees (also a copy at another path, as
    on a node-local disk); a copy missing one image, or other classes, is named by its rank in one line."""
    from {{ cookiecutter.package_name }}.data.folders import load_splits

    mine = data_agreement.fingerprint(tiny_data, *load_splits(tiny_data, 32))
    copy = tmp_path / "elsewhere"
    shutil.copytree(tiny_data, copy)
    same_elsewhere = data_agreement.fingerprint(copy, *load_splits(copy, 32))
    assert data_agreement.disagreement([mine] * (world - 1) + [same_elsewhere]) is None
    next(iter(sorted((copy / "train").rglob("*.png")))).unlink()
    odd_rank = world // 2 + 1
    for odd in (data_agreement.fingerprint(copy, *load_splits(copy, 32)), {**mine, "classes": ["a", "b"]}):
        fingerprints = [mine] * world
        fingerprints[odd_rank] = odd
        problem = data_agreement.disagreement(fingerprints)
        assert problem and "\n" not in problem and f"rank {odd_rank} of {world}" in problem
