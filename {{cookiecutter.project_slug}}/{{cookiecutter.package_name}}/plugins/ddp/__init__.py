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

from ...deferred import deferred
from ...plugins import Plugin

# Its choice (--parallel ddp) is read before torch loads (ARCHITECTURE.md, "Flags first, then torch"); the
# process group's machinery loads when the run first asks for it
ddp_processes = deferred(".processes", __package__)
rendezvous = deferred(".rendezvous", __package__)


class DdpPlugin(Plugin):
    """--parallel ddp: torchrun's processes train one model together."""

    name = "ddp"

    def choices(self) -> dict[str, list[str]]:
        return {"parallel": ["ddp"]}

    def unavailable(self, field: str, value: str, device) -> str | None:
        if not ddp_processes.launched_by_torchrun():
            return "ddp needs torchrun's environment (launch with: torchrun --nproc_per_node=N train.py ...)"
        if device.type not in ("cuda", "xpu", "cpu"):
            return f"ddp runs on cuda (nccl), xpu (xccl) or cpu (gloo), not {device.type}"
        local = int(os.environ["LOCAL_RANK"])
        if device.type in ("cuda", "xpu") and device.index != local:
            return f"local rank {local} must train on its own GPU, not {device}; use --device auto"
        return None

    def processes(self, cfg, device) -> ddp_processes.DistributedProcesses | None:
        if cfg.parallel != "ddp":
            return None
        note = rendezvous.loopback_host_note()
        if note and os.environ.get("LOCAL_RANK", "0") == "0":  # one line per node, before a join that would hang
            print(note, file=sys.stderr, flush=True)
        return ddp_processes.DistributedProcesses(device)


PLUGIN = DdpPlugin()
