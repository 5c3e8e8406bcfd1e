"""predict.py on an .onnx file picks a device the installed onnxruntime can run on.

The `export` extra installs the CPU-only onnxruntime: on a GPU machine `auto` picks cuda:0, which it
cannot use. A default device falls back to the CPU with a note; an explicit one is a one-line exit 2.
The GPU is faked (fake_cuda) and the model file is a tiny hand-made ONNX graph, so this runs anywhere.
"""

from __future__ import annotations

import types

import pytest
import torch
from PIL import Image

import predict
from {{ cookiecutter.package_name }} import config, model_files

CLASSES = ["a", "b", "c", "d"]
CUDA_COUNT = torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory):
    """A 4-class .onnx (global average pool, then a linear map) carrying predict.py's metadata."""
    onnx = pytest.importorskip("onnx", reason="needs the export extra: pip install -e '.[export]'")
    pytest.importorskip("onnxruntime", reason="needs the export extra: pip install -e '.[export]'")
    helper = onnx.helper
    weight = helper.make_tensor("weight", onnx.TensorProto.FLOAT, [3, 4], [0.1 * i for i in range(12)])
    graph = helper.make_graph(
        [helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),  # (B, 3, 1, 1)
         helper.make_node("Flatten", ["pooled"], ["flat"]),  # (B, 3)
         helper.make_node("MatMul", ["flat", "weight"], ["logits"])],  # (B, 4)
        "tiny", [helper.make_tensor_value_info("images", onnx.TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["batch", 4])], [weight])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8  # readable by every onnxruntime the extra allows
    helper.set_model_props(proto, model_files.Metadata(CLASSES, 32, [0.5] * 3, [0.5] * 3).to_strings())
    path = tmp_path_factory.mktemp("onnx") / "model.onnx"
    path.write_bytes(proto.SerializeToString())
    image = path.parent / "photo.png"
    Image.new("RGB", (40, 30), (200, 30, 90)).save(image)
    return path, image


def _predict(capsys, onnx_model, *args: str) -> tuple[int, list[str]]:
    path, image = onnx_model
    code = predict.main([str(path), str(image), *args])
    return code, capsys.readouterr().err.strip().splitlines()


def _cpu_only_onnxruntime(monkeypatch) -> None:
    """onnxruntime as the `export` extra installs it: no CUDA provider."""
    import onnxruntime

    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CPUExecutionProvider"])


def test_default_device_on_a_gpu_machine_runs_the_onnx_model_on_the_cpu_with_a_note(
        onnx_model, fake_cuda, monkeypatch, capsys):
    """auto picks cuda:0; the CPU-only onnxruntime cannot use it, so the CPU runs the model and says so once."""
    fake_cuda(free_gib=[70])
    _cpu_only_onnxruntime(monkeypatch)
    monkeypatch.setattr(config, "DEFAULT_DEVICE", "auto")
    monkeypatch.delenv(config.DEVICE_ENV_VAR, raising=False)
    code, err = _predict(capsys, onnx_model)
    assert code == 0, err
    assert len(err) == 1 and err[0].startswith("note: onnxruntime here cannot run on cuda:0")
    assert err[0].endswith("running the .onnx model on the cpu")


def test_an_explicit_cuda_device_without_a_cuda_provider_is_exit_2_with_one_line(
        onnx_model, fake_cuda, monkeypatch, capsys):
    """--device cuda asks for the GPU: refused in one line naming the fix, not silently run on the CPU."""
    fake_cuda(free_gib=[70])
    _cpu_only_onnxruntime(monkeypatch)
    code, err = _predict(capsys, onnx_model, "--device", "cuda")
    assert code == 2 and len(err) == 1
    assert err[0].startswith("error: onnxruntime here cannot run on cuda:0") and "--device cpu" in err[0]


@pytest.mark.parametrize("explicit", [True, False])
def test_a_cuda_provider_serves_cuda_devices_explicit_or_default(explicit):
    """Where onnxruntime has CUDA, a cuda:1 run uses it on that GPU, the CPU as its fallback for unsupported ops."""
    ort = types.SimpleNamespace(get_available_providers=lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    providers, note = model_files._providers(ort, torch.device("cuda", 1), explicit)
    assert providers == [("CUDAExecutionProvider", {"device_id": 1}), "CPUExecutionProvider"] and note is None


@pytest.mark.cuda
@pytest.mark.skipif(CUDA_COUNT < 1, reason="needs a CUDA device")
def test_predict_on_onnx_with_the_default_device_works_on_a_real_gpu(onnx_model, monkeypatch, capsys):
    """On a GPU machine, predict.py model.onnx with no --device exits 0 with whichever onnxruntime is installed."""
    monkeypatch.setattr(config, "DEFAULT_DEVICE", "auto")
    monkeypatch.delenv(config.DEVICE_ENV_VAR, raising=False)
    code, err = _predict(capsys, onnx_model)
    assert code == 0, err
