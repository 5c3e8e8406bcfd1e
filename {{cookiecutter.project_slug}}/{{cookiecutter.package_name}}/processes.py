"""The processes that train together, as the core sees them: one, unless an answer brought another kind.

Whatever depends on how many processes train is asked of one `Processes` object, made once in train.py
and handed to the run: whether this process writes files and prints, what the others decided, what every
process's totals add up to, which samples it reads, how a checkpoint's place in an epoch maps onto this
run. `Processes()` is one process, where every answer is the obvious one. The ddp answer's plugin
(plugins/ddp) brings torchrun's; the core never imports it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch
from torch import nn

from .errors import ConfigError

T = TypeVar("T")


class ResumeLayoutError(ConfigError):
    """A mid-epoch checkpoint cannot continue under this run's layout (another number of processes). Exit 2."""


class Processes:
    """One process training alone: it decides, prints and writes; its totals are the totals."""

    rank, world_size = 0, 1

    def is_main(self) -> bool:
        """Whether this process prints and writes the run's files (rank 0)."""
        return self.rank == 0

    def print(self, *args, **kwargs) -> None:
        """print() on the main process only, so a run's output appears once."""
        if self.is_main():
            print(*args, **kwargs, flush=True)

    def decide(self, decide: Callable[[], T]) -> T:
        """The main process's `decide()`, the same on every process (a run folder, a refusal)."""
        return decide()

    def max(self, values: list[int]) -> list[int]:
        """Each value's maximum over the processes (a stop signal at a step boundary)."""
        return list(values)

    def total(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` summed over the processes, in place (running sums, a confusion matrix)."""
        return tensor

    def gather(self, value: T) -> list[T]:
        """Every process's `value` (picklable), in rank order."""
        return [value]

    @contextlib.contextmanager
    def main_first(self) -> Iterator[None]:
        """The main process runs the block before the others (writing the demo data)."""
        yield

    def train_sampler(self, dataset, seed: int):
        """The sampler that deals this process its share of the training set, None: all of it."""
        return None

    def eval_indices(self, dataset) -> range | None:
        """This process's share of a validation set (each image once over all processes), None: all of it."""
        return None

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        """The model the steps run through (DDP keeps processes' replicas in step)."""
        return model

    def for_evaluation(self, model: nn.Module) -> nn.Module:
        """The model validation runs through (DDP's forward may sync buffers across processes: not there)."""
        return model

    def check_same_data(self, root, train_set, val_set) -> None:
        """Refuse (DataError) data that differs between processes, before anything is written."""

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager:
        """A micro-batch whose gradients add up locally (DDP skips the all-reduce)."""
        return contextlib.nullcontext()

    def checkpoint(self, path: str) -> tuple[str, str | None]:
        """Where this process reads the main process's checkpoint `path`, and a note to print."""
        return path, None

    def layout(self, batch_size: int, accum_steps: int, steps_per_epoch: int) -> dict:
        """How this run cuts an epoch into optimizer steps, as plain values for its checkpoints."""
        return {"world_size": self.world_size, "batch_size": batch_size, "accum_steps": accum_steps,
                "global_batch": self.world_size * batch_size * accum_steps, "steps_per_epoch": steps_per_epoch,
                "sharded": False}

    def continue_at(self, saved: dict | None, step: int, now: dict, where: str) -> tuple[int, list[str]]:
        """The step of this run at which a checkpoint of `step` steps into its epoch continues, with notes on what
        changed; ResumeLayoutError when it cannot."""
        same = not saved or all(saved.get(key) == now[key] for key in ("world_size", "global_batch", "sharded"))
        if step == 0 or same:
            return step, []
        if step >= saved.get("steps_per_epoch", step + 1):  # the epoch's training was done: only validation is left
            return now["steps_per_epoch"], []
        raise ResumeLayoutError(f"{where} was saved mid-epoch by {saved.get('world_size')} process(es) taking "
                                f"{saved.get('global_batch')} images a step; one process cannot continue it there: "
                                "resume it as it was saved, or from an epoch-end checkpoint")

    def finish(self, model: nn.Module) -> str | None:
        """What to say once training ended (the ddp replicas' agreement); None: nothing."""
        return None

    def close(self) -> None:
        """Leave whatever group the processes formed (also after an error)."""
