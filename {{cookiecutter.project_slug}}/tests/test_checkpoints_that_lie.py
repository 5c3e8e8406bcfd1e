"""Checkpoints that lie are refused by every CLI that reads them: exit 2, one line naming the key, nothing built.

NaN weights, an enormous image size, a zero std, negative or NaN class weights in the loss, duplicate class names,
missing or mistyped config values, weights of another backbone, a class list of 100000 names (whose head alone would
be 200 MB): each is found by training/state_check.py before a model of real size is built or an image resized.
"""

import math

import pytest
import torch

import evaluate
import export
import predict
import train
from {{ cookiecutter.package_name }}.devkit.checkpoint import CheckpointError, save_checkpoint
from {{ cookiecutter.package_name }}.training import run_state


def _first_float(state: dict) -> str:
    return next(name for name, value in state["model"].items() if value.is_floating_point())


def _nan_weights(state):
    name = _first_float(state)
    state["model"][name] = torch.full_like(state["model"][name], math.nan)
    return "model." + name


def _set(key, value, expect):
    def lie(state):
        state[key] = value
        return expect
    return lie


def _config(key, value):
    def lie(state):
        state["config"] = {**state["config"], key: value}
        return f"config.{key}"
    return lie


def _no_backbone(state):
    state["config"] = {k: v for k, v in state["config"].items() if k != "backbone"}
    return "config.backbone"


def _preprocessing(**values):
    def lie(state):
        state["preprocessing"] = {"image_size": 32, "resize_size": None, "mean": [0.5] * 3, "std": [0.25] * 3,
                                  "reason": "a test", "augment": "none", **values}
        return f"preprocessing.{next(iter(values))}"
    return lie


def _duplicate_class(state):
    state["class_names"] = [state["class_names"][0], *state["class_names"][:-1]]
    return "twice"


def _class_counts(counts):
    def lie(state):  # the loss's class weights are built from them (task.build_loss)
        state["class_counts"] = counts(len(state["class_names"]))
        return "class_counts"
    return lie


def _many_classes(state):
    state["class_names"] = [f"class{i}" for i in range(100_000)]
    return "head.weight"


LIES = {
    "nan weights": _nan_weights,
    "an image size of 100000": _set("image_size", 100_000, "image_size"),
    "a zero std": _preprocessing(std=[0.0, 0.25, 0.25]),
    "a nan mean": _preprocessing(mean=[math.nan, 0.5, 0.5]),
    "a preprocessing size of 100000": _preprocessing(image_size=100_000),
    "duplicate class names": _duplicate_class,
    "no backbone in config": _no_backbone,
    "epochs as a string": _config("epochs", "3"),
    "an unknown precision": _config("precision", "fp8"),
    "weights of another backbone": _config("backbone", "vit_h_14"),
    "100000 class names": _many_classes,
    "a negative epoch": _set("epoch", -1, "epoch"),
    "an empty class list": _set("class_names", [], "class_names"),
    "negative class counts": _class_counts(lambda classes: [-1] * classes),
    "class counts for another number of classes": _class_counts(lambda classes: [1] * (classes + 1)),
    "fractional class counts": _class_counts(lambda classes: [0.5] * classes),
}


@pytest.fixture(scope="module")
def lies(checkpoint, tmp_path_factory) -> dict[str, tuple]:
    """Each lie told by a copy of the conftest checkpoint: (its path, the key the refusal must name)."""
    folder = tmp_path_factory.mktemp("lies")
    made = {}
    for index, (name, lie) in enumerate(LIES.items()):
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
        key = lie(state)
        made[name] = (save_checkpoint(folder / f"lie{index}.pt", state), key)
    return made


def _refusal(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.parametrize("lie", LIES)
def test_read_refuses_a_lie_naming_its_key(lie, lies):
    path, key = lies[lie]
    with pytest.raises(CheckpointError, match=str(path)) as refused:
        run_state.read(path)
    assert key in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("lie", LIES)
def test_predict_and_evaluate_refuse_a_lie(lie, lies, tiny_data, capsys):
    path, key = lies[lie]
    image = next(tiny_data.rglob("*.png"))
    assert predict.main([str(path), str(image), "--device", "cpu"]) == 2
    assert key in _refusal(capsys)
    assert evaluate.main([str(path), "--data", str(tiny_data), "--device", "cpu",
                          "--out", str(path.with_suffix(".png"))]) == 2
    assert key in _refusal(capsys)
    assert not path.with_suffix(".png").exists()


@pytest.mark.parametrize("lie", ["nan weights", "weights of another backbone", "100000 class names"])
def test_export_and_resume_refuse_a_lie(lie, lies, tiny_data, tmp_path, capsys):
    path, key = lies[lie]
    assert export.main([str(path), "--format", "pt2", "--out", str(tmp_path / "model.pt2")]) == 2
    assert key in _refusal(capsys)
    assert train.main(["--resume", str(path), "--data", str(tiny_data), "--device", "cpu",
                       "--out", str(tmp_path / "run")]) == 2
    assert key in _refusal(capsys)
    assert list(tmp_path.iterdir()) == []


def test_a_true_checkpoint_still_loads(checkpoint):
    """The checks refuse lies only: the conftest checkpoint reads and builds."""
    state = run_state.read(checkpoint)
    model = run_state.model_from_state(state, torch.device("cpu"))
    assert model.head.out_features == len(state["class_names"])
