"""Where a run stands in an epoch, counted in samples, so a resume under another number of ranks finds it again.

A checkpoint records the layout it was written under (ranks, per-rank batch, accumulation, steps per
epoch, whether the data was sharded by DistributedSampler). Under ddp, DistributedSampler permutes the
whole dataset from (seed, epoch) alone and deals it out round-robin, so after k samples per rank the
ranks together have consumed exactly the first k * world_size samples of that permutation, whatever
world_size is. A mid-epoch checkpoint of `step` optimizer steps therefore stands at the global sample
`step * batch * accum * world`; another world size continues from the very same sample if that is a
whole number of its own optimizer steps, and is refused with one line otherwise. One process without
ddp draws its own permutation (sampling.EpochSampler): it continues only a run of one process.
Pure arithmetic, checked in the tests at world sizes a CI machine cannot start.
"""

from __future__ import annotations

import dataclasses

from ...processes import ResumeLayoutError


@dataclasses.dataclass(frozen=True)
class Layout:
    """How an epoch is cut into optimizer steps: ranks, per-rank batch, accumulation, steps per epoch, sharding."""

    world_size: int
    batch_size: int  # per rank
    accum_steps: int
    steps_per_epoch: int
    sharded: bool  # DistributedSampler shards the data (ddp), else one process draws its own order

    @property
    def global_batch(self) -> int:
        """Images per optimizer step over every rank."""
        return self.world_size * self.batch_size * self.accum_steps

    def to_dict(self) -> dict:
        """Plain values for the checkpoint (global_batch included, for the reader)."""
        return {**dataclasses.asdict(self), "global_batch": self.global_batch}

    @classmethod
    def from_dict(cls, saved: dict) -> Layout:
        """The layout a checkpoint recorded."""
        return cls(**{field.name: saved[field.name] for field in dataclasses.fields(cls)})


def continue_at(saved_values: dict | None, step: int, now_values: dict, where: str) -> int:
    """The optimizer step of this run's layout at which a checkpoint of `step` steps into its epoch continues.

    `where` names the checkpoint and its epoch for the refusal (ResumeLayoutError).
    """
    try:
        saved = Layout.from_dict(saved_values) if saved_values else None
    except (KeyError, TypeError, AttributeError):
        raise ResumeLayoutError(f"{where}: layout is {saved_values!r}, not a run's layout") from None
    now = Layout.from_dict(now_values)
    if saved is None or step == 0 or saved == now:  # older checkpoints: written under this layout
        return step
    if step >= saved.steps_per_epoch:  # the epoch's training was done: only its validation is left
        return now.steps_per_epoch
    samples = step * saved.global_batch
    if saved.sharded != now.sharded or (not now.sharded and saved.world_size != now.world_size):
        raise ResumeLayoutError(f"{where} was saved mid-epoch by {_ranks(saved)}; {_ranks(now)} draw another order, "
                                "so it can only continue as it was saved (or from an epoch-end checkpoint)")
    if samples % now.global_batch:
        raise ResumeLayoutError(f"{where} was saved mid-epoch after {samples} images by {_ranks(saved)}; "
                                f"{_ranks(now)} take {now.global_batch} images a step, so they cannot continue at "
                                f"that image: resume with {saved.world_size} ranks, or from an epoch-end checkpoint")
    return min(samples // now.global_batch, now.steps_per_epoch)


def _ranks(layout: Layout) -> str:
    """'2 ddp ranks' or 'one process without ddp'."""
    return f"{layout.world_size} ddp rank{'s' if layout.world_size > 1 else ''}" if layout.sharded else \
        "one process without ddp"


def changes(saved_values: dict | None, now_values: dict) -> list[str]:
    """The notes a resume under another layout prints: what a step now means."""
    saved, now = Layout.from_dict(saved_values) if saved_values else None, Layout.from_dict(now_values)
    if saved is None or saved == now:
        return []
    return [f"resume: {_ranks(now)} (the run had {_ranks(saved)}): {now.global_batch} images per optimizer step "
            f"(was {saved.global_batch}), {now.steps_per_epoch} steps per epoch (was {saved.steps_per_epoch}); "
            "the learning-rate schedule is rebuilt for the run as it now is, at the same point of its epochs"]
