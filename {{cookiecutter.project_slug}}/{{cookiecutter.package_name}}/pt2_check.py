"""A `.pt2` file checked before `torch.export.load` reads it: an exported model from elsewhere must not run code.

torch.export.load trusts its input (its docs: never load data from an untrusted source). Reading an
archive, it unpickles weights and constants marked `use_pickle` and opaque objects with full pickle,
falls back to full pickle for sample inputs (and, in torch 2.4, for the state dict) that weights_only
refuses, loads compiled AOTInductor libraries, finds each graph node's function by walking attributes
from `torch` (every module torch imports is reachable: `os.system` among them), and parses symbolic
shapes with `sympy.sympify`, which is Python's `eval`. `check_pt2` refuses, naming the entry, anything
beyond what `torch.export.save` writes for a plain model like this project's:
- a member outside the layouts torch 2.4-2.15 write, or an AOTInductor library;
- a weight or constant marked `use_pickle`, a custom or opaque object, guard code;
- a pickle (sample inputs; torch 2.4's state dict and constants) that `torch.load(weights_only=True)` refuses;
- a node function outside `torch.ops.aten` / `torch.ops.prims`, the `operator` and `math` modules, `torch.sym_*`;
- a symbolic expression holding more than symbols, whole numbers, arithmetic and sympy's integer functions.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Iterator
from typing import Any

import torch

from .errors import UserError


class UnsafeExportError(UserError):
    """An exported file that holds, or could run, code: refused before anything in it is loaded."""


LEGACY_MEMBERS = {  # torch 2.4-2.7's zip: the program as JSON, the rest as torch.save pickles
    "serialized_exported_program.json", "serialized_state_dict.pt", "serialized_constants.pt",
    "serialized_example_inputs.pt", "version"}
ARCHIVE_MEMBERS = re.compile(  # torch 2.8+'s PT2 archive, under one top folder
    r"(archive_format|archive_version|byteorder|version|\.data/version|\.data/serialization_id|"
    r"models/[\w.-]+\.json|data/(weights|constants)/[\w.-]+|data/sample_inputs/[\w.-]+\.pt|extra/[^/]+)")
_NAME = r"(?!\w*__)\w+"  # an attribute name without dunders (no __globals__, __builtins__, ...)
SAFE_TARGET = re.compile(rf"torch\.ops\.(aten|prims)\.{_NAME}(\.{_NAME})?|_operator\.{_NAME}|math\.{_NAME}"
                         rf"|torch\.sym_{_NAME}")
UNSAFE_OPERATORS = {"_operator.attrgetter", "_operator.methodcaller", "_operator.itemgetter", "_operator.call"}
EXPR_TOKENS = re.compile(r"\s+|\d+|'[a-z]\d+'|[A-Za-z_]\w*|//|[()+\-*/%,=]")
EXPR_NAMES = frozenset({  # what torch writes in shape expressions; no attribute access, no calls of anything else
    "Symbol", "Integer", "positive", "integer", "nonnegative", "real", "True", "False", "Max", "Min", "Mod",
    "FloorDiv", "CeilDiv", "CleanDiv", "PythonMod", "ModularIndexing", "IntTrueDiv", "CeilToInt", "FloorToInt",
    "TruncToInt", "Where", "Abs"})
MAX_EXPR = 1000  # characters: torch's expressions for a batch dimension are a few dozen


def check_pt2(data: bytes, source: str) -> None:
    """Refuse (UnsafeExportError, naming the entry) a `.pt2` whose loading could run code; see the module doc."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        names = archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise UnsafeExportError(f"{source} is not a readable .pt2 file ({error})") from None
    top = {name.split("/", 1)[0] for name in names}
    legacy = not top - LEGACY_MEMBERS - {"extra_files"}
    for name in names:
        inner = name if legacy else name.split("/", 1)[-1]
        known = (name in LEGACY_MEMBERS or name.startswith("extra_files/")) if legacy else (
            len(top) == 1 and ARCHIVE_MEMBERS.fullmatch(inner))
        if not known:
            raise UnsafeExportError(f"{source}: {name} is not part of a model torch.export.save writes "
                                    "(compiled code, or a foreign archive); refused")
        entry = f"{source}: {name}"
        if inner.startswith(("extra_files/", "extra/")):
            continue  # text for the caller (metadata.json), never loaded by torch
        if inner.endswith(".pt"):
            _check_pickle(archive.read(name), entry)
        elif inner.startswith("data/") and inner.endswith("_config.json"):  # data/weights/... or data/constants/...
            _check_payloads(_json(archive.read(name), entry), entry, constants=inner.startswith("data/constants/"))
        elif inner.endswith(".json"):
            _check_program(_json(archive.read(name), entry), entry)


def _json(raw: bytes, entry: str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as error:
        raise UnsafeExportError(f"{entry} is not readable JSON ({type(error).__name__})") from None


def _check_pickle(raw: bytes, entry: str) -> None:
    """A torch.save pickle must load with weights_only: only tensors and plain containers, no code."""
    try:
        torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except Exception as error:  # UnpicklingError for a forbidden global; anything else: not a plain pickle
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise UnsafeExportError(f"{entry} is a pickle that weights_only loading refuses ({reason})") from None


def _check_payloads(config: Any, entry: str, constants: bool) -> None:
    """Weights and constants stored as raw tensor bytes: none pickled, no custom or opaque objects."""
    payloads = config.get("config") if isinstance(config, dict) else None
    if not isinstance(payloads, dict):
        raise UnsafeExportError(f"{entry} is not a payload list torch.export.save writes")
    for fqn, meta in payloads.items():
        if not isinstance(meta, dict) or meta.get("use_pickle") is not False:
            raise UnsafeExportError(f"{entry}: {fqn} is pickled (use_pickle); refused: loading it could run code")
        if constants and not str(meta.get("path_name", "")).startswith("tensor_"):
            raise UnsafeExportError(f"{entry}: {fqn} is a custom or opaque object ({meta.get('path_name')}); refused")


def _check_program(program: Any, entry: str) -> None:
    """The graph: node functions from torch's operator libraries, shape expressions of numbers, no guard code."""
    for key, value in _items(program):
        if key in ("target", "as_operator") and isinstance(value, str):
            if not SAFE_TARGET.fullmatch(value) or value in UNSAFE_OPERATORS:
                raise UnsafeExportError(f"{entry}: a node calls {value[:120]!r}, not an operator of torch's "
                                        "own libraries; refused")
        elif key == "expr_str":
            _check_expression(value, entry)
        elif key in ("guards_code", "custom_obj_values", "as_custom_obj") and value:
            raise UnsafeExportError(f"{entry}: holds {key}, which loading would run or unpickle; refused")


def _items(value: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair in nested JSON, without recursion (a deep file cannot overflow the stack)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                yield key, child
                stack.append(child)
        elif isinstance(item, list):
            stack.extend(item)


def _check_expression(text: Any, entry: str) -> None:
    """sympy.sympify evaluates the text as Python: only symbols, numbers, arithmetic and EXPR_NAMES pass."""
    tokens = EXPR_TOKENS.findall(text) if isinstance(text, str) and len(text) <= MAX_EXPR else None
    names = [token for token in tokens or () if token[0].isalpha() or token[0] == "_"]
    if (tokens is None or "".join(tokens) != text or "**" in text
            or any(name not in EXPR_NAMES and not re.fullmatch(r"[a-z]\d+", name) for name in names)):
        shown = text[:120] if isinstance(text, str) else type(text).__name__
        raise UnsafeExportError(f"{entry}: the shape expression {shown!r} is not arithmetic on symbols; refused "
                                "(torch evaluates it as Python code)")
