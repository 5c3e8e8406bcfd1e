"""Files from elsewhere never run code: checkpoints and config.json files that name it, .pt2 files that carry it.

Each attack is a file a user downloads and hands to the README's own commands. Every test asserts the
refusal (one line, exit 2, the flag that would allow it named) and that nothing the file asked for happened:
no module imported (its import writes a marker file), no marker written, no socket left listening.
"""

from __future__ import annotations

import io
import json
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import HANG_S, Tiny
from run_helpers import PROJECT, load_cpu

import evaluate
import export
import predict
import train
from {{ cookiecutter.package_name }}.backbones import resolve_backbone
from {{ cookiecutter.package_name }}.devkit.checkpoint import save_checkpoint
from {{ cookiecutter.package_name }}.errors import ConfigError
from {{ cookiecutter.package_name }}.model_files import Metadata, export_bytes, predictor_from_bytes
from {{ cookiecutter.package_name }}.pt2_check import UnsafeExportError, check_pt2
from {{ cookiecutter.package_name }}.training import run_state

# A module a file may name: importing it at all is the side effect (a marker file), before anything is called.
HOSTILE_MODULE = '''
import os
from pathlib import Path

Path(os.environ["HOSTILE_MARKER"]).write_text("imported")


def backbone():
    raise SystemExit("called")


def dataset():
    raise SystemExit("called")
'''
BASE = ["--device", "cpu", "--epochs", "1", "--batch-size", "4", "--image-size", "32", "--workers", "0",
        "--no-pretrained"]


@pytest.fixture
def marker(tmp_path, monkeypatch) -> Path:
    """The hostile module on sys.path; the path its import would write (absent while the file is refused)."""
    (tmp_path / "hostile_module.py").write_text(HOSTILE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "imported.txt"
    monkeypatch.setenv("HOSTILE_MARKER", str(path))
    monkeypatch.delitem(sys.modules, "hostile_module", raising=False)
    resolve_backbone.cache_clear()  # an earlier test's import is not this one's
    return path


def naming(checkpoint: Path, folder: Path, extra: dict | None = None, **config: str) -> Path:
    """A copy of a real checkpoint whose config names `config`'s values (an import path: code to run)."""
    state = load_cpu(checkpoint)
    state["config"].update(config)
    return save_checkpoint(folder / "downloaded.pt", {**state, **(extra or {})})


def refused_once(capsys, path: str) -> str:
    """The one line a refusal printed; it names the import path and the flag that would allow it."""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and path in lines[0] and f"--allow-import {path}" in lines[0], lines
    return lines[0]


COMMANDS = {  # each CLI that reads a checkpoint, as the README and docs/runs.md run it
    "evaluate": lambda ckpt, tmp, data: evaluate.main([str(ckpt), "--device", "cpu", "--out", str(tmp / "c.png")]),
    "predict": lambda ckpt, tmp, data: predict.main([str(ckpt), str(data / "val"), "--device", "cpu"]),
    "export": lambda ckpt, tmp, data: export.main([str(ckpt), "--format", "pt2", "--out", str(tmp / "m.pt2")]),
    "init-from": lambda ckpt, tmp, data: train.main(["--init-from", str(ckpt), "--data", str(data),
                                                      "--out", str(tmp / "run"), *BASE]),
    "resume": lambda ckpt, tmp, data: train.main(["--resume", str(ckpt), "--data", str(data),
                                                   "--out", str(tmp / "run"), *BASE]),
    "resume on its data": lambda ckpt, tmp, data: train.main(["--resume", str(ckpt), "--out", str(tmp / "run"),
                                                               *BASE]),
}
# What each command would import: every one builds the checkpoint's backbone; the data it names is opened by
# evaluate.py without --data and by a resume that does not type --data.
CASES = [*[("backbone", command) for command in COMMANDS], ("data", "evaluate"), ("data", "resume on its data")]


@pytest.mark.parametrize("key, command", CASES)
def test_a_checkpoint_naming_a_module_is_refused_before_it_is_imported(command, key, checkpoint, tiny_data, marker,
                                                                        tmp_path, capsys):
    """evaluate, predict, export, --init-from and --resume refuse a checkpoint whose backbone or data is an
    import path nobody typed: exit 2, one line naming --allow-import, the module never imported."""
    path = f"hostile_module:{key if key == 'backbone' else 'dataset'}"
    hostile = naming(checkpoint, tmp_path, **{key: path})
    assert COMMANDS[command](hostile, tmp_path, tiny_data) == 2
    refused_once(capsys, path)
    assert not marker.exists()
    assert not (tmp_path / "run").exists() and not (tmp_path / "m.pt2").exists()


def test_reading_a_checkpoint_checks_the_data_it_names_only_for_a_caller_that_opens_it(checkpoint, marker, tmp_path):
    """run_state.read's `imports`: the backbone's import path always; the data's where the caller will open the
    run's data (a resume without --data), in the same read; trusted, it is read; never imported by the read."""
    path = "hostile_module:dataset"
    hostile = naming(checkpoint, tmp_path, data=path)
    assert run_state.read(hostile)["config"]["data"] == path  # predict.py and export.py never open it
    with pytest.raises(ConfigError, match=f"--allow-import {path}"):
        run_state.read(hostile, imports=("backbone", "data"))
    assert run_state.read(hostile, trusted=frozenset({path}), imports=("backbone", "data"))["config"]["data"] == path
    assert not marker.exists()


@pytest.mark.slow
def test_a_checkpoint_naming_a_dataset_predicts_and_exports_without_importing_it(checkpoint, tiny_data, marker,
                                                                                  tmp_path):
    """predict.py and export.py never open the run's data: its import path is neither refused nor imported."""
    recorded = naming(checkpoint, tmp_path, data="hostile_module:dataset")
    assert COMMANDS["predict"](recorded, tmp_path, tiny_data) == 0
    assert COMMANDS["export"](recorded, tmp_path, tiny_data) == 0
    assert not marker.exists()


def test_a_module_the_user_allows_is_imported_as_named(checkpoint, marker, tmp_path, capsys):
    """--allow-import PATH is the user naming it: the module is imported (and what it names is called)."""
    hostile = naming(checkpoint, tmp_path, backbone="hostile_module:backbone")
    assert evaluate.main([str(hostile), "--device", "cpu", "--allow-import", "hostile_module:backbone"]) == 2
    assert "(SystemExit: called)" in capsys.readouterr().err  # its factory ran, and its exit is one line
    assert marker.read_text() == "imported"


@pytest.mark.parametrize("key", ["backbone", "data"])
def test_a_config_file_naming_a_module_is_refused_unless_the_command_line_names_it(key, tiny_data, marker, tmp_path,
                                                                                   capsys):
    """train.py --config cfg.json: a downloaded config.json's import path is refused (exit 2, nothing imported,
    no run folder); the same path typed as the flag is the user's own choice."""
    path = f"hostile_module:{key if key == 'backbone' else 'dataset'}"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({key: path}))
    others = ["--data", str(tiny_data)] if key == "backbone" else []
    assert train.main(["--config", str(config), *others, "--out", str(tmp_path / "run"), *BASE]) == 2
    refused_once(capsys, path)
    assert not marker.exists() and not (tmp_path / "run").exists()
    typed = train.main(["--config", str(config), *others, f"--{key}", path, "--out", str(tmp_path / "run"), *BASE])
    assert typed == 2 and "(SystemExit: called)" in capsys.readouterr().err  # typed: imported, its factory called
    assert marker.exists()


def test_a_config_file_cannot_allow_its_own_import(tiny_data, marker, tmp_path, capsys):
    """allow_import inside a config.json is not taken: a file cannot vouch for itself."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"backbone": "hostile_module:backbone", "allow_import": ["hostile_module:backbone"]}))
    assert train.main(["--config", str(config), "--data", str(tiny_data), "--out", str(tmp_path / "run"), *BASE]) == 2
    refused_once(capsys, "hostile_module:backbone")
    assert not marker.exists()


def _cli(args: list[str], home: Path, timeout: float = HANG_S) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, *args], cwd=PROJECT, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow  # a real process, as the attack ran
def test_a_checkpoint_naming_doctest_runs_none_of_the_doctests_inside_it(checkpoint, tmp_path):
    """The reported attack: config.backbone `doctest:_test` makes `evaluate.py model.pt` run the doctests
    written inside model.pt itself (shell commands). Refused in a real process: no marker file."""
    touched = tmp_path / "doctest-ran"
    doctest = f"\n>>> import pathlib; pathlib.Path({str(touched)!r}).touch()\n"
    hostile = naming(checkpoint, tmp_path, {"version": doctest}, backbone="doctest:_test")
    result = _cli(["evaluate.py", str(hostile)], home=tmp_path)
    assert result.returncode == 2 and "--allow-import doctest:_test" in result.stderr, result.stderr
    assert not touched.exists()


@pytest.mark.slow  # a real process, as the attack ran
def test_a_config_naming_a_stdlib_function_writes_nothing(tiny_data, tmp_path):
    """The reported attack: "backbone": "readline:write_history_file" in a config.json wrote $HOME/.history."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"backbone": "readline:write_history_file"}))
    result = _cli(["train.py", "--config", str(config), "--data", str(tiny_data), "--out", str(tmp_path / "run"),
                   *BASE], home=tmp_path)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / ".history").exists() and not (tmp_path / "run").exists()


@pytest.mark.slow  # a real process, as the attack ran
def test_a_checkpoint_naming_a_web_server_starts_none(checkpoint, tiny_data, tmp_path):
    """The reported attack: backbone `http.server:test` made predict.py listen on 0.0.0.0:8000 (a served
    process never ends: the hang limit would catch it). Refused at once, exit 2."""
    hostile = naming(checkpoint, tmp_path, backbone="http.server:test")
    result = _cli(["predict.py", str(hostile), str(tiny_data / "val"), "--device", "cpu"], home=tmp_path,
                  timeout=min(HANG_S, 300))
    assert result.returncode == 2 and "--allow-import http.server:test" in result.stderr, result.stderr


# --- .pt2 files: torch.export.load unpickles, loads compiled code and evaluates expressions ------------------

@pytest.fixture(scope="module")
def exported() -> bytes:
    """A real .pt2 of a tiny model with this project's metadata, exported as export.py does."""
    metadata = Metadata(class_names=["a", "b"], image_size=16, mean=[0.5] * 3, std=[0.5] * 3)
    return export_bytes(Tiny().eval(), torch.zeros(2, 3, 16, 16), "pt2", metadata)


class Touch:
    """A pickle that, when loaded, creates a file (what a hostile weight would run instead)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def rewritten(data: bytes, change) -> bytes:
    """The archive with `change(name, bytes) -> bytes | None` applied to each member (None: drop it)."""
    source, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            changed = change(info.filename, source.read(info.filename))
            if changed is not None:
                target.writestr(info, changed)
    return out.getvalue()


def _member(data: bytes, suffix: str) -> str | None:
    return next((name for name in zipfile.ZipFile(io.BytesIO(data)).namelist() if name.endswith(suffix)), None)


def with_pickled_weight(data: bytes, marker: Path) -> bytes:
    """One weight flipped to a pickle with a __reduce__ payload (the reported attack), in either layout."""
    config_name = _member(data, "weights_config.json")
    if config_name is None:  # torch 2.4-2.7: the state dict is one torch.save pickle
        return rewritten(data, lambda name, raw: pickle.dumps(Touch(str(marker)), protocol=2)
                         if name.endswith("serialized_state_dict.pt") else raw)
    config = json.loads(zipfile.ZipFile(io.BytesIO(data)).read(config_name))
    fqn, meta = next(iter(config["config"].items()))
    meta["use_pickle"] = True
    payload = config_name.rsplit("/", 1)[0] + "/" + meta["path_name"]
    return rewritten(data, lambda name, raw: json.dumps(config).encode() if name == config_name
                     else pickle.dumps(Touch(str(marker)), protocol=2) if name == payload else raw)


def test_an_exported_model_round_trips_through_the_check(exported):
    """What export.py writes passes the check and predicts (the check refuses only what torch would run)."""
    check_pt2(exported, "model.pt2")
    predictor = predictor_from_bytes(exported, "pt2", torch.device("cpu"), "model.pt2")
    assert predictor.predict_logits(torch.zeros(1, 3, 16, 16)).shape == (1, 2)


@pytest.mark.slow  # a real process, as the attack ran
def test_a_pt2_with_a_pickled_weight_is_refused_before_the_pickle_is_loaded(exported, tmp_path):
    """predict.py model.pt2 with one weight turned into a __reduce__ pickle: exit 2 naming the entry, no file made."""
    marker = tmp_path / "unpickled"
    hostile = tmp_path / "model.pt2"
    hostile.write_bytes(with_pickled_weight(exported, marker))
    image = tmp_path / "image.png"
    from PIL import Image
    Image.new("RGB", (16, 16)).save(image)
    # --trust: the user vouches for the file, and the archive is still checked before anything in it is loaded
    result = _cli(["predict.py", str(hostile), str(image), "--device", "cpu", "--trust", str(hostile)], home=tmp_path)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "pickle" in result.stderr
    assert not marker.exists()


def test_a_pt2_with_a_pickled_weight_is_refused_in_process_too(exported, tmp_path):
    """The same file through the loader predict.py and evaluate.py use: UnsafeExportError naming the pickle."""
    marker = tmp_path / "unpickled"
    with pytest.raises(UnsafeExportError, match="pickle"):
        predictor_from_bytes(with_pickled_weight(exported, marker), "pt2", torch.device("cpu"), "model.pt2")
    assert not marker.exists()


def test_a_pt2_whose_sample_inputs_are_a_hostile_pickle_is_refused(exported, tmp_path):
    """Sample inputs fall back to full unpickling in torch.export.load when weights_only refuses them."""
    marker = tmp_path / "unpickled"
    inputs = _member(exported, "sample_inputs/model.pt") or _member(exported, "serialized_example_inputs.pt")
    payload = pickle.dumps(Touch(str(marker)), protocol=2)
    hostile = rewritten(exported, lambda name, raw: payload if name == inputs else raw)
    with pytest.raises(UnsafeExportError, match="weights_only"):
        predictor_from_bytes(hostile, "pt2", torch.device("cpu"), "model.pt2")
    assert not marker.exists()


def _program_member(data: bytes) -> str:
    return _member(data, "models/model.json") or _member(data, "serialized_exported_program.json")


def with_program(data: bytes, edit) -> bytes:
    """The archive with its graph JSON passed through `edit(text) -> text`."""
    program = _program_member(data)
    return rewritten(data, lambda name, raw: edit(raw.decode()).encode() if name == program else raw)


def test_a_pt2_whose_shape_expression_is_python_code_is_refused_before_it_is_evaluated(tmp_path):
    """torch parses symbolic shapes with sympy.sympify (eval): an expression that imports os is refused."""
    marker = tmp_path / "evaluated"
    metadata = Metadata(class_names=["a", "b"], image_size=16, mean=[0.5] * 3, std=[0.5] * 3)
    dynamic = export_bytes(Tiny().eval(), torch.zeros(2, 3, 16, 16), "pt2", metadata, dynamic_batch=True)
    program = zipfile.ZipFile(io.BytesIO(dynamic)).read(_program_member(dynamic)).decode()
    symbol = json.loads(program)["range_constraints"]
    assert symbol, "a dynamic batch dimension is a symbol in the graph"
    name = next(iter(symbol))
    payload = f"__import__('pathlib').Path({str(marker)!r}).touch() or {name}"
    hostile = with_program(dynamic, lambda text: text.replace(f'"expr_str": "{name}"', f'"expr_str": "{payload}"')
                           .replace(f"Symbol('{name}'", f"__import__('pathlib').Path({str(marker)!r}).touch() or "
                                                         f"Symbol('{name}'"))
    assert hostile != dynamic
    with pytest.raises(UnsafeExportError, match="shape expression"):
        predictor_from_bytes(hostile, "pt2", torch.device("cpu"), "model.pt2")
    assert not marker.exists()


def test_a_pt2_whose_graph_calls_a_function_outside_torch_ops_is_refused(exported):
    """A node's target is found by walking attributes from `torch`: torch.serialization.os.system is reachable."""
    hostile = with_program(exported, lambda text: text.replace('"torch.ops.aten.linear.default"',
                                                               '"torch.serialization.os.system"', 1))
    assert hostile != exported
    with pytest.raises(UnsafeExportError, match="os.system"):
        check_pt2(hostile, "model.pt2")


@pytest.mark.parametrize("member", ["archive/data/aotinductor/model/model.so", "archive/data/evil.py", "evil.so"])
def test_a_pt2_with_compiled_code_or_a_foreign_member_is_refused(exported, member):
    """AOTInductor libraries (compiled code torch would load) and any member torch.export.save does not write."""
    top = zipfile.ZipFile(io.BytesIO(exported)).namelist()[0].split("/")[0]
    out = io.BytesIO(exported)
    with zipfile.ZipFile(out, "a") as archive:
        archive.writestr(member.replace("archive/", f"{top}/", 1), b"\x7fELF")
    with pytest.raises(UnsafeExportError, match="not part of a model"):  # outside its folder, too (evil.so)
        check_pt2(out.getvalue(), "model.pt2")


@pytest.mark.parametrize("metadata, why", [
    ({"std": [0, 1, 1]}, "std"), ({"mean": [float("nan")] * 3}, "mean"), ({"image_size": "224"}, "image_size"),
    ({"image_size": -3}, "image_size"), ({"class_names": ["a", "a"]}, "twice"), ({"class_names": []}, "class_names"),
    ({"class_names": ["a", "b", "c"]}, "names 3 classes"), ({"class_names": ["a"]}, "names 1 classes"),
])
def test_exported_metadata_that_cannot_be_right_is_refused(exported, tmp_path, metadata, why, capsys):
    """An exported file's metadata is checked like a checkpoint's: sizes, normalisation, one name per logit."""
    values = {"class_names": ["a", "b"], "image_size": 16, "mean": [0.5] * 3, "std": [0.5] * 3, **metadata}
    extra = _member(exported, "metadata.json")
    path = tmp_path / "model.pt2"
    path.write_bytes(rewritten(exported, lambda name, raw: json.dumps(values).encode() if name == extra else raw))
    image = tmp_path / "image.png"
    from PIL import Image
    Image.new("RGB", (16, 16)).save(image)
    assert predict.main([str(path), str(image), "--device", "cpu", "--trust", str(path)]) == 2  # even trusted
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and why in err[0], err
