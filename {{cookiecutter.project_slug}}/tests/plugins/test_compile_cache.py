"""--compile's cache (the ddp answer's plugin): a resumed run loads what the first one compiled; a damaged
or foreign cache is ignored.

Real torch.compile runs (inductor on the CPU, with a tiny own backbone so a compile takes seconds), each in
a process of its own with an empty inductor cache, so only the run folder's cache can carry anything over.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch
from conftest import HANG_S
from run_helpers import PROJECT

from {{ cookiecutter.package_name }} import signing
from {{ cookiecutter.package_name }}.plugins import compile_cache
from {{ cookiecutter.package_name }}.training.wrapping import ParallelError, check_compile

pytestmark = pytest.mark.slow

TINY = textwrap.dedent('''
    from torch import nn

    def tiny():
        return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
''')


@pytest.fixture(scope="module")
def compiled(tiny_data, tmp_path_factory):
    """A function running train.py --compile on the tiny data in a fresh process (its own inductor cache)."""
    if not compile_cache.supported():
        pytest.skip("torch.compiler.save_cache_artifacts arrived in torch 2.7")
    try:
        check_compile(torch.device("cpu"))
    except ParallelError as error:
        pytest.skip(str(error))
    user = tmp_path_factory.mktemp("compile-user")
    (user / "tiny_net.py").write_text(TINY)

    def run(out, *extra: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(user),
               "XDG_DATA_HOME": str(user / "data"),  # this user's signing key, for these tests alone
               "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="inductor-", dir=user)}  # empty for each run
        command = [sys.executable, "train.py", "--data", str(tiny_data), "--out", str(out), "--device", "cpu",
                   "--backbone", "tiny_net:tiny", "--no-pretrained", "--image-size", "32", "--batch-size", "8",
                   "--workers", "0", "--compile", "--progress", "none", *extra]
        return subprocess.run(command, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=HANG_S)
    run.user_data = user / "data"  # where these runs' user keeps the signing key
    return run


@pytest.fixture(scope="module")
def first_epoch(compiled, tmp_path_factory):
    """A run folder after one compiled epoch (shared: each test resumes a copy of it)."""
    out = tmp_path_factory.mktemp("compiled") / "run"
    first = compiled(out, "--epochs", "1")
    assert first.returncode == 0, first.stderr[-2000:]
    return out


def test_a_resumed_compiled_run_loads_the_cache_its_first_run_saved(compiled, first_epoch, tmp_path):
    """Epoch 1 saves compile_cache.bin and what it was made for; the resume to epoch 2 loads it."""
    out = shutil.copytree(first_epoch, tmp_path / "run")
    assert (out / compile_cache.CACHE).stat().st_size > 0
    assert json.loads((out / compile_cache.KEY).read_text())["made_for"]["device"] == "cpu"
    resumed = compiled(out, "--epochs", "2", "--resume", str(out))
    assert resumed.returncode == 0 and "compile cache: loaded" in resumed.stderr, resumed.stderr[-2000:]


class Unpickled:
    """A pickle that creates a file when loaded: what a hostile compile_cache.bin would run."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def damage(out, how: str, marker) -> None:
    """Spoil a run folder's cache: cut it short, say it was made for another device, or swap in a pickle that
    runs code (the attacker can recompute a plain hash, not this user's HMAC)."""
    record = json.loads((out / compile_cache.KEY).read_text())
    if how == "truncated":
        (out / compile_cache.CACHE).write_bytes((out / compile_cache.CACHE).read_bytes()[:100])
    elif how == "another device":
        record["made_for"]["device"] = "cuda:0 (NVIDIA H100 80GB HBM3)"
    else:
        hostile = pickle.dumps(Unpickled(str(marker)))
        (out / compile_cache.CACHE).write_bytes(hostile)
        record["signature"] = hashlib.sha256(hostile).hexdigest()
    (out / compile_cache.KEY).write_text(json.dumps(record))


def test_a_resumed_run_with_a_damaged_cache_compiles_anew_with_a_note(compiled, first_epoch, tmp_path):
    """A cache cut short is not trusted: the resumed run says so and compiles as it would without one."""
    out = shutil.copytree(first_epoch, tmp_path / "run")
    damage(out, "truncated", tmp_path / "unpickled")
    resumed = compiled(out, "--epochs", "2", "--resume", str(out))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "note: compile cache ignored" in resumed.stderr and "compile cache: loaded" not in resumed.stderr


@pytest.mark.parametrize("how", ["truncated", "another device", "a pickle from elsewhere"])
def test_a_damaged_foreign_or_hostile_cache_is_ignored_with_a_note(compiled, first_epoch, tmp_path, monkeypatch,
                                                                   how):
    """What a resumed run's plugin does first (`load`, as CompileCache.start calls it): a cache cut short, made for
    another device, or replaced by a pickle that runs code is not trusted, never unpickled, and said in a note.
    (The run around it is the test above: one compile per resume is minutes of CI.)"""
    monkeypatch.setenv("XDG_DATA_HOME", str(compiled.user_data))  # the key the first run signed with
    out, marker = shutil.copytree(first_epoch, tmp_path / "run"), tmp_path / "unpickled"
    damage(out, how, marker)
    note = compile_cache.load(out, torch.device("cpu"))
    assert note is not None and note.startswith("note: compile cache ignored"), note
    assert not marker.exists()


def test_a_cache_this_user_did_not_sign_never_reaches_torch(tmp_path, monkeypatch):
    """The signature is checked before torch sees the bytes: torch's loader unpickles what a well-formed cache
    holds, so a copied run folder whose cache was swapped (a plain hash recomputed) must never reach it. (The
    hostile file above is refused by torch's own format check too, so only this test sees a missing HMAC check.)"""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "user-data"))
    reached = []
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", lambda data: reached.append(data), raising=False)
    swapped = b"artifacts from elsewhere"
    (tmp_path / compile_cache.CACHE).write_bytes(swapped)
    record = {"made_for": compile_cache.cache_key(torch.device("cpu")),
              "signature": hashlib.sha256(swapped).hexdigest()}
    (tmp_path / compile_cache.KEY).write_text(json.dumps(record))
    note = compile_cache.load(tmp_path, torch.device("cpu"))
    assert note.startswith("note: compile cache ignored") and "not written by this user's runs" in note
    assert reached == []
    record["signature"] = signing.sign(swapped, signing.user_key()[0])  # signed by this user: handed to torch
    (tmp_path / compile_cache.KEY).write_text(json.dumps(record))
    compile_cache.load(tmp_path, torch.device("cpu"))
    assert reached == [swapped]


@pytest.mark.parametrize("how", ["empty", "readable by others", "a link to a key elsewhere"])
def test_a_cache_signed_with_a_key_that_is_not_this_users_private_file_never_reaches_torch(tmp_path, monkeypatch,
                                                                                           how):
    """The reported forgery: with the key empty (or readable by others, or a link to a file someone else wrote),
    anyone can sign a cache. Such a key is not used: a new one is made, the cache ignored with a note saying so."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "user-data"))
    reached = []
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", lambda data: reached.append(data), raising=False)
    key_file = signing.key_file()
    key_file.parent.mkdir(parents=True)
    known = b"" if how == "empty" else b"k" * signing.KEY_BYTES  # what the forger knows the key to be
    planted = tmp_path / "planted.key" if how.startswith("a link") else key_file
    planted.write_bytes(known)
    os.chmod(planted, 0o644 if how == "readable by others" else 0o600)
    if planted != key_file:
        key_file.symlink_to(planted)
    forged = b"artifacts from elsewhere"
    (tmp_path / compile_cache.CACHE).write_bytes(forged)
    record = {"made_for": compile_cache.cache_key(torch.device("cpu")), "signature": signing.sign(forged, known)}
    (tmp_path / compile_cache.KEY).write_text(json.dumps(record))
    note = compile_cache.load(tmp_path, torch.device("cpu"))
    assert note.startswith("note: compile cache ignored") and str(key_file) in note and "new key" in note
    assert reached == [] and not key_file.is_symlink() and len(key_file.read_bytes()) == signing.KEY_BYTES


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes and /dev/zero are POSIX")
@pytest.mark.parametrize("member, kind", [(compile_cache.KEY, "fifo"), (compile_cache.CACHE, "/dev/zero")])
def test_a_copied_run_folders_cache_that_is_a_pipe_or_a_device_is_a_note_not_a_hang(tmp_path, monkeypatch, member,
                                                                                   kind):
    """A run folder from a tar keeps a FIFO as compile_cache.json (read_text waited forever) or a link to /dev/zero
    as compile_cache.bin: the cache is ignored with a note, and torch never sees a byte."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "user-data"))
    reached = []
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", lambda data: reached.append(data), raising=False)
    out = tmp_path / "run"
    out.mkdir()
    (out / compile_cache.CACHE).write_bytes(b"artifacts")
    (out / compile_cache.KEY).write_text(json.dumps({"made_for": compile_cache.cache_key(torch.device("cpu")),
                                                     "signature": ""}))
    (out / member).unlink()
    os.mkfifo(out / member) if kind == "fifo" else (out / member).symlink_to("/dev/zero")
    note = compile_cache.load(out, torch.device("cpu"))
    assert note.startswith("note: compile cache ignored") and reached == []
