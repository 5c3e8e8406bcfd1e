"""Resuming onto an accelerator: the checkpoint is read onto the CPU and load_state_dict places each piece.

A run on `meta` stands in for a GPU on any machine: a tensor there, like one on cuda:0, has no host
copy, so reading a checkpoint onto the run's device breaks the RNG restore just as CUDA does.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.training import run_state
from {{ cookiecutter.package_name }}.training.run import Run

CUDA_COUNT = torch.cuda.device_count() if torch.cuda.is_available() else 0
# Loading real weights into a model on meta copies nothing, by design: torch says so once per tensor.
pytestmark = pytest.mark.filterwarnings("ignore:for .*copying from a non-meta parameter")


@pytest.fixture(scope="module")
def saved_run(tiny_data, tmp_path_factory):
    """A CPU run's checkpoint after one real optimizer step (AdamW holds step counters and moments)."""
    out = tmp_path_factory.mktemp("resume-devices")
    cfg = TrainConfig(data=str(tiny_data), device="cpu", pretrained=False, image_size=32, batch_size=4,
                      workers=0, precision="fp32", parallel="none", out=str(out / "run"))
    run = Run(cfg, torch.device("cpu"))
    images, targets = run.hw.batch(*next(iter(run.train_loader)))  # uint8 batches become float on the device
    run.loss_fn(run.model(images), targets).backward()
    run.optimizer.step()
    path = out / "last.pt"
    torch.save(run.state(epoch=1), path)
    return cfg, str(path)


def _resumed_on(saved_run, device: torch.device) -> Run:
    """A fresh run on `device` that resumed from the CPU run's checkpoint."""
    cfg, path = saved_run
    run = Run(dataclasses.replace(cfg, device=str(device)), device)
    run.resume(run_state.read(path), path)
    return run


def _optimizer_tensors(run: Run) -> dict[str, set[torch.device]]:
    """The devices of the optimizer's state, per key (step, exp_avg, exp_avg_sq)."""
    found: dict[str, set[torch.device]] = {}
    for per_param in run.optimizer.state.values():
        for key, value in per_param.items():
            if isinstance(value, torch.Tensor):
                found.setdefault(key, set()).add(value.device)
    return found


def _step_device(run: Run, device: torch.device) -> torch.device:
    """Where torch keeps AdamW's step counters: beside the weights when fused or capturable, else on the CPU.

    The groups' flags, not the constructor's: loading a state dict brings the saved run's groups along.
    """
    group = run.optimizer.param_groups[0]
    return device if group.get("fused") or group.get("capturable") else torch.device("cpu")


def test_resume_on_an_accelerator_keeps_adamw_step_counters_where_torch_wants_them(saved_run):
    """On meta (as on cuda:0) the moments follow the weights; AdamW's `step` sits where torch reads it, no sync."""
    meta = torch.device("meta")
    run = _resumed_on(saved_run, meta)
    placed = _optimizer_tensors(run)
    assert placed["step"] == {_step_device(run, meta)}
    assert placed["exp_avg"] == placed["exp_avg_sq"] == {meta}
    assert {parameter.device for parameter in run.model.parameters()} == {meta}
    assert run.start_epoch == 2


@pytest.mark.cuda
@pytest.mark.skipif(CUDA_COUNT < 1, reason="needs a CUDA device")
def test_resume_on_a_real_gpu_restores_rng_and_keeps_step_counters_on_the_cpu(saved_run):
    """On cuda:0 resume runs through (RNG states included); moments on the GPU, step counters on the CPU."""
    cuda = torch.device("cuda", 0)
    run = _resumed_on(saved_run, cuda)
    placed = _optimizer_tensors(run)
    assert placed["step"] == {_step_device(run, cuda)}
    assert placed["exp_avg"] == {cuda}
