"""Exported models: ONNX (`torch.onnx`, run with onnxruntime) and `.pt2` (`torch.export`), with what inference needs.

An exported file holds the plain model (no wrappers) taking normalised images (B, 3, H, W) and
returning logits (B, C), the batch dimension dynamic by default, and beside it the metadata a
consumer needs: class names, image size, and the normalisation (mean, std) the transforms apply
(ONNX: `metadata_props`; `.pt2`: `extra_files` of torch.export.save, as `metadata.json`).

`load(path, device)` gives back a `Predictor` for an `.onnx` or a `.pt2`; a checkpoint's model
becomes one with `TorchPredictor`, so predict.py only calls `predict_logits(images)`. ONNX and onnxruntime are an
optional dependency group (`pip install -e '.[export]'`): a missing one is a MissingDependencyError.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
import os
from pathlib import Path

import torch
from torch import nn

from .data.transforms import Preprocessing
from .devkit import checkpoint
from .errors import ConfigError, MissingDependencyError, UserError
from .pt2_check import check_pt2

FORMATS = ("onnx", "pt2")
INPUT_NAME, OUTPUT_NAME = "images", "logits"
METADATA_FILE = "metadata.json"  # the .pt2 archive's extra file
MAX_BATCH = 4096  # the dynamic batch dimension's upper bound (torch.export needs one to reason about shapes)


class ExportError(UserError):
    """An exported file or model folder that cannot be read or written, or a format this project does not export."""


@dataclasses.dataclass
class Metadata:
    """What inference needs beside the weights."""

    class_names: list[str]
    image_size: int
    mean: list[float]
    std: list[float]
    backbone: str = ""
    epoch: int = 0

    resize_size: int | None = None  # evaluation resizes the shorter side to this, then crops; None: image_size
    interpolation: str = "bilinear"  # how that resize samples

    def preprocessing(self) -> Preprocessing:
        """The transforms' settings: the same resize, crop and normalisation as training's evaluation."""
        return Preprocessing(self.image_size, self.resize_size, tuple(self.mean), tuple(self.std),  # TypeError: bad
                             interpolation=self.interpolation)

    def to_strings(self) -> dict[str, str]:
        """Each field as a JSON string (ONNX metadata_props are string pairs)."""
        return {key: json.dumps(value) for key, value in dataclasses.asdict(self).items()}

    @classmethod
    def read(cls, values: str | dict[str, str], source: str) -> Metadata:
        """Parse what export_bytes wrote: a .pt2's metadata.json, or an ONNX file's metadata_props (each field a JSON
        string); refuse a file that lacks it, or whose values cannot be right."""
        names = [field.name for field in dataclasses.fields(cls)]
        try:
            values = json.loads(values or "{}") if isinstance(values, str) else {
                name: json.loads(values[name]) for name in names if name in values}
            metadata = cls(**{name: values[name] for name in names if name in values})
            problem = metadata.problem()
        except (TypeError, ValueError, RecursionError) as error:
            raise ExportError(f"{source} lacks the metadata this project's export.py writes ({error})") from None
        if problem:
            raise ExportError(f"{source}: metadata {problem}")
        return metadata

    def problem(self) -> str | None:
        """What a file from elsewhere may get wrong: the class names, the sizes, the normalisation; else None."""
        names = self.class_names
        if not isinstance(names, list) or not names or not all(isinstance(name, str) and name for name in names):
            return f"class_names is {str(names)[:80]}; expected a list of class names"
        if len(set(names)) != len(names):
            return "class_names names a class twice"
        return self.preprocessing().problem()


def format_of(path: str | os.PathLike) -> str | None:
    """'onnx' or 'pt2' for an exported file's name, None for anything else (a checkpoint, a run folder)."""
    suffix = Path(path).suffix.lower().removeprefix(".")
    return suffix if suffix in FORMATS else None


def require(module: str, feature: str):
    """Import an optional dependency of the `export` extra (onnx, onnxruntime, safetensors), or say how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        package = module.partition(".")[0]
        raise MissingDependencyError(f"{feature} needs the {package} package: pip install -e '.[export]'") from None


def export_bytes(model: nn.Module, example: torch.Tensor, fmt: str, metadata: Metadata, *,
                 dynamic_batch: bool = True) -> bytes:
    """The exported file's bytes: `model` (in eval mode, on example's device) traced with `example` images."""
    model = checkpoint.unwrap(model).eval()  # the file holds the plain model, whatever wraps it here
    dynamic_shapes = ({0: torch.export.Dim("batch", min=1, max=MAX_BATCH)},) if dynamic_batch else None
    if fmt == "pt2":
        program = torch.export.export(model, (example,), dynamic_shapes=dynamic_shapes)
        buffer = io.BytesIO()
        torch.export.save(program, buffer, extra_files={METADATA_FILE: json.dumps(dataclasses.asdict(metadata))})
        return buffer.getvalue()
    if fmt == "onnx":
        onnx = require("onnx", "--format onnx")
        require("onnxscript", "--format onnx")  # torch.onnx's exporter (dynamo=True) is written in onnxscript
        names = {"input_names": [INPUT_NAME], "output_names": [OUTPUT_NAME]}
        if torch.__version__ >= (2, 5):  # torch.onnx.export(dynamo=True, dynamic_shapes=...) arrived in torch 2.5
            proto = torch.onnx.export(model, (example,), dynamo=True, dynamic_shapes=dynamic_shapes, verbose=False,
                                      **names).model_proto
        else:  # torch 2.4's exporter (TorchScript tracing): the batch dimension named dynamic in dynamic_axes
            buffer = io.BytesIO()
            axes = {INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}} if dynamic_batch else None
            torch.onnx.export(model, (example,), buffer, dynamic_axes=axes, opset_version=17, **names)
            proto = onnx.load_from_string(buffer.getvalue())
        onnx.helper.set_model_props(proto, metadata.to_strings())
        return proto.SerializeToString()
    raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")


class TorchPredictor:
    """A PyTorch module (a checkpoint's model, or a .pt2 program's) on a device; inputs moved and cast to it."""

    note = None  # what the user should hear about where it runs (predict.py prints it)

    def __init__(self, model: nn.Module, metadata: Metadata, device: torch.device):
        self.model, self.metadata, self.device = model, metadata, device
        self.dtype = next(model.parameters()).dtype

    @torch.inference_mode()
    def predict_logits(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) float images, on the CPU -> (B, C) float32 logits, on the CPU (moved and cast to the model)."""
        logits = self.model(images.to(self.device, dtype=self.dtype, non_blocking=True))  # (B, C)
        return logits.float().cpu()


class OnnxPredictor:
    """An ONNX model in an onnxruntime session (CPU, or CUDA where onnxruntime has its CUDA provider)."""

    device = torch.device("cpu")  # where the model reads its inputs from (pinned batches help only a GPU)

    def __init__(self, model_bytes: bytes, device: torch.device, source: str, *, explicit: bool = True):
        ort = require("onnxruntime", "an .onnx model")
        _refuse_external_data(model_bytes, source)
        providers, self.note = _providers(ort, device, explicit)
        try:
            self.session = ort.InferenceSession(model_bytes, providers=providers)
            self.input_name = self.session.get_inputs()[0].name
        except Exception as error:  # onnxruntime's own types (InvalidProtobuf, Fail, ...) for junk or damage
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise ExportError(f"{source} is not a readable .onnx model ({reason})") from None
        self.metadata = Metadata.read(self.session.get_modelmeta().custom_metadata_map, source)

    def predict_logits(self, images: torch.Tensor) -> torch.Tensor:
        (logits,) = self.session.run(None, {self.input_name: images.float().contiguous().numpy()})
        return torch.from_numpy(logits)  # (B, C)


Predictor = TorchPredictor | OnnxPredictor  # what predict.py runs: metadata, device, note, predict_logits(images)


def _refuse_external_data(model_bytes: bytes, source: str) -> None:
    """An .onnx file whose weights name other files (external data) would read whatever paths it names: refused."""
    onnx = require("onnx", "an .onnx model")
    try:
        proto = onnx.load_model_from_string(model_bytes)
    except Exception as error:  # protobuf's DecodeError and kin: junk or a truncated file
        raise ExportError(f"{source} is not a readable .onnx model ({type(error).__name__})") from None
    graphs = [proto.graph]
    while graphs:  # subgraphs (If, Loop) hold initializers too
        graph = graphs.pop()
        tensors = list(graph.initializer)
        for node in graph.node:
            for attribute in node.attribute:
                tensors.extend([attribute.t, *attribute.tensors])
                graphs.extend([attribute.g, *attribute.graphs] if attribute.HasField("g") else attribute.graphs)
        named = next((tensor.name for tensor in tensors if tensor.data_location == onnx.TensorProto.EXTERNAL), None)
        if named is not None:
            raise ExportError(f"{source}: tensor {named!r} is stored in another file (external data); refused: "
                              "this project exports self-contained models")


def _providers(ort, device: torch.device, explicit: bool = True) -> tuple[list, str | None]:
    """onnxruntime's execution providers for `device`, and a note when a default device fell back to the CPU.

    An explicit device the installed onnxruntime cannot run on is refused (ConfigError); a default
    one (auto picked a GPU, but the `export` extra installs the CPU-only onnxruntime) runs on the CPU.
    """
    available = ort.get_available_providers()
    if device.type == "cpu":
        return ["CPUExecutionProvider"], None
    if device.type == "cuda" and "CUDAExecutionProvider" in available:
        return [("CUDAExecutionProvider", {"device_id": device.index or 0}), "CPUExecutionProvider"], None
    reason = f"onnxruntime here cannot run on {device} (providers: {', '.join(available)})"
    if explicit:
        raise ConfigError(f"{reason}; use --device cpu, or install onnxruntime-gpu for cuda")
    return ["CPUExecutionProvider"], f"note: {reason}; running the .onnx model on the cpu"


def predictor_from_bytes(data: bytes, fmt: str, device: torch.device, source: str, *,
                         explicit: bool = True) -> Predictor:
    """A Predictor for an exported model held in memory (export.py checks a file before writing it).

    `explicit=False`: `device` was a default, which an .onnx model may leave for the CPU (with a note).
    """
    if fmt == "onnx":
        return OnnxPredictor(data, device, source, explicit=explicit)
    # torch.export.load trusts its input (pickles, compiled code, eval'd expressions); junk is refused here too
    check_pt2(data, source)
    extra = {METADATA_FILE: ""}
    try:
        program = torch.export.load(io.BytesIO(data), extra_files=extra)
    except Exception as error:  # a truncated or foreign archive: torch raises several kinds
        raise ExportError(f"{source} is not a readable .pt2 file ({type(error).__name__}: {error})") from None
    return TorchPredictor(program.module().to(device), Metadata.read(extra[METADATA_FILE], source), device)


def load(path: str | os.PathLike, device: torch.device, *, explicit: bool = True) -> Predictor:
    """A Predictor for an .onnx or a .pt2 file, on `device` (`explicit=False`: a default, see predictor_from_bytes),
    checked for one logit per class name on one blank image before any of the user's images is read."""
    fmt = format_of(path)
    if fmt is None:
        raise ExportError(f"{path} is not an exported model (.onnx or .pt2)")
    if not Path(path).is_file():
        raise ExportError(f"{path} does not exist")
    predictor = predictor_from_bytes(Path(path).read_bytes(), fmt, device, str(path), explicit=explicit)
    size, count = predictor.metadata.image_size, len(predictor.metadata.class_names)
    try:
        logits = predictor.predict_logits(torch.zeros(1, 3, size, size))
    except Exception as error:  # onnxruntime's and torch's own errors for an input the model cannot take
        raise ExportError(f"{path} cannot classify a {size} px image as its metadata says "
                          f"({type(error).__name__})") from None
    if tuple(logits.shape) != (1, count):
        raise ExportError(f"{path} gives logits of shape {tuple(logits.shape)} for one image, but its metadata "
                          f"names {count} classes")
    return predictor
