"""Checkpoints are plain CPU data, free of wrapper prefixes, atomic, and safely loaded."""

import argparse
import collections
import io
import os
import pickle
import stat
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import DEVICES, HANG_S, cpu_data_parallel
from torch import nn

from {{ cookiecutter.package_name }}.devkit.atomic import atomic_write, remove_partial_writes
from {{ cookiecutter.package_name }}.devkit.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_model_state,
    model_state,
    plain_key,
    save_checkpoint,
    to_cpu,
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


def test_wrapper_prefixes_never_reach_the_file(any_gpu_count):
    """A DataParallel-wrapped model's keys are saved as the plain model names them."""
    state = model_state(cpu_data_parallel(_net()))
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
    """A path that does not exist is named in the error; one that exists but is no file (a device) says so."""
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt")
    with pytest.raises(CheckpointError, match=f"{os.devnull} is not a file"):
        load_checkpoint(os.devnull)


def test_a_failed_write_leaves_the_previous_file_whole(tmp_path):
    """If saving fails half way, the old checkpoint is untouched and no temp file remains."""
    save_checkpoint(tmp_path / "last.pt", {"model": {}, "epoch": 1})
    with pytest.raises((AttributeError, pickle.PicklingError, TypeError)):  # a lambda cannot be pickled
        save_checkpoint(tmp_path / "last.pt", {"model": {}, "bad": lambda: None})
    assert load_checkpoint(tmp_path / "last.pt")["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def _saved_bytes(tmp_path) -> bytes:
    model = _net()
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    save_checkpoint(tmp_path / "c.pt", {"model": model_state(model), "optimizer": to_cpu(optimizer.state_dict())})
    return (tmp_path / "c.pt").read_bytes()


def test_a_file_cut_at_any_byte_is_a_checkpoint_error(tmp_path):
    """Truncation anywhere (a copy interrupted, a full disk) is reported as corrupt, never as another error."""
    data = _saved_bytes(tmp_path)
    for cut in range(0, len(data), max(1, len(data) // 200)):
        (tmp_path / "cut.pt").write_bytes(data[:cut])
        with pytest.raises(CheckpointError, match="corrupt"):
            load_checkpoint(tmp_path / "cut.pt")


def test_flipped_bits_in_tensor_data_fail_the_crc_check(tmp_path):
    """Bit rot inside a tensor's bytes is caught by the zip CRC-32, which torch.load alone would not check."""
    data = bytearray(_saved_bytes(tmp_path))
    with zipfile.ZipFile(tmp_path / "c.pt") as archive:
        member = next(info for info in archive.infolist() if "/data/" in info.filename and info.file_size >= 4)
    # The local header (30 bytes, then name and extra field; torch pads the extra field to align
    # the data) gives where the member's bytes start.
    name_length, extra_length = struct.unpack("<HH", data[member.header_offset + 26: member.header_offset + 30])
    offset = member.header_offset + 30 + name_length + extra_length
    data[offset] ^= 0x01
    (tmp_path / "rot.pt").write_bytes(bytes(data))
    torch.load(tmp_path / "rot.pt", map_location="cpu", weights_only=True)  # plain torch would accept it
    with pytest.raises(CheckpointError, match="CRC"):
        load_checkpoint(tmp_path / "rot.pt")


@pytest.mark.parametrize("fmt", ["zip", "legacy", "raw-pickle"])
def test_a_pickled_payload_in_any_format_is_refused_and_never_runs(tmp_path, fmt):
    """torch's zip format, its legacy format and a bare pickle: code inside is refused, never executed."""
    marker, path = tmp_path / "PWNED", tmp_path / "evil.pt"
    payload = {"model": {}, "x": _Payload(marker)}
    with open(path, "wb") as handle:
        if fmt == "raw-pickle":
            pickle.dump(payload, handle, protocol=2)
        else:
            torch.save(payload, handle, _use_new_zipfile_serialization=fmt == "zip")
    with pytest.raises(CheckpointError):
        load_checkpoint(path)
    assert not marker.exists()


def test_saved_state_shares_no_memory_with_the_live_model():
    """Saving copies: editing the saved state leaves the model as it was."""
    model = _net()
    before = {key: value.clone() for key, value in model.state_dict().items()}
    state = model_state(model)
    for tensor in state.values():
        tensor.add_(1)
    assert all(torch.equal(model.state_dict()[key], value) for key, value in before.items())


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_optimizer_state_loaded_from_cpu_follows_the_parameters_device(tmp_path, device):
    """Optimizer moments saved on CPU land on the device of the model they are loaded into."""
    model = _net()
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    save_checkpoint(tmp_path / "c.pt", {"model": model_state(model), "optimizer": to_cpu(optimizer.state_dict())})
    state = load_checkpoint(tmp_path / "c.pt", map_location="cpu")
    target = _net().to(device)
    fresh = torch.optim.AdamW(target.parameters())
    fresh.load_state_dict(state["optimizer"])
    moments = [value for per_param in fresh.state.values() for key, value in per_param.items() if key != "step"]
    assert moments and all(tensor.device == device for tensor in moments)


def _tag_storages_as(location: str):
    """A torch.serialization location tagger that labels every storage `location`, as a GPU save does."""
    return (0, lambda storage: location, lambda storage, location: None)


def test_a_checkpoint_saved_from_cuda_tensors_loads_on_this_machine(tmp_path, monkeypatch):
    """A file whose storages say 'cuda:0' (what saving GPU tensors writes) loads through load_checkpoint on CPU.

    Without a GPU the file is made by relabelling the storages' location at save time, the
    only place where a CUDA save differs from a CPU one; the bytes of the tensors are the same.
    """
    model = _net()
    registry = list(torch.serialization._package_registry)  # private, restored by monkeypatch
    monkeypatch.setattr(torch.serialization, "_package_registry", [_tag_storages_as("cuda:0"), *registry])
    torch.save({"model": model.state_dict()}, tmp_path / "gpu.pt")
    monkeypatch.setattr(torch.serialization, "_package_registry", registry)
    with zipfile.ZipFile(tmp_path / "gpu.pt") as archive:
        pickled = archive.read(next(name for name in archive.namelist() if name.endswith("data.pkl")))
    assert b"cuda:0" in pickled and b"cpu" not in pickled
    if not torch.cuda.is_available():  # proof that the label matters: without map_location it fails here
        # torch 2.4's weights_only unpickler wraps the RuntimeError in an UnpicklingError
        with pytest.raises((RuntimeError, pickle.UnpicklingError), match="CUDA"):
            torch.load(tmp_path / "gpu.pt", weights_only=True)
    state = load_checkpoint(tmp_path / "gpu.pt", map_location="cpu")
    assert all(tensor.device.type == "cpu" for tensor in state["model"].values())
    assert all(torch.equal(state["model"][key], value) for key, value in model.state_dict().items())


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_checkpoint_saved_on_cuda_holds_cpu_tensors_and_loads_on_cpu(tmp_path):
    """Really on the GPU: model and optimizer on cuda:0, saved; the file names no CUDA storage and loads on CPU."""
    device = torch.device("cuda:0")
    model = _net().to(device)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4, device=device)).sum().backward()
    optimizer.step()
    save_checkpoint(tmp_path / "c.pt", {"model": model_state(model), "optimizer": to_cpu(optimizer.state_dict())})
    with zipfile.ZipFile(tmp_path / "c.pt") as archive:
        pickled = archive.read(next(name for name in archive.namelist() if name.endswith("data.pkl")))
    assert b"cuda" not in pickled
    assert all(p.device == device for p in model.parameters())  # saving did not move the live model
    state = load_checkpoint(tmp_path / "c.pt", map_location="cpu")
    assert all(torch.equal(state["model"][k], v.cpu()) for k, v in model.state_dict().items())


def test_partial_writes_left_by_a_killed_process_are_removed_and_checkpoints_kept(tmp_path):
    """Temp files named like atomic_file's go; last.pt and other files stay."""
    save_checkpoint(tmp_path / "last.pt", {"model": {}, "epoch": 1})
    (tmp_path / ".last.pt.x1y2.tmp").write_bytes(b"half")
    (tmp_path / "notes.txt").write_text("keep")
    removed = remove_partial_writes(tmp_path)
    assert [p.name for p in removed] == [".last.pt.x1y2.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt", "notes.txt"]


def test_a_write_that_fails_before_the_rename_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    """An error after the data is on disk, at os.replace: the old file is intact, the temp is gone."""
    save_checkpoint(tmp_path / "last.pt", {"model": {}, "epoch": 1})

    def fail(source, target):
        raise OSError("disk vanished")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        save_checkpoint(tmp_path / "last.pt", {"model": {}, "epoch": 2})
    monkeypatch.undo()
    assert load_checkpoint(tmp_path / "last.pt")["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_files_get_the_permissions_a_plain_open_would_give(tmp_path, umask, mode):
    """Checkpoints and text files follow the umask like open() does, not mkstemp's private 0600."""
    previous = os.umask(umask)
    try:
        save_checkpoint(tmp_path / "last.pt", {"epoch": 1})
        atomic_write(tmp_path / "metrics.csv", "epoch\n1\n")
        with open(tmp_path / "plain.txt", "w") as handle:
            handle.write("x")
    finally:
        os.umask(previous)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in tmp_path.iterdir()}
    assert modes == {"last.pt": mode, "metrics.csv": mode, "plain.txt": mode}


def test_atomic_write_takes_text_and_bytes_and_replaces_the_file_whole(tmp_path):
    """Text is written as UTF-8 without newline translation; bytes as they are; no temp file stays."""
    atomic_write(tmp_path / "a.txt", "naïve\r\n")
    assert (tmp_path / "a.txt").read_bytes() == "naïve\r\n".encode()
    atomic_write(tmp_path / "a.txt", b"\x00\x01")
    assert (tmp_path / "a.txt").read_bytes() == b"\x00\x01"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


# --- Wrapped submodules, and values weights_only loading would refuse --------------------------------

class _Features(nn.Module):
    """features + classifier, the shape of AlexNet and VGG, whose features imagenet main.py wraps alone."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
        self.classifier = nn.Linear(3, 2)


def _wrapped_features(seed: int) -> _Features:
    torch.manual_seed(seed)
    model = _Features()
    model.features = cpu_data_parallel(model.features)  # a no-op wrapper on the CPU; its keys gain 'module.'
    return model


def test_a_wrapped_submodule_leaves_no_wrapper_hop_in_the_saved_keys(any_gpu_count):
    """model.features = DataParallel(model.features): the file says features.0.weight, not features.module.0.weight."""
    model = _wrapped_features(0)
    assert "features.module.0.weight" in model.state_dict()
    assert sorted(model_state(model)) == sorted(_Features().state_dict())


def test_a_submodule_really_named_module_keeps_its_name(any_gpu_count):
    """Only wrappers' hops are removed: the model's structure says which 'module' is a wrapper."""
    model = nn.Sequential()
    model.module = nn.Linear(2, 2)
    assert plain_key(model, "module.weight") == "module.weight"
    assert sorted(model_state(cpu_data_parallel(model))) == ["module.bias", "module.weight"]


@pytest.mark.parametrize("wrap", ["none", "features", "whole"])
def test_weights_load_into_a_plain_or_wrapped_model_alike(wrap, any_gpu_count):
    """A checkpoint resumes into the model as the script wraps it: whole, one submodule, or not at all."""
    saved = model_state(_wrapped_features(0))
    target = _wrapped_features(1) if wrap == "features" else _Features()
    target = cpu_data_parallel(target) if wrap == "whole" else target
    load_model_state(target, saved, "saved")
    assert all(torch.equal(model_state(target)[key], value) for key, value in saved.items())


def test_a_raw_state_dict_with_wrapper_hops_loads_into_the_plain_model(any_gpu_count):
    """Someone's torch.save(model.state_dict()) of a wrapped submodule still fits the plain model."""
    raw = _wrapped_features(0).state_dict()
    plain = _Features()
    load_model_state(plain, raw, "raw")
    assert torch.equal(plain.features[0].weight, raw["features.module.0.weight"])


Pair = collections.namedtuple("Pair", "a b")  # at module level, so that pickle can find it


def _weights_only_accepts(value) -> bool:
    """The oracle: whether torch.load(weights_only=True) loads a file holding `value`."""
    buffer = io.BytesIO()
    torch.save({"x": value}, buffer)
    buffer.seek(0)
    try:
        torch.load(buffer, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        return False
    return True


VALUES = [
    torch.ones(2), nn.Parameter(torch.ones(1)), torch.device("cpu"), torch.float16, torch.Size([2]), 3, 2.5, 1j,
    True, None, "text", b"bytes", bytearray(b"x"), {1, 2}, (1, [2, {"a": 3}]), collections.OrderedDict(a=1),
    argparse.Namespace(lr=0.1), collections.defaultdict(int), range(3), frozenset([1]),
    Pair(1, 2), slice(2),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda value: type(value).__name__)
def test_save_refuses_exactly_what_weights_only_loading_would_refuse(tmp_path, value):
    """Refused at save time, not discovered at resume time: save_checkpoint agrees with torch.load's allow-list."""
    path = tmp_path / "c.pt"
    if _weights_only_accepts(value):
        save_checkpoint(path, {"config": {"x": value}})
        load_checkpoint(path)
    else:
        with pytest.raises(TypeError) as info:
            save_checkpoint(path, {"config": {"x": value}})
        assert f"config.x: {type(value).__module__}.{type(value).__qualname__} would be refused" in str(info.value)
        assert list(tmp_path.iterdir()) == []  # nothing written, not even a temp file


def test_save_names_the_key_path_of_an_argparse_namespace_and_a_numpy_number(tmp_path):
    """One line naming where the offending value sits, and its class."""
    np = pytest.importorskip("numpy")
    with pytest.raises(TypeError) as info:
        save_checkpoint(tmp_path / "c.pt", {"model": {}, "config": {"args": argparse.Namespace(lr=0.1)}})
    assert str(info.value).startswith(f"cannot save {tmp_path / 'c.pt'}: config.args: argparse.Namespace would be")
    assert "\n" not in str(info.value)
    with pytest.raises(TypeError, match=r"metrics\[1\]\.acc: numpy\.float64 would be refused"):
        save_checkpoint(tmp_path / "c.pt", {"metrics": [{"acc": 0.5}, {"acc": np.float64(0.7)}]})


def test_a_refused_path_inside_vars_args_names_str_path_as_the_fix(tmp_path):
    """vars(args) holding an argparse Path value: the message names str(path), not vars(args) again."""
    args = argparse.Namespace(lr=0.1, out=Path("runs/exp1"))
    with pytest.raises(TypeError) as info:
        save_checkpoint(tmp_path / "c.pt", {"args": vars(args)})
    assert "args.out: pathlib." in str(info.value) and "store str(path) instead" in str(info.value)
    assert "vars(args)" not in str(info.value)
    with pytest.raises(TypeError, match=r"store vars\(args\) instead"):
        save_checkpoint(tmp_path / "c.pt", {"args": args})


def test_loading_a_refused_class_says_which_in_one_plain_line(tmp_path):
    """torch's refusal spans paragraphs with terminal bold; ours is one line naming the blocked class."""
    torch.save({"args": argparse.Namespace(lr=0.1)}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(tmp_path / "foreign.pt")
    message = str(info.value)
    assert message == (f"{tmp_path / 'foreign.pt'} is not a safe checkpoint: it holds argparse.Namespace, "
                       "which weights_only loading refuses")
    assert "\x1b" not in message and "\n" not in message


def test_any_other_refusal_is_one_plain_line_with_torch_s_reason(tmp_path):
    """A pickle opcode weights_only loading does not know: its reason, not torch's paragraphs of advice."""
    (tmp_path / "odd.pt").write_bytes(b"\x80\x02\xff.")  # protocol 2, then opcode 0xff
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(tmp_path / "odd.pt")
    assert str(info.value) == (f"{tmp_path / 'odd.pt'} is not a safe checkpoint: "
                               "weights_only loading refuses it (Unsupported operand 255)")


def test_the_portable_checkpoint_pattern_copies_with_atomic_py_alone(tmp_path):
    """checkpoint.py and atomic.py copied into another project, nothing else of the kit, save and load a model."""
    kit = tmp_path / "their_project"
    kit.mkdir()
    (kit / "__init__.py").write_text("")
    devkit = Path(save_checkpoint.__code__.co_filename).parent
    for name in ("checkpoint.py", "atomic.py"):
        (kit / name).write_text((devkit / name).read_text())
    script = (
        "import torch\n"
        "from their_project.checkpoint import load_checkpoint, load_model_state, model_state, save_checkpoint\n"
        "model = torch.nn.DataParallel(torch.nn.Linear(3, 2))\n"
        "save_checkpoint('ckpt.pt', {'model': model_state(model), 'epoch': 1})\n"
        "fresh = torch.nn.Linear(3, 2)\n"
        "load_model_state(fresh, load_checkpoint('ckpt.pt')['model'])\n"
        "assert torch.equal(fresh.weight, model.module.weight.cpu())\n"  # DataParallel moves it to a lone GPU
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=HANG_S, check=False)
    assert done.returncode == 0, done.stderr
