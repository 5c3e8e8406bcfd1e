"""Checkpoints are plain CPU data, free of wrapper prefixes, atomic, and safely loaded."""

import pickle

import pytest
import torch
from torch import nn

from conftest import DEVICES

from {{ cookiecutter.package_name }}.checkpoint import (
    CheckpointError, load_checkpoint, load_model_state, model_state, save_checkpoint,
)


def _net() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))


def test_round_trip_restores_every_tensor(tmp_path):
    """What was saved loads back equal, with weights_only=True and map_location."""
    model = _net()
    save_checkpoint(tmp_path / "last.pt", {"model": model_state(model), "epoch": 2})
    state = load_checkpoint(tmp_path / "last.pt", map_location="cpu")
    fresh = _net()
    load_model_state(fresh, state["model"], "last.pt")
    for key, tensor in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[key], tensor)
    assert state["epoch"] == 2


# meta tensors hold no data, so there is nothing to save from them
REAL_DEVICES = [d for d in DEVICES if d != "meta"]


@pytest.mark.parametrize("device", REAL_DEVICES, indirect=True)
def test_saved_tensors_are_on_cpu_and_the_live_model_does_not_move(device):
    """Saving from any device copies to CPU; the model stays where it was."""
    model = _net().to(device)
    state = model_state(model)
    assert all(t.device.type == "cpu" for t in state.values())
    assert all(p.device == device for p in model.parameters())


def test_wrapper_prefixes_never_reach_the_file():
    """A DataParallel-wrapped model's keys are saved as the plain model names them."""
    state = model_state(nn.DataParallel(_net()))
    assert state and not any(key.startswith("module.") for key in state)


def test_loading_into_another_architecture_names_the_mismatch(tmp_path):
    """A checkpoint for a different shape fails with the key and both shapes."""
    save_checkpoint(tmp_path / "c.pt", {"model": model_state(_net())})
    other = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5))
    with pytest.raises(CheckpointError, match=r"0.weight \(3, 4\) vs \(5, 4\)"):
        load_model_state(other, load_checkpoint(tmp_path / "c.pt")["model"], "c.pt")


def test_truncated_file_is_a_checkpoint_error(tmp_path):
    """Half a file is reported as corrupt, not as a zipfile traceback."""
    save_checkpoint(tmp_path / "c.pt", {"model": model_state(_net())})
    data = (tmp_path / "c.pt").read_bytes()
    (tmp_path / "c.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(tmp_path / "c.pt")


class _Payload:
    """Pickling this object would run code on load if loading were unsafe."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_pickled_payload_is_refused_and_never_runs(tmp_path):
    """weights_only loading refuses code in a checkpoint: the payload's file never appears."""
    marker = tmp_path / "PWNED"
    with open(tmp_path / "evil.pt", "wb") as handle:
        torch.save({"model": {}, "x": _Payload(marker)}, handle, pickle_module=pickle)
    with pytest.raises(CheckpointError, match="not a safe checkpoint"):
        load_checkpoint(tmp_path / "evil.pt")
    assert not marker.exists()


def test_missing_file_is_a_checkpoint_error(tmp_path):
    """A path that does not exist is named in the error."""
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt")


def test_a_failed_write_leaves_the_previous_file_whole(tmp_path):
    """If saving fails half way, the old checkpoint is untouched and no temp file remains."""
    save_checkpoint(tmp_path / "last.pt", {"model": {}, "epoch": 1})
    with pytest.raises(Exception):
        save_checkpoint(tmp_path / "last.pt", {"model": {}, "bad": lambda: None})
    assert load_checkpoint(tmp_path / "last.pt")["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]
