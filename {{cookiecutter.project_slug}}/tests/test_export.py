"""export.py and model_files.py: ONNX and .pt2 files that predict.py runs with a checkpoint's labels and
probabilities."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

import export
import predict
from {{ cookiecutter.package_name }} import model_files
from {{ cookiecutter.package_name }}.data.demo import DEMO_CLASSES
from {{ cookiecutter.package_name }}.data.transforms import IMAGENET_MEAN, IMAGENET_STD

CLASSES = sorted(DEMO_CLASSES)
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> list[Path]:
    """Five small real image files of different sizes and colours (predict.py resizes them)."""
    folder = tmp_path_factory.mktemp("photos")
    paths = []
    for i in range(5):
        path = folder / f"img{i}.png"
        Image.new("RGB", (30 + 7 * i, 40), (50 * i % 256, 200 - 30 * i, 90)).save(path)
        paths.append(path)
    return paths


def export_to(checkpoint: Path, fmt: str, out: Path, capsys) -> tuple[int, list[str], list[str]]:
    code = export.main([str(checkpoint), "--format", fmt, "--out", str(out)])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err.splitlines()


def predictions(model_file: Path, images: list[Path], capsys) -> list[dict]:
    """predict.py's --json output, every class ranked, for `model_file` on the CPU."""
    code = predict.main([str(model_file), *map(str, images), "--device", "cpu", "--json", "--topk", "4"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


@pytest.fixture(scope="module")
def exports(checkpoint, tmp_path_factory) -> dict[str, tuple[Path, list[str]]]:
    """Each format exported once: (file, export.py's printed lines)."""
    pytest.importorskip("onnxruntime", reason="needs the export extra: pip install -e '.[export]'")
    folder, results = tmp_path_factory.mktemp("exported"), {}
    for fmt in model_files.FORMATS:
        out, buffer = folder / f"model.{fmt}", io.StringIO()
        with contextlib.redirect_stdout(buffer):  # capsys is per test; this fixture is shared
            code = export.main([str(checkpoint), "--format", fmt, "--out", str(out)])
        assert code == 0, buffer.getvalue()
        results[fmt] = (out, buffer.getvalue().splitlines())
    return results


@pytest.mark.slow
@pytest.mark.parametrize("fmt", model_files.FORMATS)
def test_exported_model_predicts_the_checkpoints_labels_and_probabilities(fmt, exports, checkpoint, images, capsys):
    """predict.py on the exported file: the same labels, in the same order, probabilities within 1e-3."""
    path, printed = exports[fmt]
    parity, wrote = printed
    assert parity.startswith("parity on 5 images of 32 px: max |logit difference| ")
    assert wrote.startswith(f"wrote {path} ({fmt}, ") and "4 classes, 32 px, batch dynamic" in wrote
    reference, candidate = predictions(checkpoint, images, capsys), predictions(path, images, capsys)
    assert [row["path"] for row in candidate] == [row["path"] for row in reference]
    for mine, theirs in zip(candidate, reference):
        assert [entry["label"] for entry in mine["topk"]] == [entry["label"] for entry in theirs["topk"]]
        for a, b in zip(mine["topk"], theirs["topk"]):
            assert a["probability"] == pytest.approx(b["probability"], abs=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", model_files.FORMATS)
def test_exported_file_carries_what_inference_needs_and_any_batch_size(fmt, exports):
    """Class names, image size and normalisation travel in the file; batches of 1 and 7 both run."""
    predictor = model_files.load(exports[fmt][0], CPU)
    assert predictor.metadata.class_names == CLASSES and predictor.metadata.image_size == 32
    assert predictor.metadata.mean == list(IMAGENET_MEAN) and predictor.metadata.std == list(IMAGENET_STD)
    for batch in (1, 7):
        assert predictor.predict_logits(torch.randn(batch, 3, 32, 32)).shape == (batch, len(CLASSES))


def test_export_without_onnx_is_one_line_and_exit_2(checkpoint, tmp_path, monkeypatch, capsys):
    """--format onnx without the onnx package (its import fails as if absent): one line naming the extra, no file."""
    monkeypatch.setitem(sys.modules, "onnx", None)
    out = tmp_path / "model.onnx"
    code, _, err = export_to(checkpoint, "onnx", out, capsys)
    assert code == 2 and err == ["error: --format onnx needs the onnx package: pip install -e '.[export]'"]
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_predict_on_onnx_without_onnxruntime_is_one_line_and_exit_2(images, tmp_path, monkeypatch, capsys):
    """An .onnx file without onnxruntime installed: one line naming the extra, exit 2."""
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    model = tmp_path / "model.onnx"
    model.write_bytes(b"an onnx file would be here")
    code = predict.main([str(model), str(images[0]), "--device", "cpu"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and err == ["error: an .onnx model needs the onnxruntime package: pip install -e '.[export]'"]


def test_unreadable_pt2_and_half_with_an_exported_file_exit_2(images, tmp_path, capsys):
    """A corrupt .pt2 is one line naming it; --half is for checkpoints only; both exit 2."""
    broken = tmp_path / "model.pt2"
    broken.write_bytes(b"not a zip archive")
    assert predict.main([str(broken), str(images[0]), "--device", "cpu", "--trust", str(broken)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {broken} is not a readable .pt2 file")
    assert predict.main([str(broken), str(images[0]), "--device", "cpu", "--half"]) == 2
    assert "--half" in capsys.readouterr().err
