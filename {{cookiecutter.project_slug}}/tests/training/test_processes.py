"""One process continuing checkpoints that other layouts wrote: where it can pick up, and where it refuses."""

from __future__ import annotations

import pytest

from {{ cookiecutter.package_name }}.processes import Processes, ResumeLayoutError

ALONE = Processes().layout(batch_size=8, accum_steps=1, steps_per_epoch=6)
TWO_RANKS = {**ALONE, "world_size": 2, "global_batch": 16, "steps_per_epoch": 3, "sharded": True}


def test_a_checkpoint_of_its_own_layout_continues_at_its_step():
    assert Processes().continue_at(ALONE, 4, ALONE, "last.pt") == (4, [])


def test_an_epoch_whose_training_two_ranks_finished_continues_at_its_validation():
    assert Processes().continue_at(TWO_RANKS, 3, ALONE, "last.pt") == (ALONE["steps_per_epoch"], [])


def test_mid_epoch_under_two_ranks_is_refused_with_what_to_do_instead():
    with pytest.raises(ResumeLayoutError, match="epoch-end checkpoint"):
        Processes().continue_at(TWO_RANKS, 1, ALONE, "last.pt")
