"""The training path never waits for the device once per step: every host read is per epoch or per log interval.

On the CPU a counting wrapper stands in for the device: it counts the calls that read a tensor back
(`.item()`, `.tolist()`, `.cpu()`, `.numpy()`, `bool()`/`int()`/`float()` of a tensor) over an epoch
of the loop, and the count must not grow with the number of steps. The meta device has no data, so
an operation that needs to read the device (a data-dependent shape, a Python `if` on a tensor) fails
there: the pieces that must not read back run on it. With a GPU, torch's own sync detector counts.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from host_reads import HostReads, epoch_reads, stand_in_run

from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.model import build_model
from {{ cookiecutter.package_name }}.task import new_confusion, update_confusion
from {{ cookiecutter.package_name }}.training import epochs, loop, optimization

CPU, META = torch.device("cpu"), torch.device("meta")
CUDA_COUNT = torch.cuda.device_count() if torch.cuda.is_available() else 0


def test_an_epoch_reads_the_device_as_often_with_twelve_steps_as_with_three(tiny_data, monkeypatch):
    """Optimizer, step boundary and evaluation add no host read per step: 12 steps read as often as 3.

    (The reads that remain are per epoch: the non-finite check, the epoch's sums, the sampler's order,
    and per image in the CPU transforms, the same for both batch sizes.)"""
    reads = HostReads(monkeypatch)
    few, many = epoch_reads(tiny_data, CPU, 8, reads), epoch_reads(tiny_data, CPU, 2, reads)
    assert many == few, f"{many - few} more host reads for 9 more steps: a read per step crept in"


def test_the_count_sees_a_read_added_to_every_step(tiny_data, monkeypatch):
    """The test above can fail: one .item() per step shows as a difference of 9."""
    reads = HostReads(monkeypatch)
    stepped = loop._optimizer_step

    def step_then_read(model, *args):
        stepped(model, *args)
        next(model.parameters()).sum().item()

    monkeypatch.setattr(loop, "_optimizer_step", step_then_read)
    assert epoch_reads(tiny_data, CPU, 2, reads) - epoch_reads(tiny_data, CPU, 8, reads) == 12 - 3


def test_the_confusion_matrix_is_counted_on_the_meta_device():
    """update_confusion has no data-dependent shape (bincount's waits for the device): it runs on meta."""
    matrix = new_confusion(3, META)
    update_confusion(matrix, torch.tensor([0, 2], device=META), torch.tensor([1, 2], device=META))
    assert matrix.shape == (3, 3) and matrix.device == META


def test_adamw_is_fused_where_the_device_has_the_kernel():
    """Fused AdamW on the CPU (and CUDA): one kernel, its step counts never read back; plain AdamW on meta."""
    cfg = TrainConfig(lr=1e-3, weight_decay=0.01)
    for device, fused in ((CPU, True), (META, None)):
        model = build_model("{{ cookiecutter.backbone }}", 4, pretrained=False, device=device)
        assert optimization.make_optimizer(model, cfg).defaults["fused"] is fused, device


def test_the_step_agreement_keeps_its_flags_on_the_host():
    """The processes agree on stop/save with host values: a run whose device cannot be read (meta) agrees.

    (The ddp answer's processes agree over gloo the same way: tests/plugins/ddp.)"""
    run, totals = stand_in_run(META), loop.RunningTotals.start(META)
    for step in (1, 2, 3):
        epochs.at_step_boundary(run, None, 1, step, totals)
    assert run.processes.max([0, 3]) == [0, 3]


@pytest.mark.cuda
@pytest.mark.skipif(CUDA_COUNT < 1, reason="needs a CUDA device")
def test_on_a_gpu_torch_sees_no_more_syncs_in_twelve_steps_than_in_three(tiny_data):
    """torch.cuda.set_sync_debug_mode counts every implicit sync: the count does not grow with the steps."""
    device = torch.device("cuda:0")

    def syncs(batch_size: int) -> int:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                epoch_reads(tiny_data, device, batch_size)
            finally:
                torch.cuda.set_sync_debug_mode(0)
        return sum("synchroniz" in str(warning.message) for warning in caught)

    for batch_size in (8, 2):  # warm-up, both sizes first: cuDNN autotuning, lazy CUDA initialisation
        epoch_reads(tiny_data, device, batch_size)
    # Not equal: on an H200 (torch 2.11) the first window after the warm-up still held one sync more (36, 35)
    few, many = syncs(8), syncs(2)
    assert many <= few, f"{many - few} more syncs for 9 more steps"
