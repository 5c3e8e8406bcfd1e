"""The loaders' workers ignore the stop signals (the main process saves, then ends them), yet a process that leaves
a loader behind still exits: a script, a notebook, a test process. multiprocessing ends daemonic children at exit
with SIGTERM, which these workers ignore, and then waits for them."""

import subprocess
import sys

import pytest
from run_helpers import PROJECT

LEFT_BEHIND = """
import torch
from {{ cookiecutter.package_name }}.data.loaders import build_loader

loader = build_loader(torch.utils.data.TensorDataset(torch.arange(16.0)), 4, torch.device("cpu"), train={train},
                      workers=2)
batches = iter(loader)
{use}
print("leaving", flush=True)
"""
USES = {"mid-pass": "next(batches)", "after a pass": "for batch in batches:\n    pass"}


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("use", USES, ids=list(USES))
def test_a_process_that_leaves_a_loader_with_workers_behind_exits(train, use):
    """Its loader's persistent workers still alive at the end, the interpreter exits 0 (before: it waited forever)."""
    script = LEFT_BEHIND.format(train=train, use=USES[use])
    result = subprocess.run([sys.executable, "-c", script], cwd=PROJECT, capture_output=True, text=True,
                            timeout=120)  # a regression hangs: this ends it
    assert result.returncode == 0 and result.stdout.strip() == "leaving", result.stderr[-2000:]
