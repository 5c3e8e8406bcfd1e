"""torchrun's processes training together: the process group, and the core's `Processes` answered for ranks.

Only rank 0 prints and writes files; epoch totals are summed over ranks; the ranks agree at every
step on stopping and saving, over a host-side (gloo) group that never waits for the GPU.
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
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

from ...devkit.checkpoint import unwrap
from ...errors import ConfigError, UserError
from ...processes import Processes
from . import data_agreement, layout, rendezvous, shared_checkpoint

TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def launched_by_torchrun() -> bool:
    """Whether torchrun (or another launcher speaking its protocol) started this process."""
    return all(name in os.environ for name in TORCHRUN_VARS)


def backend(device: torch.device) -> str:
    """The collective library for ranks on `device`: nccl for CUDA, xccl for Intel XPU, gloo for the CPU."""
    return {"cuda": "nccl", "xpu": "xccl"}.get(device.type, "gloo")


def start(device: torch.device) -> dist.ProcessGroup | None:
    """Join torchrun's process group; return the host-side (gloo) group for agreements (None: the default one)."""
    device_id = device if device.type in ("cuda", "xpu") else None
    if "TORCHELASTIC_RESTART_COUNT" not in os.environ:  # not torchrun: nothing restarts in the same store
        dist.init_process_group(backend=backend(device), device_id=device_id)
    else:
        # torchrun's store still holds an earlier attempt's peer addresses after an elastic restart: a rank
        # that read one connected to a dead port. Each attempt joins under a prefix its ranks agree on.
        store, rank, size = next(dist.rendezvous("env://"))
        attempt = rendezvous.agreed_attempt(store, rank, size)
        dist.init_process_group(backend=backend(device), device_id=device_id, rank=rank, world_size=size,
                                store=dist.PrefixStore(f"attempt_{attempt}/", store))
    return None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")  # every rank, in one order


class DistributedProcesses(Processes):
    """The ranks of a torchrun job: rank 0 decides and writes, the others are told."""

    def __init__(self, device: torch.device):
        self.device, self.control = device, start(device)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()

    def decide(self, decide):
        decision, refusal = None, None
        if self.is_main():
            try:
                decision = decide()
            except UserError as error:  # every rank refuses alike
                refusal = str(error)
            except BaseException:  # the others would wait for the decision forever: tell them, then fail here
                self.from_main((None, "rank 0 failed while deciding (its own error says why)"))
                raise
        decision, refusal = self.from_main((decision, refusal))
        if refusal is not None:
            raise ConfigError(refusal)
        return decision

    def from_main(self, value):
        """Rank 0's `value` on every rank."""
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def max(self, values: list[int]) -> list[int]:
        # A CPU tensor over the gloo group: the ranks' host threads meet, the GPU's queue is never drained
        flags = torch.tensor(values, dtype=torch.long)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self.control)
        return flags.tolist()

    def total(self, tensor: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(tensor)
        return tensor

    def gather(self, value):
        values: list = [None] * self.world_size
        dist.all_gather_object(values, value, group=self.control)
        return values

    @contextlib.contextmanager
    def main_first(self) -> Iterator[None]:
        if not self.is_main():
            dist.barrier()
        yield
        if self.is_main():
            dist.barrier()

    def train_sampler(self, dataset, seed: int) -> DistributedSampler:
        return DistributedSampler(dataset, shuffle=True, seed=seed)

    def eval_indices(self, dataset) -> range:
        # Not DistributedSampler: it pads with repeated images, which would skew val metrics.
        return range(self.rank, len(dataset), self.world_size)

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        return DistributedDataParallel(model, device_ids=[device.index] if device.type in ("cuda", "xpu") else None)

    def for_evaluation(self, model: nn.Module) -> nn.Module:
        return unwrap(model)  # DDP's forward may sync buffers across ranks

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager:
        # --accum-steps N: only a group's last micro-batch all-reduces its gradients
        inner = getattr(model, "_orig_mod", model)
        return inner.no_sync() if isinstance(inner, DistributedDataParallel) else contextlib.nullcontext()

    def check_same_data(self, root, train_set, val_set) -> None:
        data_agreement.check_ranks_agree(self, root, train_set, val_set)

    def checkpoint(self, path: str) -> tuple[str, str | None]:
        return shared_checkpoint.rank0_copy(self, path)

    def layout(self, batch_size: int, accum_steps: int, steps_per_epoch: int) -> dict:
        return layout.Layout(self.world_size, batch_size, accum_steps, steps_per_epoch, True).to_dict()

    def continue_at(self, saved: dict | None, step: int, now: dict, where: str) -> tuple[int, list[str]]:
        return layout.continue_at(saved, step, now, where), layout.changes(saved, now)

    def finish(self, model: nn.Module) -> str:
        digest = weights_digest(model)
        digests = self.gather(digest)
        if len(set(digests)) > 1:
            raise RuntimeError(f"ddp replicas diverged: weight digests per rank {digests}")
        return f"ddp: weights identical on every rank (sha256 {digest[:12]})"

    def close(self) -> None:
        """Leave the process group, also after errors (once: a second call does nothing)."""
        if not dist.is_initialized():
            return
        # A gloo worker may still hold the last collective's tensors after Python let go of them, and takes the
        # GIL to free them. Torch 2.4 frees a process group with the GIL held while its gloo backend joins that
        # worker: the rank hung in destroy_process_group (newer torch lets go of the GIL there, pytorch#154976).
        # A gloo backend's own handle lets go of the GIL while it joins, so the last references are ours.
        backends = gloo_backends([dist.group.WORLD, self.control])
        dist.destroy_process_group()
        # The group lives on in reference cycles (through the DDP model) until the interpreter's last
        # collection, when a gloo worker still holding the final collective's tensors must take the GIL to
        # free them: the rank dies of SIGABRT after a successful run. Collected now, it ends cleanly.
        gc.collect()
        backends.clear()


def gloo_backends(groups: list[dist.ProcessGroup | None]) -> list:
    """The gloo backends (the host-side workers) of `groups`; None and groups without one are skipped."""
    backends = []
    for group in filter(None, groups):
        with contextlib.suppress(RuntimeError):  # an nccl-only group has no CPU backend
            backends.append(group._get_backend(torch.device("cpu")))
    return backends


def weights_digest(model: nn.Module) -> str:
    """A SHA-256 of the model's parameters, by name, as stored (wrappers removed)."""
    digest = hashlib.sha256()
    for name, param in unwrap(model).named_parameters():
        digest.update(name.encode())
        digest.update(param.detach().to("cpu").reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
