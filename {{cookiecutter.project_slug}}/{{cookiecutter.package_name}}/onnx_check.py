"""An `.onnx` file checked before onnxruntime reads it: only the operators this project's export.py writes.

onnxruntime runs a graph as given: a `Loop` of 10**15 iterations never returns, and running starts at
once (predict.py classifies a blank image to check the model, and the session folds constants when it
loads). Custom domains name kernels from libraries outside ONNX's standard, and external data names other
files to read. The project's exports of torchvision's classifiers hold none of these: plain tensor
arithmetic in the standard domain, no control flow, every weight inside the file. `check_onnx` refuses,
naming the node, anything else. A model of your own whose export uses an operator outside `OPERATORS`
is refused by export.py itself; add the operator there once you know it is arithmetic (no subgraph).
"""

from __future__ import annotations

from .errors import MissingDependencyError, UserError


class UnsafeOnnxError(UserError):
    """An .onnx file with an operator or a reference this project never writes: refused before it runs."""


STANDARD_DOMAINS = {"", "ai.onnx"}
OPERATORS = frozenset({  # torch.onnx's exports (opset 17-23) of torchvision's classifiers, and their kin
    # arithmetic and comparison, element by element
    "Abs", "Add", "And", "Ceil", "Clip", "Cos", "Div", "Equal", "Erf", "Exp", "Floor", "Greater", "GreaterOrEqual",
    "Less", "LessOrEqual", "Log", "Max", "Mean", "Min", "Mod", "Mul", "Neg", "Not", "Or", "Pow", "Reciprocal",
    "Round", "Sign", "Sin", "Sqrt", "Sub", "Sum", "Tanh", "Where", "Xor",
    # activations and normalisations
    "Elu", "Gelu", "HardSigmoid", "HardSwish", "LeakyRelu", "PRelu", "Relu", "Selu", "Sigmoid", "Softplus",
    "Softmax", "LogSoftmax", "BatchNormalization", "GroupNormalization", "InstanceNormalization",
    "LayerNormalization", "Dropout",
    # layers
    "Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum", "AveragePool", "MaxPool", "GlobalAveragePool",
    "GlobalMaxPool", "Resize", "Pad",
    # reductions
    "ArgMax", "ReduceL2", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "TopK", "CumSum",
    # shapes and indexing
    "Cast", "CastLike", "Concat", "Constant", "ConstantOfShape", "Expand", "Flatten", "Gather", "GatherElements",
    "GatherND", "Identity", "Range", "Reshape", "ScatterElements", "ScatterND", "Shape", "Size", "Slice", "Split",
    "Squeeze", "Tile", "Transpose", "Trilu", "Unsqueeze",
})


def check_onnx(model_bytes: bytes, source: str) -> None:
    """Refuse (UnsafeOnnxError, naming the node or tensor) an .onnx model beyond what export.py writes."""
    try:
        import onnx
    except ImportError:
        raise MissingDependencyError("an .onnx model needs the onnx package: pip install -e '.[export]'") from None
    try:
        proto = onnx.load_model_from_string(model_bytes)
    except Exception as error:  # protobuf's DecodeError and kin: junk or a truncated file
        raise UnsafeOnnxError(f"{source} is not a readable .onnx model ({type(error).__name__})") from None
    if proto.functions:  # local functions: operators the file defines itself, in a domain of its own
        function = proto.functions[0]
        raise UnsafeOnnxError(f"{source} defines its own operator {function.domain}.{function.name}; refused: "
                              "this project's exports use ONNX's standard operators only")
    tensors = [*proto.graph.initializer, *(part for sparse in proto.graph.sparse_initializer
                                            for part in (sparse.values, sparse.indices))]
    for node in proto.graph.node:
        op = f"{node.domain}.{node.op_type}" if node.domain else node.op_type
        if node.domain not in STANDARD_DOMAINS or node.op_type not in OPERATORS or any(
                attribute.HasField("g") or attribute.graphs for attribute in node.attribute):
            raise UnsafeOnnxError(f"{source}: node {node.name or '(unnamed)'!r} is a {op}, not an operator this "
                                  "project's export.py writes (no control flow, no custom domains); refused before "
                                  "onnxruntime runs it")
        tensors += [part for attribute in node.attribute for part in (attribute.t, *attribute.tensors)]
    external = next((tensor.name for tensor in tensors if tensor.data_location == onnx.TensorProto.EXTERNAL), None)
    if external is not None:
        raise UnsafeOnnxError(f"{source}: tensor {external!r} is stored in another file (external data); refused: "
                              "this project exports self-contained models")
