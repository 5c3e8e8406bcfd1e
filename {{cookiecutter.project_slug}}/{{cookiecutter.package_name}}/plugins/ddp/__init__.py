"""The ddp answer: DistributedDataParallel under torchrun, one process per device, on one node or several.

    torchrun --nproc_per_node=4 train.py --parallel ddp ...          (scripts/launch_ddp.sh, docs/multi-node.md)

What it adds to the run, through the core's `Processes` (processes.py): the process group (nccl on CUDA,
xccl on XPU, gloo on CPU) joined under a name every rank of an elastic restart agrees on (rendezvous.py);
each rank's shard of the data; rank 0 deciding and writing, the others told; every rank checking it sees
rank 0's data (data_agreement.py) and resuming from rank 0's checkpoint bytes, also on node-local disks
(shared_checkpoint.py); a mid-epoch checkpoint continued under another number of ranks (layout.py).
"""

from __future__ import annotations

import os
import sys

from ...plugins import Plugin
from .processes import DistributedProcesses, launched_by_torchrun
from .rendezvous import loopback_host_note


class DdpPlugin(Plugin):
    """--parallel ddp: torchrun's processes train one model together."""

    name = "ddp"

    def choices(self) -> dict[str, list[str]]:
        return {"parallel": ["ddp"]}

    def unavailable(self, field: str, value: str, device) -> str | None:
        if not launched_by_torchrun():
            return "ddp needs torchrun's environment (launch with: torchrun --nproc_per_node=N train.py ...)"
        if device.type not in ("cuda", "xpu", "cpu"):
            return f"ddp runs on cuda (nccl), xpu (xccl) or cpu (gloo), not {device.type}"
        local = int(os.environ["LOCAL_RANK"])
        if device.type in ("cuda", "xpu") and device.index != local:
            return f"local rank {local} must train on its own GPU, not {device}; use --device auto"
        return None

    def processes(self, cfg, device) -> DistributedProcesses | None:
        if cfg.parallel != "ddp":
            return None
        note = loopback_host_note()
        if note and os.environ.get("LOCAL_RANK", "0") == "0":  # one line per node, before a join that would hang
            print(note, file=sys.stderr, flush=True)
        return DistributedProcesses(device)


PLUGIN = DdpPlugin()
