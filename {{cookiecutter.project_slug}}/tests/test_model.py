"""The Classifier's tensors all land on one device, and its head follows its backbone."""

import os

import pytest
import torch
from torchvision import models

from {{ cookiecutter.package_name }}.backbones import resolve_backbone
from {{ cookiecutter.package_name }}.devkit import module_device
from {{ cookiecutter.package_name }}.model import Classifier, WeightsError, build_model, pretrained_state_dict, weights_file

BACKBONE = "{{ cookiecutter.backbone }}"


def test_every_parameter_and_buffer_lands_on_the_device(device):
    """Built for a device, the whole model (head included) is there: params and buffers alike."""
    model = build_model(BACKBONE, num_classes=4, pretrained=False, device=device)
    tensors = list(model.parameters()) + list(model.buffers())
    assert tensors and all(t.device == device for t in tensors)
    assert model.device == device


def test_model_moved_with_to_follows_completely(device):
    """A model built on cpu then moved with .to() leaves nothing behind."""
    model = build_model(BACKBONE, num_classes=3, pretrained=False, device=torch.device("cpu")).to(device)
    assert {t.device for t in [*model.parameters(), *model.buffers()]} == {device}


def test_head_is_created_on_the_backbone_device_when_built_on_meta():
    """A backbone on meta gets a head on meta: the Classifier never guesses a device."""
    backbone, width = resolve_backbone(BACKBONE).build(device=torch.device("meta"))
    model = Classifier(backbone, width, num_classes=5)
    assert model.head.weight.device.type == "meta"
    assert module_device(model).type == "meta"


def test_meta_forward_gives_logit_shape_without_compute():
    """On meta, a forward pass checks shapes and dtypes with no memory or arithmetic."""
    model = build_model(BACKBONE, num_classes=7, pretrained=False, device=torch.device("meta")).eval()
    logits = model(torch.empty(2, 3, 64, 64, device="meta"))
    assert logits.shape == (2, 7) and logits.dtype == torch.float32 and logits.device.type == "meta"


def test_original_classifier_is_removed():
    """The ImageNet classifier is gone: the only layer producing logits is our head."""
    model = build_model(BACKBONE, num_classes=4, pretrained=False, device=torch.device("meta"))
    linears = [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    assert linears[-1] == "head"
    size = resolve_backbone(BACKBONE).default_image_size()
    assert model.head.in_features == model.backbone.eval()(torch.empty(1, 3, size, size, device="meta")).shape[-1]
    assert all(m.out_features != 1000 for m in model.modules() if isinstance(m, torch.nn.Linear))


def _write_fake_weights() -> str:
    """Write a weights file with the right keys where torch hub looks, named as torchvision expects."""
    path = weights_file(BACKBONE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.manual_seed(1)
    state = models.get_model(BACKBONE, weights=None).state_dict()
    torch.save(state, path)
    return path


def test_pretrained_weights_load_from_the_hub_cache(tmp_path, monkeypatch):
    """With the weights file cached under TORCH_HOME, the real loading code uses it."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    path = _write_fake_weights()
    expected = torch.load(path, map_location="cpu", weights_only=True)
    model = build_model(BACKBONE, num_classes=4, pretrained=True, device=torch.device("cpu"))
    key = next(k for k in expected if k.endswith("weight") and expected[k].dim() == 4)
    assert torch.equal(model.backbone.state_dict()[key], expected[key])


def test_the_backbone_says_where_its_weights_are_and_loads_them(tmp_path, monkeypatch):
    """A torchvision backbone's weights: the file torch hub keeps, named as torchvision's URL names it, loaded from
    there as the model loads them."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    spec = resolve_backbone(BACKBONE)
    assert spec.weights_location() == weights_file(BACKBONE) == os.path.join(
        torch.hub.get_dir(), "checkpoints", os.path.basename(spec.weights.url))
    path = _write_fake_weights()
    expected = torch.load(path, map_location="cpu", weights_only=True)
    assert all(torch.equal(spec.pretrained_state()[key], value) for key, value in expected.items())


def test_missing_pretrained_weights_name_the_file_and_the_flag(tmp_path, monkeypatch):
    """Offline with no cached file: one line naming the file to place and --no-pretrained."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr("urllib.request.urlopen", _refuse_network)
    with pytest.raises(WeightsError) as info:
        pretrained_state_dict(BACKBONE)
    message = str(info.value)
    assert os.path.basename(weights_file(BACKBONE)) in message and "--no-pretrained" in message
    assert "\n" not in message


def _refuse_network(*args, **kwargs):
    """Stand in for a machine without internet (the download itself is not what is tested)."""
    raise OSError("network is unreachable")


def test_default_pretrained_falls_back_to_scratch_with_a_note_when_offline(tmp_path, monkeypatch):
    """The project's pretrained default, offline and uncached: one note naming the file, then from scratch;
    an explicit --pretrained still stops with WeightsError; a cached file is used."""
    from {{ cookiecutter.package_name }}.model import resolve_pretrained

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr("urllib.request.urlopen", _refuse_network)
    pretrained, note = resolve_pretrained(BACKBONE, requested=True, explicit=False)
    assert not pretrained and os.path.basename(weights_file(BACKBONE)) in note and "\n" not in note
    with pytest.raises(WeightsError):
        resolve_pretrained(BACKBONE, requested=True, explicit=True)
    assert resolve_pretrained(BACKBONE, requested=False, explicit=True) == (False, None)
    _write_fake_weights()
    assert resolve_pretrained(BACKBONE, requested=True, explicit=False) == (True, None)
