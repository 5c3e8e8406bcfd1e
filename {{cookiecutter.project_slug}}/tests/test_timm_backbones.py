"""--backbone timm/NAME: timm's models as backbones, tested on three families (a CNN, a ViT and a convolution-attention
hybrid: timm's own tiny test models), with the guarantees a torchvision backbone has.

Pretrained weights are written by the tests into a temporary Hugging Face hub cache (the layout huggingface_hub
reads: models--timm--NAME/snapshots/REV/model.safetensors and refs/main), read offline (conftest), so timm's and the
hub's real loading code runs without a network.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import HANG_S, TIMM_FAMILIES, fake_forward, train_one_thread
from run_helpers import EPOCHS, PROJECT, assert_same_run, killed_at, load_cpu, train_command, train_env
from torch import nn
from torch._subclasses.fake_tensor import unset_fake_temporarily

import evaluate
import export
import predict
from {{ cookiecutter.package_name }}.backbones import BackboneError, check_image_size, fit_image_size, resolve_backbone
from {{ cookiecutter.package_name }}.devkit.checkpoint import model_state, save_checkpoint
from {{ cookiecutter.package_name }}.devkit.precision import make_policy
from {{ cookiecutter.package_name }}.model import WeightsError, build_model, resolve_pretrained
from {{ cookiecutter.package_name }}.outputs import read_metrics
from {{ cookiecutter.package_name }}.task import WeightedCrossEntropy
from {{ cookiecutter.package_name }}.training.hardware import Hardware

HAS_TIMM = importlib.util.find_spec("timm") is not None
needs_timm = pytest.mark.skipif(not HAS_TIMM, reason="needs the timm extra: pip install -e '.[timm]'")
CPU = torch.device("cpu")
CUDA1 = torch.device("cuda", 1)
HIDE_TIMM = "import sys; sys.modules['timm'] = None; "  # `import timm` then fails as on a machine without it


def _hub_weights(hub: Path, repo: str, state: dict[str, torch.Tensor], filename: str = "model.safetensors") -> Path:
    """Write `state` where the hub keeps `repo`'s weights at revision main; the file's path."""
    from safetensors.torch import save_file

    revision = "0123456789abcdef0123456789abcdef01234567"
    repo_dir = hub / f"models--{repo.replace('/', '--')}"
    snapshot = repo_dir / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(revision)
    if filename.endswith(".safetensors"):
        save_file({key: value.contiguous() for key, value in state.items()}, snapshot / filename)
    else:
        torch.save(state, snapshot / filename)
    return snapshot / filename


@pytest.fixture
def hub(tmp_path, monkeypatch) -> Path:
    """An empty hub cache of this test's own, for this process and the train.py processes it starts."""
    from huggingface_hub import constants

    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))  # read once, when huggingface_hub was imported
    return cache


def _imagenet_state(model_name: str) -> dict[str, torch.Tensor]:
    """The layout of the model's ImageNet weights (its 1000-class classifier included), randomly initialised."""
    import timm

    torch.manual_seed(0)
    return timm.create_model(model_name).state_dict()


@pytest.mark.parametrize("name", TIMM_FAMILIES)
def test_each_family_is_built_on_the_device_with_the_head_beside_it(device, name):
    """The features and the head are born on the run's device (meta included), and give (B, classes) logits."""
    model = build_model(name, 3, pretrained=False, device=device, image_size=32)
    assert {tensor.device for tensor in [*model.parameters(), *model.buffers()]} == {device}
    assert model.head.weight.device == device
    assert model.train()(torch.zeros(2, 3, 32, 32, device=device)).shape == (2, 3)


@pytest.mark.parametrize("name", TIMM_FAMILIES)
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_each_family_takes_a_finite_half_precision_step(name, precision):
    """Under bf16/fp16 autocast (the CPU's; CUDA's in the cuda tier) a step gives a finite loss and float32 weights
    that move."""
    torch.manual_seed(0)
    model = build_model(name, 3, pretrained=False, device=CPU, image_size=32).train()
    before = model.head.weight.detach().clone()
    with make_policy(precision, CPU).autocast():
        logits = model(torch.randn(4, 3, 32, 32))
    loss = F.cross_entropy(logits.float(), torch.tensor([0, 1, 2, 0]))
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert torch.isfinite(loss) and model.head.weight.dtype == torch.float32
    assert not torch.equal(before, model.head.weight)


@pytest.fixture
def timm_on_fake_tensors(fake_tensors, monkeypatch):
    """fake_tensors (conftest), in which timm's models can be built: the drop-path schedule a ViT or CoAtNet reads
    from a CPU tensor while it is built (numbers, not weights) is computed outside the fake mode, for real."""
    import timm.layers.drop

    schedule = getattr(timm.layers.drop, "calculate_drop_path_rates", None)
    if schedule is None:
        pytest.skip("this timm computes its drop-path schedule inside each model, from values fake tensors lack")

    def computed(*args, **kwargs):
        with unset_fake_temporarily():
            return schedule(*args, **kwargs)

    for name, module in list(sys.modules.items()):  # each model module imported it by name
        if name.startswith("timm.") and getattr(module, "calculate_drop_path_rates", None) is schedule:
            monkeypatch.setattr(module, "calculate_drop_path_rates", computed)
    return fake_tensors


@pytest.mark.fake_cuda
@fake_forward
@pytest.mark.parametrize("name", TIMM_FAMILIES)
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_each_family_computes_in_half_on_cuda_with_float32_weights_and_loss(name, precision, fake_cuda,
                                                                            timm_on_fake_tensors, monkeypatch):
    """On cuda:1 (faked) under the run's Hardware: every convolution and linear layer of the family computes in the
    precision's dtype (CUDA autocast reaches the attention and the hybrid's blocks), the loss in float32, the
    weights stay float32 on cuda:1, and only fp16 scales the loss.

    A forward only: backward on fake cuda tensors needs the CUDA runtime (autograd's device threads); the steps are
    test_each_family_trains_in_half_precision_records_it_and_resumes's, on the CPU and in the cuda tier. The model
    stays contiguous: module.to(memory_format=...) cannot swap fake parameters (FakeTensorMode keeps a weak
    reference to each), so channels_last, CUDA's default under autocast, is left to the cuda tier's run.
    """
    fake_cuda(free_gib=[10, 70])
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", torch.backends.cudnn.benchmark)  # Hardware sets it on CUDA
    matmul = torch.get_float32_matmul_precision()  # and TF32 matmuls: this process's other tests keep theirs
    try:
        model = build_model(name, 3, pretrained=False, device=CUDA1, image_size=32).train()
        hw = Hardware.create(CUDA1, precision, channels_last=False, mean=(0.5,) * 3, std=(0.5,) * 3)
    finally:
        torch.set_float32_matmul_precision(matmul)
    computed = []  # the output dtype of each convolution and linear layer, in call order
    for layer in model.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            layer.register_forward_hook(lambda layer, inputs, output: computed.append(output.dtype))
    images, targets = hw.batch(torch.zeros(4, 3, 32, 32, dtype=torch.uint8), torch.tensor([0, 1, 2, 0]))
    with hw.policy.autocast():  # as the training loop runs it: the model under autocast, the loss after
        logits = model(images)  # (4, 3)
    loss = WeightedCrossEntropy(torch.ones(3)).to(CUDA1)(logits, targets)
    assert logits.shape == (4, 3) and logits.device == loss.device == CUDA1
    assert len(computed) > 1 and set(computed) == {hw.policy.dtype}, computed
    assert loss.dtype == torch.float32
    assert {(tensor.dtype, tensor.device) for tensor in model.parameters()} == {(torch.float32, CUDA1)}
    assert hw.scaler.is_enabled() is (precision == "fp16")


CUDA_AVAILABLE = torch.cuda.is_available()


@pytest.mark.slow
@pytest.mark.parametrize("name", TIMM_FAMILIES)
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("spec", ["cpu", pytest.param("cuda:0", marks=[
    pytest.mark.cuda, pytest.mark.skipif(not CUDA_AVAILABLE, reason="needs a CUDA device")])])
def test_each_family_trains_in_half_precision_records_it_and_resumes(spec, precision, name, tiny_data, tmp_path):
    """train.py --precision bf16/fp16 with a timm backbone: an epoch with a finite loss, the checkpoint records the
    precision (and on CUDA the fp16 GradScaler's scale), and --resume continues the run in it."""
    out = tmp_path / "run"
    extra = ("--backbone", name, "--precision", precision, "--device", spec, "--epochs", "1")
    assert train_one_thread(train_command(tiny_data, out, 0, False, extra)[2:]) == 0
    state = load_cpu(out / "last.pt")
    assert state["config"]["precision"] == precision and state["epoch"] == 1
    assert (state["scaler"]["scale"] > 0) if precision == "fp16" and spec != "cpu" else state["scaler"] == {}
    assert train_one_thread(train_command(tiny_data, out, 0, True, (*extra[:-1], "2"))[2:]) == 0
    resumed = load_cpu(out / "last.pt")
    assert resumed["config"]["precision"] == precision and resumed["epoch"] == 2
    assert all(math.isfinite(row["train_loss"]) for row in read_metrics(out / "metrics.csv"))


@needs_timm
def test_models_built_for_one_size_take_whole_patches():
    """A ViT built for 70 px cannot cut 16-px patches: 80 is named instead; a CNN takes any size."""
    assert fit_image_size("timm/test_resnet", 70) == 70
    assert fit_image_size("timm/test_vit", 70) == 80
    with pytest.raises(BackboneError, match="--image-size 80"):
        check_image_size("timm/test_vit", 70)


@needs_timm
@pytest.mark.parametrize(("name", "says"), [("timm/test_vitt", "closest: timm/test_vit"),
                                            ("timm/test_vit.no_such_tag", "Invalid pretrained tag")])
def test_an_unknown_timm_model_or_tag_is_one_line(name, says):
    with pytest.raises(BackboneError, match=says) as info:
        resolve_backbone(name)
    assert "\n" not in str(info.value)


def _without_timm(module: str, *args: str) -> subprocess.CompletedProcess:
    """`module`.main(args) in a Python where timm cannot be imported."""
    code = HIDE_TIMM + f"import {module}; sys.exit({module}.main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", code], cwd=PROJECT, env=train_env(), capture_output=True, text=True,
                          timeout=HANG_S)


def test_without_timm_the_flag_is_one_line_and_exit_2_naming_the_install(tmp_path):
    """--backbone timm/NAME where timm is not installed: exit 2, one line with the command, no run folder."""
    done = _without_timm("train", "--backbone", "timm/test_resnet", "--device", "cpu", "--out", str(tmp_path / "run"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: --backbone timm/test_resnet needs the timm package: pip install -e '.[timm]'"]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@needs_timm
def test_a_checkpoint_naming_a_timm_model_is_refused_in_one_line_without_timm(tiny_data, tmp_path):
    """predict.py on a timm model's checkpoint where timm is missing: one line naming the install, exit 2."""
    from {{ cookiecutter.package_name }}.config import TrainConfig

    model = build_model("timm/test_resnet", 4, pretrained=False, device=CPU)
    cfg = TrainConfig(device="cpu", pretrained=False, backbone="timm/test_resnet")
    state = {"model": model_state(model), "config": cfg.to_dict(), "class_names": ["a", "b", "c", "d"],
             "image_size": 32, "epoch": 1}
    path = save_checkpoint(tmp_path / "best.pt", state)
    done = _without_timm("predict", str(path), str(next((tiny_data / "val").rglob("*.png"))), "--device", "cpu")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: {path}")
    assert lines[0].endswith("needs the timm package: pip install -e '.[timm]'")


@needs_timm
def test_pretrained_weights_load_from_the_hub_cache_without_their_classifier(hub):
    """The hub's cached model.safetensors becomes the backbone's weights; its ImageNet classifier is left out."""
    state = _imagenet_state("test_vit")
    _hub_weights(hub, "timm/test_vit.r160_in1k", state)
    assert resolve_pretrained("timm/test_vit", requested=True, explicit=True) == (True, None)
    model = build_model("timm/test_vit", 3, pretrained=True, device=CPU)
    loaded = model.backbone.state_dict()
    assert loaded.keys() == {key for key in state if not key.startswith("head.")}
    assert all(torch.equal(loaded[key], state[key]) for key in loaded)


@needs_timm
def test_pretrained_weights_at_another_size_are_resized_by_timm(hub):
    """A ViT built for 64 px from 160-px weights: timm's own filter resamples the position embeddings."""
    _hub_weights(hub, "timm/test_vit.r160_in1k", _imagenet_state("test_vit"))
    model = build_model("timm/test_vit", 3, pretrained=True, device=CPU, image_size=64)
    assert model(torch.zeros(1, 3, 64, 64)).shape == (1, 3)


@needs_timm
def test_a_weights_file_the_user_names_is_loaded_and_the_run_starts_from_it(hub, tiny_data, tmp_path):
    """--pretrained-file FILE (timm's pretrained_cfg_overlay): its weights, not the hub's, start the run."""
    from safetensors.torch import save_file

    state = _imagenet_state("test_resnet")
    save_file(state, tmp_path / "mine.safetensors")
    out = tmp_path / "run"
    assert train_one_thread(train_command(tiny_data, out, 0, False, (
        "--backbone", "timm/test_resnet", "--pretrained-file", str(tmp_path / "mine.safetensors"), "--epochs", "1",
        "--lr", "1e-12"))[2:]) == 0  # a step too small to move the weights away from the file's
    trained = load_cpu(out / "last.pt")["model"]
    parameters = [key for key in state if not key.startswith("fc.") and "running_" not in key and "batches" not in key]
    assert all(torch.allclose(trained[f"backbone.{key}"], state[key], atol=1e-6) for key in parameters)
    assert json.loads((out / "config.json").read_text())["pretrained_file"].endswith("mine.safetensors")


@needs_timm
def test_a_pretrained_file_for_a_torchvision_backbone_or_a_missing_file_is_exit_2(tmp_path, capsys):
    import train

    for backbone, file in (("resnet18", tmp_path / "config.json"), ("timm/test_resnet", tmp_path / "missing")):
        (tmp_path / "config.json").write_text("{}")
        code = train.main(["--backbone", backbone, "--pretrained-file", str(file), "--device", "cpu",
                           "--out", str(tmp_path / "run")])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and "--pretrained-file" in err[0], err
    assert not (tmp_path / "run").exists()


class Payload:  # a pickled object: what a weights file must never be allowed to run
    pass


@needs_timm
def test_a_cached_weights_file_that_needs_a_pickle_is_refused(hub):
    """A hub snapshot holding only a pytorch_model.bin with an object in it: weights_only loading refuses it."""
    _hub_weights(hub, "timm/test_vit.r160_in1k", {"payload": Payload()}, filename="pytorch_model.bin")
    with pytest.raises(WeightsError, match="could not be loaded") as info:
        build_model("timm/test_vit", 3, pretrained=True, device=CPU)
    assert "\n" not in str(info.value)


@needs_timm
def test_offline_without_cached_weights_the_default_trains_from_scratch_and_an_explicit_flag_is_exit_2(hub):
    """As for torchvision's: the project's default falls back with a note; --pretrained insists."""
    pretrained, note = resolve_pretrained("timm/test_resnet", requested=True, explicit=False)
    assert not pretrained and note.startswith("note: pretrained timm/test_resnet weights are not cached")
    with pytest.raises(WeightsError, match="--no-pretrained"):
        resolve_pretrained("timm/test_resnet", requested=True, explicit=True)


@needs_timm
def test_a_run_uses_and_records_the_weights_data_configuration(hub, tiny_data, tmp_path, capsys):
    """test_vit's weights were made at 160 px, crop 0.95, bicubic, mean and std 0.5: the run resizes to 168, crops
    160, so records config.json and the checkpoint, and evaluate.py reads it back from there."""
    _hub_weights(hub, "timm/test_vit.r160_in1k", _imagenet_state("test_vit"))
    out = tmp_path / "run"
    assert train_one_thread(["--backbone", "timm/test_vit", "--pretrained", "--data", str(tiny_data), "--device",
                             "cpu", "--epochs", "1", "--batch-size", "8", "--workers", "0", "--out", str(out)]) == 0
    expected = {"image_size": 160, "resize_size": 168, "mean": [0.5] * 3, "std": [0.5] * 3,
                "interpolation": "bicubic"}
    recorded = json.loads((out / "config.json").read_text())["preprocessing"]
    assert {key: recorded[key] for key in expected} == expected
    saved = load_cpu(out / "last.pt")["preprocessing"]
    assert {key: saved[key] for key in expected} == expected
    capsys.readouterr()
    assert evaluate.main([str(out / "last.pt"), "--data", str(tiny_data), "--device", "cpu"]) == 0
    assert f"accuracy {read_metrics(out / 'metrics.csv')[-1]['val_acc']:.6f}" in capsys.readouterr().out  # as trained


@pytest.mark.slow
@pytest.mark.parametrize("name", TIMM_FAMILIES)
def test_each_family_resumes_exactly_after_sigkill_evaluates_predicts_and_exports(name, tiny_data, tmp_path, capsys):
    """The life of a run: killed mid-epoch 2 and resumed, it ends where an uninterrupted run ends; resumed again
    with more epochs it goes on; evaluate.py, predict.py and the three export formats agree with it."""
    extra = ("--backbone", name)
    whole, split, log = tmp_path / "whole", tmp_path / "split", tmp_path / "kill.log"
    assert train_one_thread(train_command(tiny_data, whole, 0, False, extra)[2:]) == 0
    killed_at(train_command(tiny_data, split, 0, False, extra), log, "step:2:1")
    assert train_one_thread(train_command(tiny_data, split, 0, True, extra)[2:]) == 0
    assert_same_run(load_cpu(split / "last.pt"), load_cpu(whole / "last.pt"))
    assert train_one_thread(train_command(tiny_data, split, 0, True, ("--epochs", str(EPOCHS + 1)))[2:]) == 0
    assert load_cpu(split / "last.pt")["epoch"] == EPOCHS + 1
    capsys.readouterr()

    assert evaluate.main([str(split / "last.pt"), "--data", str(tiny_data), "--device", "cpu"]) == 0
    image = next((tiny_data / "val").rglob("*.png"))
    capsys.readouterr()
    assert predict.main([str(split / "last.pt"), str(image), "--device", "cpu", "--json"]) == 0
    from_checkpoint = json.loads(capsys.readouterr().out)[0]
    pytest.importorskip("onnxruntime", reason="needs the export extra: pip install -e '.[export]'")
    for fmt, target in (("onnx", "m.onnx"), ("pt2", "m.pt2"), ("safetensors", "folder")):
        assert export.main([str(split / "last.pt"), "--format", fmt, "--out", str(tmp_path / target)]) == 0
        assert "max |logit difference|" in capsys.readouterr().out  # export's own parity check
        assert predict.main([str(tmp_path / target), str(image), "--device", "cpu", "--json"]) == 0
        exported = json.loads(capsys.readouterr().out)[0]
        assert exported["label"] == from_checkpoint["label"]
        assert exported["probability"] == pytest.approx(from_checkpoint["probability"], abs=1e-4)
    _the_card_recipe_rebuilds_it_with_timm_alone(tmp_path / "folder", split / "last.pt")


def _the_card_recipe_rebuilds_it_with_timm_alone(folder: Path, checkpoint: Path) -> None:
    """The model card's recipe (timm.create_model and the key map in config.json) gives the project's logits."""
    import timm
    from safetensors.torch import load_file

    config = json.loads((folder / "config.json").read_text())
    recipe = config["timm"]
    alone = timm.create_model(recipe["model"], num_classes=len(config["class_names"]), **recipe["kwargs"]).eval()
    alone.load_state_dict({recipe["keys"].get(k, k.removeprefix("backbone.")): v
                           for k, v in load_file(folder / "model.safetensors").items()})
    state = load_cpu(checkpoint)
    ours = build_model(state["config"]["backbone"], len(config["class_names"]), pretrained=False, device=CPU,
                       image_size=config["image_size"])
    ours.load_state_dict(state["model"])
    images = torch.randn(2, 3, config["image_size"], config["image_size"])
    with torch.no_grad():
        torch.testing.assert_close(alone(images), ours.eval()(images))


@pytest.mark.slow
@pytest.mark.parametrize("name", TIMM_FAMILIES)
@pytest.mark.parametrize("flag", ["--channels-last", "--compile"])
def test_each_family_trains_with_channels_last_and_compile(name, flag, tiny_data, tmp_path):
    """train.py --channels-last / --compile with a timm backbone: an epoch, a checkpoint without wrapper keys."""
    out = tmp_path / "run"
    command = train_command(tiny_data, out, 0, False, ("--backbone", name, "--epochs", "1", flag))
    assert train_one_thread(command[2:]) == 0
    assert not any(key.startswith(("_orig_mod.", "module.")) for key in load_cpu(out / "last.pt")["model"])
