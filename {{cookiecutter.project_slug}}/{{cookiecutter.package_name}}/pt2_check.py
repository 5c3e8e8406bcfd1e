"""A `.pt2` file checked before `torch.export.load` reads it: defence in depth behind the signature.

predict.py loads a `.pt2` only when this user's export.py signed it, or the command line trusts it
(model_files.check_signed): torch.export.load trusts its input (its docs: never load data from an untrusted
source). Reading an archive, it unpickles weights and constants marked `use_pickle` and opaque objects with
full pickle, falls back to full pickle for sample inputs (and, in torch 2.4, for the state dict) that
weights_only refuses, loads compiled AOTInductor libraries, finds each graph node's function by walking
attributes from `torch` (every module torch imports is reachable: `os.system` among them), and parses
symbolic shapes with `sympy.sympify`, which is Python's `eval`. So even a trusted file passes `check_pt2`,
which reads the archive with the reader torch reads it with and refuses, naming the entry:
- an archive two zip readers could read differently: a name twice (also in another case: torch's reader
  matches names case-blind and takes the first, Python's takes the last), members outside the first
  member's folder, a member compressed or larger than the file (torch.export.save stores every member as
  is, so no member inflates: a zip bomb is refused from the central directory, before anything is read);
- a member outside the layouts torch 2.4-2.15 write, an extra file other than metadata.json, or an
  AOTInductor library;
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


LEGACY_MEMBERS = {  # torch 2.4-2.7's zip, read with zipfile: the program as JSON, the rest as torch.save pickles
    "serialized_exported_program.json", "serialized_state_dict.pt", "serialized_constants.pt",
    "serialized_example_inputs.pt", "version", "extra_files/metadata.json"}
ARCHIVE_MEMBERS = re.compile(  # torch 2.8+'s PT2 archive, read with torch's own zip reader, under one top folder
    r"(archive_format|archive_version|byteorder|version|\.data/version|\.data/serialization_id|"
    r"models/[\w.-]+\.json|data/(weights|constants)/[\w.-]+|data/sample_inputs/[\w.-]+\.pt|extra/metadata\.json)")
MAX_MEMBERS = 100_000  # a classifier's archive holds a member per weight: hundreds
MAX_PARSED = 256 * 2**20  # the largest JSON or pickle member read here (a large model's graph is a few MB)
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
    infos = _stored_members(data, source)
    reader = _torch_reader(data)
    if reader is not None and reader.has_record("archive_format"):  # what torch 2.8+ loads as a PT2 archive
        _check_archive(reader, infos, source)
    else:  # what torch reads with zipfile (2.4-2.7's layout, and 2.8+'s fallback for it)
        archive = zipfile.ZipFile(io.BytesIO(data))
        for info in infos:
            if info.filename not in LEGACY_MEMBERS:
                raise _foreign(source, info.filename)
            _check_member(info.filename, lambda name=info.filename: archive.read(name), info.file_size,
                          f"{source}: {info.filename}")


def _stored_members(data: bytes, source: str) -> list[zipfile.ZipInfo]:
    """The members as zipfile reads the central directory, each name once (case-blind) and stored in the file."""
    try:
        infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise UnsafeExportError(f"{source} is not a readable .pt2 file ({error})") from None
    if not infos or len(infos) > MAX_MEMBERS:
        raise UnsafeExportError(f"{source} holds {len(infos)} members; not a model torch.export.save writes")
    if len({info.filename.casefold() for info in infos}) != len(infos):
        raise UnsafeExportError(f"{source} names a member twice; refused: zip readers differ on which copy they read")
    for info in infos:
        if (info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size
                or info.header_offset + info.compress_size > len(data)):
            raise UnsafeExportError(f"{source}: {info.filename} is compressed, or larger than the file; refused "
                                    "(torch.export.save stores every member as is)")
    return infos


def _torch_reader(data: bytes) -> Any:
    """torch's own zip reader on the archive (the one torch.export.load uses), or None where it cannot open it."""
    try:
        return torch._C.PyTorchFileReader(io.BytesIO(data))
    except RuntimeError:  # not in one folder, no version record: torch.export.load falls back to zipfile
        return None


def _check_archive(reader: Any, infos: list[zipfile.ZipInfo], source: str) -> None:
    """A PT2 archive, read as torch reads it: the same members, sizes and contents zipfile saw."""
    top = infos[0].filename.split("/", 1)[0]
    outside = next((info.filename for info in infos if not info.filename.startswith(f"{top}/")), None)
    if outside is not None:  # torch's reader names the archive after the first member's folder
        raise _foreign(source, outside)
    try:
        records = reader.get_all_records()
    except RuntimeError:  # a member outside the first one's folder: torch cannot list it either
        records = None
    declared = {info.filename: info.file_size for info in infos}
    if records is None or {f"{top}/{name}" for name in records} != set(declared):
        raise UnsafeExportError(f"{source}: torch's zip reader and Python's see different members; refused")
    for name in records:
        if not ARCHIVE_MEMBERS.fullmatch(name):
            raise _foreign(source, f"{top}/{name}")
        size = declared[f"{top}/{name}"]
        if hasattr(reader, "get_record_size") and reader.get_record_size(name) != size:
            raise UnsafeExportError(f"{source}: {top}/{name} has two sizes, as two zip readers see it; refused")
        _check_member(name, lambda name=name: reader.get_record(name), size, f"{source}: {top}/{name}")


def _foreign(source: str, name: str) -> UnsafeExportError:
    return UnsafeExportError(f"{source}: {name} is not part of a model this project's export.py writes "
                             "(compiled code, another extra file, or a foreign archive); refused")


def _check_member(inner: str, read, size: int, entry: str) -> None:
    """One member's contents, by its name inside the archive; `read()` gives its bytes (only those checked here)."""
    if not inner.endswith((".pt", ".json")):
        return  # raw tensor bytes, and the archive's version strings: data, never parsed as code
    if size > MAX_PARSED:
        raise UnsafeExportError(f"{entry} is {size:,} bytes, more than a model's is (at most {MAX_PARSED:,})")
    raw = read()
    if len(raw) != size:
        raise UnsafeExportError(f"{entry} reads as {len(raw):,} bytes but says {size:,}; refused")
    if inner.endswith(".pt"):
        _check_pickle(raw, entry)
    elif inner.startswith("data/") and inner.endswith("_config.json"):  # data/weights/... or data/constants/...
        _check_payloads(_json(raw, entry), entry, constants=inner.startswith("data/constants/"))
    elif not inner.startswith(("extra/", "extra_files/")):  # metadata.json: text for the caller, checked there
        _check_program(_json(raw, entry), entry)


def _json(raw: bytes, entry: str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as error:
        raise UnsafeExportError(f"{entry} is not readable JSON ({type(error).__name__})") from None


def _check_pickle(raw: bytes, entry: str) -> None:
    """A torch.save pickle must load with weights_only: only tensors and plain containers, no code."""
    if zipfile.is_zipfile(io.BytesIO(raw)):  # torch.save's own zip: stored members too (torch inflates no bomb)
        _stored_members(raw, entry)
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
