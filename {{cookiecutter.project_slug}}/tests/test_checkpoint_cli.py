"""predict.py, evaluate.py and train.py --resume refuse bad checkpoints with one line and a non-zero exit."""

import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import HANG_S

import predict
import train
from {{ cookiecutter.package_name }}.devkit.checkpoint import model_state, save_checkpoint
from {{ cookiecutter.package_name }}.model import build_model

PROJECT = Path(__file__).resolve().parent.parent


class _Payload:
    """Unpickling this would create `marker`: proof that code in the file ran."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture
def evil_checkpoint(tmp_path):
    """A checkpoint-shaped file carrying a pickled payload, and the file the payload would create."""
    marker = tmp_path / "PWNED"
    torch.save({"model": {}, "class_names": ["a"], "config": {"backbone": "x"}, "image_size": 32,
                "payload": _Payload(marker)}, tmp_path / "evil.pt", pickle_module=pickle)
    return tmp_path / "evil.pt", marker


@pytest.mark.slow  # subprocesses: importing torch costs seconds
@pytest.mark.parametrize("script", ["predict.py", "evaluate.py"])
def test_a_payload_checkpoint_is_refused_by_the_cli_and_never_runs(script, evil_checkpoint, tiny_data):
    """A real process: non-zero exit, exactly one stderr line saying it is unsafe, and no marker file."""
    path, marker = evil_checkpoint
    image = next((tiny_data / "val" / "circle").glob("*.png"))
    extra = [str(image)] if script == "predict.py" else ["--data", str(tiny_data)]
    result = subprocess.run([sys.executable, script, str(path), *extra, "--device", "cpu"],
                            cwd=PROJECT, capture_output=True, text=True, timeout=HANG_S)
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0
    assert len(lines) == 1 and "not a safe checkpoint" in lines[0] and "Traceback" not in result.stderr
    assert not marker.exists()


def _predict_error(checkpoint: Path, tiny_data, capsys) -> str:
    image = next((tiny_data / "val" / "circle").glob("*.png"))
    code = predict.main([str(checkpoint), str(image), "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return err[0]


def test_a_missing_checkpoint_is_one_line(tmp_path, tiny_data, capsys):
    """A path that does not exist: exit 2, one line naming it."""
    assert "nope.pt does not exist" in _predict_error(tmp_path / "nope.pt", tiny_data, capsys)


def test_a_truncated_checkpoint_is_one_line(tmp_path, tiny_data, capsys):
    """Half a file: exit 2, one line saying it is truncated or corrupt."""
    model = build_model("{{ cookiecutter.backbone }}", 4, pretrained=False, device=torch.device("cpu"))
    save_checkpoint(tmp_path / "c.pt", {"model": model_state(model), "class_names": list("abcd"),
                                        "config": {"backbone": "{{ cookiecutter.backbone }}"}, "image_size": 32})
    data = (tmp_path / "c.pt").read_bytes()
    (tmp_path / "c.pt").write_bytes(data[: len(data) // 3])
    assert "truncated or corrupt" in _predict_error(tmp_path / "c.pt", tiny_data, capsys)


def test_a_checkpoint_for_another_class_count_names_the_mismatched_keys(tmp_path, tiny_data, capsys):
    """Weights for 4 classes with 5 class names: exit 2, one line naming head.weight and both shapes."""
    model = build_model("{{ cookiecutter.backbone }}", 4, pretrained=False, device=torch.device("cpu"))
    save_checkpoint(tmp_path / "c.pt", {"model": model_state(model), "class_names": list("abcde"),
                                        "config": {"backbone": "{{ cookiecutter.backbone }}"}, "image_size": 32})
    line = _predict_error(tmp_path / "c.pt", tiny_data, capsys)
    assert "head.weight" in line and "(4, " in line and "(5, " in line


def test_resuming_from_a_payload_checkpoint_is_refused_before_anything_is_written(evil_checkpoint, tiny_data,
                                                                                   tmp_path, capsys):
    """train.py --resume with an unsafe file: exit 2, one line, no run directory, no marker."""
    path, marker = evil_checkpoint
    out = tmp_path / "run"
    code = train.main(["--data", str(tiny_data), "--device", "cpu", "--no-pretrained", "--image-size", "32",
                       "--precision", "fp32", "--parallel", "none", "--out", str(out), "--resume", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "not a safe checkpoint" in err[0]
    assert not marker.exists() and not out.exists()
