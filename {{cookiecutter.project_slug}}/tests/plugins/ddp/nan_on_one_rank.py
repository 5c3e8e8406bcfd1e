"""train.py whose training loss turns NaN on one rank only: the stimulus of test_ddp's non-finite-loss test.

    torchrun --nproc_per_node 2 tests/plugins/ddp/nan_on_one_rank.py RANK CALL TRAIN_ARGS...

On global rank RANK, the CALL-th training loss (1-based, validation not counted) is NaN; every
other loss on every rank is the real one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project root: train.py and the package

import train  # noqa: E402
from {{ cookiecutter.package_name }} import task  # noqa: E402

BAD_RANK, BAD_CALL = int(sys.argv[1]), int(sys.argv[2])
_real_forward = task.WeightedCrossEntropy.forward
_calls = 0


def _forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    global _calls
    value = _real_forward(self, logits, targets)
    if not torch.is_grad_enabled():  # validation
        return value
    _calls += 1
    return value * float("nan") if int(os.environ["RANK"]) == BAD_RANK and _calls == BAD_CALL else value


if __name__ == "__main__":
    task.WeightedCrossEntropy.forward = _forward
    sys.exit(train.main(sys.argv[3:]))
