"""--backbone package.module:ClassOrFactory: your own nn.Module, from a file outside the package, as a user adds it.

The module is written into a temporary folder that is put on sys.path (in this process) or PYTHONPATH
(for train.py processes), as a user's own file would be; nothing in the package names it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import HANG_S, train_one_thread
from run_helpers import PROJECT, assert_evaluate_equals_training, assert_same_run, load_cpu, paused, train_env, wait_for

import evaluate
import export
import predict
import train
from {{ cookiecutter.package_name }}.backbones import BackboneError, resolve_backbone
from {{ cookiecutter.package_name }}.model import build_model

OWN_MODULE = '''
import torch
from torch import nn


class TinyNet(nn.Module):
    """(B, 3, H, W) -> (B, 12) features; its width is found by a forward pass."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 12, 3, padding=1), nn.BatchNorm2d(12), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.register_buffer("scale", torch.ones(1))

    def forward(self, images):
        return self.features(images) * self.scale


class Declared(TinyNet):
    num_features = 12  # timm's convention: the width is read, not measured


def wide(width=20):
    """A factory function rather than a class."""
    return nn.Sequential(nn.Conv2d(3, width, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())


class NotFlat(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, images):
        return self.conv(images)  # (B, 4, H, W): no pooling, no flatten


class Pinned(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3, device="meta"))  # ignores the device it is built on

    def forward(self, images):
        return images.flatten(1) * 0


def not_a_module():
    return "a string"


CONSTANT = 3
'''


@pytest.fixture(scope="module")
def own_models(tmp_path_factory) -> Path:
    """A folder holding the user's my_models.py, on sys.path while this file's tests run."""
    folder = tmp_path_factory.mktemp("own")
    (folder / "my_models.py").write_text(textwrap.dedent(OWN_MODULE))
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))
    sys.modules.pop("my_models", None)


def test_own_module_is_built_on_the_device_with_the_head_beside_it(own_models, device):
    """Parameters, buffers and the head all on the device; the head's width is the module's measured output."""
    model = build_model("my_models:TinyNet", num_classes=3, pretrained=False, device=device, image_size=32)
    assert {t.device for t in [*model.parameters(), *model.buffers()]} == {device}
    assert model.head.in_features == 12 and model.head.out_features == 3
    logits = model.eval()(torch.zeros(2, 3, 32, 32, device=device))
    assert logits.shape == (2, 3) and logits.device == device


@pytest.mark.parametrize(("path", "width"), [("my_models:TinyNet", 12), ("my_models:Declared", 12),
                                              ("my_models:wide", 20)])
def test_own_module_builds_on_meta_whether_its_width_is_declared_or_measured(own_models, path, width):
    """On meta: every tensor on meta, the head sized from `num_features` or a forward pass, logits of shape (B, C)."""
    model = build_model(path, num_classes=5, pretrained=False, device=torch.device("meta"))
    assert {t.device.type for t in [*model.parameters(), *model.buffers()]} == {"meta"}
    assert model.head.in_features == width
    assert model.train()(torch.empty(2, 3, 48, 48, device="meta")).shape == (2, 5)


@pytest.mark.parametrize(("path", "says"), [
    ("no_such_module_anywhere:Net", "cannot import no_such_module_anywhere"),
    ("my_models:Nope", "my_models has no Nope"),
    ("my_models:", "package.module:ClassOrFactory"),
    ("my_models:CONSTANT", "not a class or function"),
])
def test_an_import_path_that_does_not_resolve_is_one_line_and_exit_2(own_models, tmp_path, capsys, path, says):
    """Refused before anything is built or written: one line naming what is wrong, no traceback, no run folder."""
    code = train.main(["--backbone", path, "--device", "cpu", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and says in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("path", "says"), [
    ("my_models:NotFlat", "(B, F) features"), ("my_models:Pinned", "was created on meta"),
    ("my_models:not_a_module", "not an nn.Module"),
])
def test_a_module_that_breaks_the_rules_is_refused_by_name(own_models, path, says):
    """Features that are not (B, F), tensors created off the build device, a factory that returns no module."""
    with pytest.raises(BackboneError, match=says.replace("(", r"\(").replace(")", r"\)")):
        build_model(path, num_classes=3, pretrained=False, device=torch.device("cpu"))


def test_pretrained_weights_of_an_own_module_are_refused_by_the_backbone_itself(own_models):
    """Your module loads its own weights: asking it for pretrained ones is a BackboneError naming --no-pretrained,
    before anything is built."""
    with pytest.raises(BackboneError, match="your own module.*--no-pretrained"):
        build_model("my_models:TinyNet", num_classes=3, pretrained=True, device=torch.device("cpu"))
    with pytest.raises(BackboneError, match="your own module.*--no-pretrained"):
        resolve_backbone("my_models:TinyNet").weights_location()


def test_explicit_pretrained_with_an_own_module_is_one_line_and_exit_2(own_models, tiny_data, tmp_path, capsys):
    """--pretrained loads torchvision's weights: with your own module it is refused, not silently ignored."""
    code = train.main(["--backbone", "my_models:TinyNet", "--pretrained", "--data", str(tiny_data),
                       "--device", "cpu", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--no-pretrained" in err[0]


def test_torchvision_names_resolve_as_before():
    """The same resolver answers for torchvision names: their weights, sizes and classifier surgery."""
    backbone = resolve_backbone("{{ cookiecutter.backbone }}")
    assert backbone.weights is not None and backbone.default_image_size() == backbone.weights.transforms().crop_size[0]
    assert resolve_backbone("vit_b_16").fit_image_size(70) == 80  # whole patches


def _train_args(data: Path, out: Path, *extra: str) -> list[str]:
    """train.py's arguments for a run of the user's module, loader workers on."""
    return ["--backbone", "my_models:TinyNet", "--data", str(data), "--device", "cpu", "--batch-size", "8",
            "--image-size", "32", "--workers", "1", "--seed", "3", "--precision", "fp32", "--parallel", "none",
            "--epochs", "2", "--out", str(out), *extra]


def _train(data: Path, out: Path, folder: Path, *extra: str, pause: str | None = None, log: Path) -> subprocess.Popen:
    """train.py as a user runs it: their module's folder on PYTHONPATH, loader workers on; stderr to `log`."""
    env = {**train_env(pause), "PYTHONPATH": os.pathsep.join([str(folder), str(PROJECT)])}
    command = [sys.executable, "train.py", *_train_args(data, out, *extra)]
    with open(log, "wb") as handle:
        return subprocess.Popen(paused(command) if pause else command, cwd=PROJECT, env=env,
                                stdout=subprocess.DEVNULL, stderr=handle)


@pytest.mark.slow
def test_own_module_trains_resumes_exactly_evaluates_predicts_and_exports(own_models, tiny_data, tmp_path, capsys):
    """The whole life of a run with your own module: the checkpoint's import path rebuilds it everywhere."""
    whole, split, log = tmp_path / "whole", tmp_path / "split", tmp_path / "train.log"
    # The uninterrupted reference in this process (one thread, the module on sys.path): the processes are the
    # stopped and the resumed runs, and one interpreter start fewer is most of a run this small.
    assert train_one_thread(_train_args(tiny_data, whole)) == 0
    capsys.readouterr()  # its lines are not evaluate's
    stopped = _train(tiny_data, split, own_models, pause="step:2:1", log=log)  # stopped after epoch 2's first step
    wait_for(stopped, log, "paused at step:2:1")
    stopped.send_signal(signal.SIGTERM)
    assert stopped.wait(timeout=HANG_S) != 0 and load_cpu(split / "last.pt")["step"] == 1
    resumed = _train(tiny_data, split, own_models, "--resume", str(split), log=log)
    assert resumed.wait(timeout=HANG_S) == 0, log.read_text()[-2000:]
    state = load_cpu(split / "last.pt")
    assert state["config"]["backbone"] == "my_models:TinyNet" and state["epoch"] == 2
    assert_same_run(state, load_cpu(whole / "last.pt"))  # exact resume: weights, optimizer, RNG states
    allow = ["--allow-import", "my_models:TinyNet"]  # the checkpoint names it; a file alone never imports code
    for name in ("best.pt", "last.pt"):
        assert evaluate.main([str(split / name), "--device", "cpu", "--workers", "1", *allow]) == 0
    assert_evaluate_equals_training(capsys.readouterr().out, split)  # the val_loss and metrics metrics.csv holds
    image = next((tiny_data / "val").rglob("*.png"))
    assert predict.main([str(split / "last.pt"), str(image), "--device", "cpu", "--json", *allow]) == 0
    from_checkpoint = json.loads(capsys.readouterr().out)[0]
    pytest.importorskip("onnxruntime", reason="needs the export extra: pip install -e '.[export]'")
    for fmt in ("onnx", "pt2"):
        assert export.main([str(split / "last.pt"), "--format", fmt, "--out", str(tmp_path / f"m.{fmt}"), *allow]) == 0
        capsys.readouterr()
        assert predict.main([str(tmp_path / f"m.{fmt}"), str(image), "--device", "cpu", "--json"]) == 0
        exported = json.loads(capsys.readouterr().out)[0]
        assert exported["label"] == from_checkpoint["label"]
        assert exported["probability"] == pytest.approx(from_checkpoint["probability"], abs=1e-4)
