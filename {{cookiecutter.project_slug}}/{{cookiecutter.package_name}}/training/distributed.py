"""Processes training together under torchrun: the process group, ranks, and the collectives the run uses.

Only rank 0 prints and writes files; epoch totals are summed over ranks; the ranks agree at
every step on stopping and saving, over a host-side (gloo) group that never waits for the GPU.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DistributedSampler

from ..devkit.checkpoint import unwrap
from . import rendezvous

TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_CONTROL: dict[str, dist.ProcessGroup | None] = {}  # "group": the host-side group of this process group, once made


def launched_by_torchrun() -> bool:
    """Whether torchrun (or another launcher speaking its protocol) started this process."""
    return all(name in os.environ for name in TORCHRUN_VARS)


def is_distributed() -> bool:
    """Whether this process has joined a process group."""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's global rank (0 when not distributed)."""
    return dist.get_rank() if is_distributed() else int(os.environ.get("RANK", 0))


def world_size() -> int:
    """How many processes train together (1 when not distributed)."""
    return dist.get_world_size() if is_distributed() else int(os.environ.get("WORLD_SIZE", 1))


def is_main_process() -> bool:
    """Only rank 0 prints progress and writes files."""
    return rank() == 0


def print_main(*args, **kwargs) -> None:
    """print() on rank 0 only, so a run's output appears once."""
    if is_main_process():
        print(*args, **kwargs, flush=True)


def process_group_backend(device: torch.device) -> str:
    """The collective library for ranks on `device`: nccl for CUDA, xccl for Intel XPU, gloo for the CPU."""
    return {"cuda": "nccl", "xpu": "xccl"}.get(device.type, "gloo")


def start_distributed(mode: str, device: torch.device) -> None:
    """Join torchrun's process group for ddp (nccl on CUDA, xccl on XPU, gloo on CPU); nothing otherwise."""
    if mode != "ddp" or is_distributed():
        return
    backend = process_group_backend(device)
    device_id = device if device.type in ("cuda", "xpu") else None
    if "TORCHELASTIC_RESTART_COUNT" not in os.environ:  # not torchrun: nothing restarts in the same store
        dist.init_process_group(backend=backend, device_id=device_id)
        control_group()  # made here, where every rank makes it in the same order
        return
    # torchrun's store still holds an earlier attempt's peer addresses after an elastic restart: a rank
    # that read one connected to a dead port (refused, or a 30-minute wait). Each attempt joins under a
    # prefix its ranks agree on (rendezvous.agreed_attempt says why not the agent's restart count).
    store, rank, size = next(dist.rendezvous("env://"))
    attempt = rendezvous.agreed_attempt(store, rank, size)
    dist.init_process_group(backend=backend, device_id=device_id, rank=rank, world_size=size,
                            store=dist.PrefixStore(f"attempt_{attempt}/", store))
    control_group()


def control_group() -> dist.ProcessGroup | None:
    """The group for host-side agreements (stop, save): gloo on CPU tensors, so no collective waits for the GPU.

    None means the default group, already gloo (a CPU run). Every rank must first call it at the same
    point (start_distributed does), as for any new group.
    """
    if "group" not in _CONTROL:
        _CONTROL["group"] = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
    return _CONTROL["group"]


def stop_distributed() -> None:
    """Leave the process group, if one was joined; called in a finally, so also after errors."""
    if is_distributed():
        dist.destroy_process_group()
        # destroy_process_group drops only torch's own references: the group lives on in reference
        # cycles (through the DDP model) until the interpreter's last collection, when a gloo worker
        # still holding the final collective's tensors must take the GIL to free them, and the rank
        # dies of SIGABRT ("terminate called without an active exception") after a successful run.
        # Collected now, the group's destructor waits for its workers while Python can still serve them.
        gc.collect()
    _CONTROL.clear()


def barrier() -> None:
    """Wait for every rank (a no-op when not distributed)."""
    if is_distributed():
        dist.barrier()


@contextlib.contextmanager
def main_process_first() -> Iterator[None]:
    """Rank 0 runs the block first (e.g. writing the demo data); the others run it after."""
    if not is_main_process():
        barrier()
    yield
    if is_main_process():
        barrier()


def train_sampler(dataset, seed: int) -> DistributedSampler | None:
    """Under ddp, a sampler giving each rank its own shuffled shard; call set_epoch every epoch."""
    return DistributedSampler(dataset, shuffle=True, seed=seed) if is_distributed() else None


def eval_shard(dataset) -> range | None:
    """Under ddp, this rank's share of the validation set: each image seen by exactly one rank."""
    # Not DistributedSampler: it pads with repeated images, which would skew val metrics.
    return range(rank(), len(dataset), world_size()) if is_distributed() else None


def first_on_any_rank(value: int | None) -> int | None:
    """The first non-None `value` over all ranks, the same on every rank (e.g. a stop signal).

    Ranks that stopped at different epochs would hang in the next collective, so they agree first.
    """
    if not is_distributed():
        return value
    values: list = [None] * world_size()
    dist.all_gather_object(values, value)
    return next((v for v in values if v is not None), None)


def max_on_any_rank(values: list[int]) -> list[int]:
    """Each value's maximum over all ranks (unchanged when not distributed), e.g. a stop signal at a step.

    One small all-reduce of a CPU tensor over the gloo control group: the ranks' host threads meet,
    the GPU's queue is never drained, so it is cheap enough after every optimizer step and ranks stop
    at the same one.
    """
    if not is_distributed():
        return list(values)
    flags = torch.tensor(values, dtype=torch.long)  # on the CPU: reading it back waits for no device
    dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=control_group())
    return flags.tolist()


def earliest_step(step: torch.Tensor) -> int:
    """The smallest non-zero step over all ranks, 0 when every rank holds 0 (e.g. the first non-finite loss)."""
    if not is_distributed():
        return int(step.item())
    never = torch.iinfo(torch.long).max
    earliest = torch.where(step == 0, never, step).to(torch.long)
    dist.all_reduce(earliest, op=dist.ReduceOp.MIN)
    value = int(earliest.item())
    return 0 if value == never else value


def from_main(value):
    """Rank 0's `value` on every rank (unchanged when not distributed): one decision, e.g. the run folder."""
    if not is_distributed():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def reduce_sums(loss_sum: torch.Tensor, correct: torch.Tensor, seen: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """An epoch's running sums added over every rank (unchanged when not distributed)."""
    if not is_distributed():
        return loss_sum, correct, seen
    totals = torch.stack([loss_sum.double(), correct.double(), loss_sum.new_tensor(seen, dtype=torch.float64)])
    dist.all_reduce(totals)  # (3,) summed over ranks
    return totals[0], totals[1], int(totals[2].item())


def sum_over_ranks(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` summed over every rank in place, e.g. a confusion matrix (unchanged when not distributed)."""
    if is_distributed():
        dist.all_reduce(tensor)
    return tensor


def weights_digest(model: nn.Module) -> str:
    """A SHA-256 of the model's parameters, by name, as stored (wrappers removed)."""
    digest = hashlib.sha256()
    for name, param in unwrap(model).named_parameters():
        digest.update(name.encode())
        digest.update(param.detach().to("cpu").reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def check_replicas_agree(model: nn.Module) -> str:
    """The weights' digest, checked to be the same on every rank; raise if DDP let them drift."""
    digest = weights_digest(model)
    if is_distributed():
        digests: list = [None] * world_size()
        dist.all_gather_object(digests, digest)
        if len(set(digests)) > 1:
            raise RuntimeError(f"ddp replicas diverged: weight digests per rank {digests}")
    return digest
