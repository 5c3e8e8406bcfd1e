"""Training never sees a batch of one image (BatchNorm cannot train on it), and exact resume still holds."""

from torch.utils.data import DistributedSampler

from {{ cookiecutter.package_name }}.data.sampling import EpochSampler


def test_an_epoch_of_one_more_than_full_batches_leaves_its_last_sample_out():
    """17 samples in batches of 8: 16 yielded (two full batches), not a third batch of one."""
    sampler = EpochSampler(17, seed=0, batch_size=8)
    sampler.set_epoch(1)
    order = [index for index, _ in sampler]
    assert len(order) == len(sampler) == 16 and len(set(order)) == 16


def test_other_remainders_keep_every_sample():
    """18 samples in batches of 8 keep all 18 (a last batch of two trains)."""
    sampler = EpochSampler(18, seed=0, batch_size=8)
    assert len(list(sampler)) == len(sampler) == 18


def test_a_mid_epoch_resume_continues_the_same_shortened_order():
    """Starting at sample 8 yields exactly the rest of what the whole epoch yields."""
    whole, resumed = EpochSampler(17, seed=3, batch_size=8), EpochSampler(17, seed=3, batch_size=8)
    whole.set_epoch(2)
    resumed.set_epoch(2, start=8)
    assert list(resumed) == list(whole)[8:] and len(resumed) == 8


def test_ddp_shards_drop_alike_and_keep_one_size():
    """33 images on two ranks are 17 each (padded): each rank drops one, and both keep 16, two batches of 8."""
    sizes = []
    for rank in range(2):
        inner = DistributedSampler(range(33), num_replicas=2, rank=rank, shuffle=True, seed=0)
        sampler = EpochSampler(33, seed=0, inner=inner, batch_size=8)
        sampler.set_epoch(1)
        sizes.append((len(sampler), len(list(sampler))))
    assert sizes == [(16, 16), (16, 16)]
