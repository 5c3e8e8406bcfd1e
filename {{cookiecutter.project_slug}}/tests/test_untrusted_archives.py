"""Exported models from elsewhere: a .pt2 is read only when this user exported it (or --trust names it), and is
checked as torch reads it even then; an .onnx may hold only the operators export.py writes.

Each hostile file is built as an attacker builds it: members really renamed, added or duplicated with zipfile in
a real export, a real ONNX graph with a Loop built with onnx.helper. predict.py runs them as the README runs it
(in a process of its own where the file could make it hang); the archive attacks go through the loader predict.py
uses once a .pt2 is signed or trusted, so they show the check behind the signature.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import pickle
import shutil
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import HANG_S, Tiny
from run_helpers import PROJECT

import export
import predict
from {{ cookiecutter.package_name }}.errors import UserError
from {{ cookiecutter.package_name }}.model_files import Metadata, export_bytes, load, predictor_from_bytes
from {{ cookiecutter.package_name }}.pt2_check import UnsafeExportError, check_pt2

METADATA = Metadata(class_names=["a", "b"], image_size=16, mean=[0.5] * 3, std=[0.5] * 3)


class Touch:
    """A pickle that creates a file when it is loaded: what a hostile weight runs instead."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


@pytest.fixture(scope="module")
def exported() -> bytes:
    """A real .pt2 of a tiny model with this project's metadata, exported as export.py exports."""
    return export_bytes(Tiny().eval(), torch.zeros(2, 3, 16, 16), "pt2", METADATA)


@pytest.fixture(scope="module")
def exported_here(checkpoint, tmp_path_factory) -> Path:
    """A .pt2 that this user's export.py wrote from a real checkpoint (and signed)."""
    out = tmp_path_factory.mktemp("export") / "model.pt2"
    assert export.main([str(checkpoint), "--format", "pt2", "--out", str(out)]) == 0
    return out


def one_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


# --- a .pt2 is read only when this user made it, or the command line trusts it ----------------------------------

def test_a_pt2_this_user_exported_is_signed_and_predicts(exported_here, image):
    """export.py writes model.pt2 and its signature beside it; predict.py reads it with no flag."""
    assert Path(f"{exported_here}.sig").is_file()
    assert predict.main([str(exported_here), str(image), "--device", "cpu"]) == 0


def _elsewhere(exported_here: Path, folder: Path, how: str) -> Path:
    """The export as it arrives from elsewhere: without its signature, signed by someone else, or changed."""
    copy = Path(shutil.copy(exported_here, folder / "model.pt2"))
    if how == "signed by someone else":  # their own export.py, their own key
        Path(f"{copy}.sig").write_text("hmac-sha256:" + hmac.new(b"k" * 32, copy.read_bytes(), hashlib.sha256)
                                       .hexdigest() + "\n")
    elif how == "changed after it was signed":
        shutil.copy(f"{exported_here}.sig", f"{copy}.sig")
        metadata = _member(copy.read_bytes(), "metadata.json")
        names = {"class_names": ["cat", "dog", "fox", "owl"]}  # four classes still: it would load
        copy.write_bytes(rewritten(copy.read_bytes(), lambda name, raw: json.dumps(
            {**json.loads(raw), **names}).encode() if name == metadata else raw))
    return copy


@pytest.mark.parametrize("how", ["unsigned", "signed by someone else", "changed after it was signed"])
def test_a_pt2_from_elsewhere_is_refused_unless_the_command_line_trusts_it(exported_here, image, tmp_path, capsys,
                                                                           how):
    """One line and exit 2 naming the formats to share (ONNX, a safetensors folder) and --trust; --trust FILE
    naming another file changes nothing; naming this one loads it."""
    copy = _elsewhere(exported_here, tmp_path, how)
    assert predict.main([str(copy), str(image), "--device", "cpu"]) == 2
    line = one_line(capsys)
    assert "onnx" in line and "safetensors" in line and f"--trust {copy}" in line
    other = tmp_path / "other.pt2"
    assert predict.main([str(copy), str(image), "--device", "cpu", "--trust", str(other)]) == 2
    assert predict.main([str(copy), str(image), "--device", "cpu", "--trust", str(copy)]) == 0


# --- behind the signature: the archive as torch reads it ----------------------------------------------------------

def rewritten(data: bytes, change) -> bytes:
    """The archive with `change(name, bytes) -> bytes | None` applied to each member (None: drop it)."""
    source, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            changed = change(info.filename, source.read(info.filename))
            if changed is not None:
                target.writestr(info.filename, changed)
    return out.getvalue()


def _member(data: bytes, suffix: str) -> str | None:
    return next((name for name in zipfile.ZipFile(io.BytesIO(data)).namelist() if name.endswith(suffix)), None)


def _pickling_config(data: bytes) -> tuple[str, bytes, str]:
    """(the weights config's name, a copy of it marking one weight use_pickle, the member that weight then names)."""
    name = _member(data, "weights_config.json")
    if name is None:
        pytest.skip("this torch writes the 2.4-2.7 layout, which torch reads with zipfile alone")
    config = json.loads(zipfile.ZipFile(io.BytesIO(data)).read(name))
    meta = next(iter(config["config"].values()))
    meta.update(use_pickle=True, path_name="evil")
    return name, json.dumps(config).encode(), name.rsplit("/", 1)[0] + "/evil"


def all_under_extra_files(data: bytes, marker: Path) -> bytes:
    """The reported attack: every member moved under extra_files/ (torch names the archive after the first
    member's folder, whatever it is; a legacy-layout reader skips extra_files/) and one weight a pickle."""
    config, hostile, payload = _pickling_config(data)
    top = config.split("/", 1)[0]
    source, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for name in source.namelist():
            target.writestr(name.replace(top, "extra_files", 1), hostile if name == config else source.read(name))
        target.writestr(payload.replace(top, "extra_files", 1), pickle.dumps(Touch(marker), protocol=2))
    return out.getvalue()


def duplicated(data: bytes, marker: Path, other_case: bool) -> bytes:
    """The weights config twice: a pickling copy first (torch's reader takes the first match, case-blind) and the
    clean one last (Python's zipfile takes the last), under the same name or the name in capitals."""
    config, hostile, payload = _pickling_config(data)
    source, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as target, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of a duplicate name: the attacker does not mind
        for name in source.namelist():
            if name == config:
                target.writestr(name.replace(".json", ".JSON") if other_case else name, hostile)
            target.writestr(name, source.read(name))
        target.writestr(payload, pickle.dumps(Touch(marker), protocol=2))
    return out.getvalue()


ATTACKS = {"every member under extra_files/": all_under_extra_files,
           "a name twice": lambda data, marker: duplicated(data, marker, other_case=False),
           "a name twice, in another case": lambda data, marker: duplicated(data, marker, other_case=True)}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_pt2_that_two_zip_readers_read_differently_is_refused_before_the_pickle_runs(exported, tmp_path, attack):
    """Even a trusted .pt2 (the loader predict.py uses once it is signed or named by --trust) is read as torch
    reads it: an archive torch would load a pickle from, and Python's zipfile would not see, is refused."""
    marker = tmp_path / "unpickled"
    hostile = ATTACKS[attack](exported, marker)
    with pytest.raises(UserError) as refused:
        predictor_from_bytes(hostile, "pt2", torch.device("cpu"), "evil.pt2")
    assert not marker.exists(), "the pickle ran"
    assert isinstance(refused.value, UnsafeExportError), refused.value


@pytest.fixture(scope="module")
def bomb(exported) -> bytes:
    """The export with one more extra file: 256 MiB of zeros, deflated to a few hundred KB."""
    top = zipfile.ZipFile(io.BytesIO(exported)).namelist()[0].split("/", 1)[0]
    name = f"{top}/extra/padding.bin" if _member(exported, "archive_format") else "extra_files/padding.bin"
    out = io.BytesIO(exported)
    with zipfile.ZipFile(out, "a", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        with archive.open(name, "w") as member:
            for _ in range(16):
                member.write(bytes(16 * 2**20))
    return out.getvalue()


def test_a_pt2_zip_bomb_is_refused_from_its_directory(bomb, exported):
    """A member that inflates 1000-fold (torch reads every extra file whole) is refused before anything is
    inflated: torch.export.save stores members as they are, so a compressed one is no export of ours."""
    assert len(bomb) - len(exported) < 2**20
    with pytest.raises(UnsafeExportError, match="compressed"):
        check_pt2(bomb, "bomb.pt2")


def test_a_pt2_with_an_extra_file_beyond_the_metadata_is_refused(exported):
    """Extra files are read whole by torch; the project writes one (metadata.json) and reads no other."""
    top = zipfile.ZipFile(io.BytesIO(exported)).namelist()[0].split("/", 1)[0]
    name = f"{top}/extra/notes.txt" if _member(exported, "archive_format") else "extra_files/notes.txt"
    out = io.BytesIO(exported)
    with zipfile.ZipFile(out, "a") as archive:
        archive.writestr(name, "hello")
    with pytest.raises(UnsafeExportError, match="notes.txt"):
        check_pt2(out.getvalue(), "model.pt2")


# --- ONNX: the operators export.py writes, checked before onnxruntime runs anything --------------------------------

def onnx_classifier(kind: str) -> bytes:
    """A real ONNX classifier (channel means -> 2 logits, with this project's metadata) whose logits pass through
    one node of `kind`: Gemm (what export.py writes), a Loop of 10**15 iterations, an If, or a custom domain's."""
    from onnx import TensorProto, helper

    def value(name, elem, shape):
        return helper.make_tensor_value_info(name, elem, shape)

    nodes = [helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["flat"]),
             helper.make_node("Gemm", ["flat", "weight", "bias"], ["raw" if kind != "plain" else "logits"])]
    initializers = [helper.make_tensor("weight", TensorProto.FLOAT, [3, 2], [1.0, -1.0] * 3),
                    helper.make_tensor("bias", TensorProto.FLOAT, [2], [0.0, 0.0]),
                    helper.make_tensor("trips", TensorProto.INT64, [], [10**15]),
                    helper.make_tensor("yes", TensorProto.BOOL, [], [True])]
    passing = helper.make_graph(  # the body of the Loop (iteration, condition, carried logits), or a branch of If
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Identity", ["v_in"], ["v_out"])],
        "body", [value("i", TensorProto.INT64, []), value("cond_in", TensorProto.BOOL, []),
                 value("v_in", TensorProto.FLOAT, None)],
        [value("cond_out", TensorProto.BOOL, []), value("v_out", TensorProto.FLOAT, None)])
    branch = helper.make_graph([helper.make_node("Identity", ["raw"], ["branch_out"])], "branch", [],
                               [value("branch_out", TensorProto.FLOAT, None)])
    opsets = [helper.make_opsetid("", 17)]
    if kind == "Loop":
        nodes.append(helper.make_node("Loop", ["trips", "yes", "raw"], ["logits"], body=passing))
    elif kind == "If":
        nodes.append(helper.make_node("If", ["yes"], ["logits"], then_branch=branch, else_branch=branch))
    elif kind == "custom domain":
        nodes.append(helper.make_node("Relu", ["raw"], ["logits"], domain="com.example.evil"))
        opsets.append(helper.make_opsetid("com.example.evil", 1))
    graph = helper.make_graph(nodes, "classifier", [value("images", TensorProto.FLOAT, ["batch", 3, 16, 16])],
                              [value("logits", TensorProto.FLOAT, ["batch", 2])], initializers)
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)  # what onnxruntime 1.18+ reads
    helper.set_model_props(model, METADATA.to_strings())
    return model.SerializeToString()


def test_an_onnx_model_of_the_operators_export_writes_predicts(tmp_path, image):
    """The allow-list lets a plain classifier through (GlobalAveragePool, Flatten, Gemm)."""
    path = tmp_path / "model.onnx"
    path.write_bytes(onnx_classifier("plain"))
    assert predict.main([str(path), str(image), "--device", "cpu"]) == 0


@pytest.mark.slow  # a real process: before the fix, it never returned
def test_an_onnx_loop_of_a_quadrillion_iterations_is_refused_not_run(tmp_path, image):
    """predict.py model.onnx runs the model on a blank image first: a Loop with a trip count of 10**15 would
    never return. Refused by name, exit 2, before onnxruntime runs anything."""
    path = tmp_path / "model.onnx"
    path.write_bytes(onnx_classifier("Loop"))
    result = subprocess.run([sys.executable, "predict.py", str(path), str(image), "--device", "cpu"], cwd=PROJECT,
                            capture_output=True, text=True, timeout=HANG_S)
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1 and "Loop" in result.stderr


@pytest.mark.parametrize("kind", ["If", "custom domain"])
def test_an_onnx_model_with_control_flow_or_a_custom_operator_is_refused(tmp_path, kind):
    """Control flow and operators outside ONNX's standard domain are not what export.py writes: refused by name."""
    path = tmp_path / "model.onnx"
    path.write_bytes(onnx_classifier(kind))
    with pytest.raises(UserError, match="not an operator this project's export.py writes"):
        load(path, torch.device("cpu"))
