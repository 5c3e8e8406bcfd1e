"""What a project adopting the kit relies on (devkit/README.md): one line and exit 2 from main(), checkpoints of
CPU tensors whatever device the state lived on, DataParallel from the resolved device."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from {{ cookiecutter.package_name }}.devkit import DeviceError, data_parallel, resolve_device
from {{ cookiecutter.package_name }}.devkit import checkpoint as kit_checkpoint
from {{ cookiecutter.package_name }}.devkit.checkpoint import CheckpointError, on_cpu, save_checkpoint
from {{ cookiecutter.package_name }}.devkit.edge import run_main


def test_a_bad_device_in_main_is_one_line_and_exit_2(no_gpus, capsys):
    """run_main(main): --device cuda:1 on a machine without it is one line naming what is there, exit 2."""
    assert run_main(lambda: resolve_device("cuda:1") and 0) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "cuda:1" in err[0] and "cpu" in err[0]


def test_main_keeps_its_own_code_and_other_errors_keep_their_traceback():
    """Only the kit's bad-input errors are mapped: main's code passes through, None is 0, a bug still raises."""
    assert run_main(lambda: 3) == 3 and run_main(lambda: None) == 0
    assert run_main(lambda: (_ for _ in ()).throw(CheckpointError("x.pt: not ours"))) == 2
    with pytest.raises(ZeroDivisionError):
        run_main(lambda: 1 / 0)


def test_a_checkpoint_of_gpu_tensors_holds_only_cpu_tensors(fake_tensors, monkeypatch, tmp_path):
    """Model weights, optimizer moments and an RNG state on cuda:1 reach torch.save as CPU tensors; the live
    ones are not moved."""
    weight = torch.ones(3, device="cuda:1")
    state = {"model": {"weight": weight}, "optimizer": {"state": {0: {"exp_avg": torch.zeros(3, device="cuda:1")}}},
             "rng": [torch.zeros(2, dtype=torch.uint8, device="cuda:1")], "epoch": 1}
    saved = []
    monkeypatch.setattr(kit_checkpoint.torch, "save", lambda obj, handle: saved.append(obj))
    save_checkpoint(tmp_path / "last.pt", state)
    tensors = [saved[0]["model"]["weight"], saved[0]["optimizer"]["state"][0]["exp_avg"], saved[0]["rng"][0]]
    assert all(tensor.device.type == "cpu" for tensor in tensors) and weight.device == torch.device("cuda:1")


def test_cpu_tensors_are_written_as_they_are():
    """A state already on the CPU is not copied a second time for the file."""
    weight = torch.ones(3)
    assert on_cpu({"model": {"weight": weight}})["model"]["weight"] is weight


def test_dataparallel_puts_the_resolved_device_first(fake_cuda, monkeypatch):
    """cuda:1 of two GPUs: DataParallel over [1, 0], gathering on cuda:1 where the loss is computed."""
    fake_cuda([70, 70])
    made = {}

    class Recorded(nn.Module):
        def __init__(self, module, device_ids, output_device):
            super().__init__()
            made.update(device_ids=device_ids, output_device=output_device)

    monkeypatch.setattr(nn, "DataParallel", Recorded)
    data_parallel(nn.Linear(2, 2), resolve_device("cuda:1"))
    assert made == {"device_ids": [1, 0], "output_device": 1}


def test_dataparallel_refuses_a_device_that_is_not_cuda():
    with pytest.raises(DeviceError, match="CUDA devices, not cpu"):
        data_parallel(nn.Linear(2, 2), torch.device("cpu"))
