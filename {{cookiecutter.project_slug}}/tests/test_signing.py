"""This user's signing key: used only when it is this user's private file; anything else is replaced, with a note,
and nothing it signed is trusted (it could have been read, or written, by someone else)."""

from __future__ import annotations

import hashlib
import hmac
import os
import stat

import pytest
import torch
from PIL import Image

import predict
from {{ cookiecutter.package_name }} import signing
from {{ cookiecutter.package_name }}.model_files import Metadata, export_bytes, signature_file


@pytest.fixture
def key_home(tmp_path, monkeypatch):
    """An empty $XDG_DATA_HOME: this test's user has no key yet."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data-home"))
    return signing.key_file()


def _spoil(path, how: str, tmp_path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if how == "a link to a key elsewhere":
        (tmp_path / "planted.key").write_bytes(b"k" * signing.KEY_BYTES)
        os.chmod(tmp_path / "planted.key", 0o600)
        path.symlink_to(tmp_path / "planted.key")
    elif how == "a named pipe":
        os.mkfifo(path)
    else:
        path.write_bytes(b"" if how == "empty" else b"k" * (31 if how == "31 bytes" else signing.KEY_BYTES))
        os.chmod(path, 0o644 if how == "readable by others" else 0o600)
        if how == "another user's":
            os.chown(path, os.geteuid() + 1, -1)


SPOILED = ["empty", "31 bytes", "readable by others", "a link to a key elsewhere", "a named pipe",
           pytest.param("another user's", marks=pytest.mark.skipif(
               not hasattr(os, "geteuid") or os.geteuid() != 0, reason="only root can give a file away"))]


def test_the_first_key_is_made_private(key_home):
    key, note = signing.user_key()
    info = os.lstat(key_home)
    assert note is None and len(key) == signing.KEY_BYTES and stat.S_ISREG(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600 and signing.user_key() == (key, None)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX file kinds and modes")
@pytest.mark.parametrize("how", SPOILED)
def test_a_key_that_is_not_this_users_private_file_is_replaced_with_a_note(key_home, tmp_path, how):
    """Empty, short, readable by others, a link, a FIFO, another user's: a new private key, and a note saying so."""
    _spoil(key_home, how, tmp_path)
    key, note = signing.user_key()
    assert note and str(key_home) in note and "new key" in note
    info = os.lstat(key_home)
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600 and key_home.read_bytes() == key
    assert key != b"k" * signing.KEY_BYTES


@pytest.mark.skipif(os.name != "posix", reason="file modes")
def test_a_pt2_signed_with_a_key_others_could_read_is_refused(key_home, tmp_path, capsys):
    """Someone who could read the key (mode 0644) signs a .pt2 of theirs with it: predict.py refuses it."""
    _spoil(key_home, "readable by others", tmp_path)
    metadata = Metadata(class_names=["a", "b"], image_size=16, mean=[0.5] * 3, std=[0.5] * 3)
    data = export_bytes(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(768, 2)).eval(),
                        torch.zeros(2, 3, 16, 16), "pt2", metadata)
    path = tmp_path / "theirs.pt2"
    path.write_bytes(data)
    signature_file(path).write_text("hmac-sha256:" + hmac.new(key_home.read_bytes(), data, hashlib.sha256)
                                    .hexdigest())
    image = tmp_path / "image.png"
    Image.new("RGB", (16, 16)).save(image)
    assert predict.main([str(path), str(image), "--device", "cpu"]) == 2
    line = capsys.readouterr().err.strip()
    assert "mode 644" in line and "--trust" in line
