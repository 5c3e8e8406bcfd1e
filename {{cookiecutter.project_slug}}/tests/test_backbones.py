"""Every torchvision classification model builds without its ImageNet classifier and trains behind a new head."""

import pytest
import torch
import torch.nn.functional as F
from torchvision import models

import train
from {{ cookiecutter.package_name }}.backbones import (
    BackboneError,
    backbone_names,
    check_image_size,
    fit_image_size,
    resolve_backbone,
)
from {{ cookiecutter.package_name }}.model import build_model

META = torch.device("meta")


def _family(name: str) -> str:
    """The module a model comes from: resnet, vision_transformer, regnet, ... (a backbone the project registers
    itself is a family of its own, so adding one never breaks collecting this file)."""
    try:
        return models.get_model_builder(name).__module__.rsplit(".", 1)[-1]
    except ValueError:
        return name


def _cost(name: str) -> float:
    """GFLOPs at the model's own size where torchvision publishes them; 0 for a backbone without published weights."""
    try:
        return models.get_model_weights(name).DEFAULT.meta["_ops"]
    except (ValueError, KeyError, AttributeError):
        return 0.0


def _cheapest_of_each_family() -> set[str]:
    """The member of each family with the fewest GFLOPs at its own size: the cheap ones to run for real."""
    cheapest: dict[str, str] = {}
    for name in backbone_names():
        family = _family(name)
        if family not in cheapest or _cost(name) < _cost(cheapest[family]):
            cheapest[family] = name
    return set(cheapest.values())


FAMILY_REPRESENTATIVES = sorted(_cheapest_of_each_family())
# One per family in the quick set; the other ~60 names run the same test in the slow set (meta forwards
# of large models go through Python reference kernels: about 0.3 s each).
EVERY_BACKBONE = [name if name in FAMILY_REPRESENTATIVES else pytest.param(name, marks=pytest.mark.slow)
                  for name in backbone_names()]


def test_every_torchvision_classification_model_is_accepted():
    """--backbone takes all of torchvision's classification models, and the families cover all of them."""
    assert len(backbone_names()) >= 80
    assert {_family(name) for name in FAMILY_REPRESENTATIVES} == {_family(name) for name in backbone_names()}
    for name in backbone_names():
        resolve_backbone(name)


@pytest.mark.parametrize("name", EVERY_BACKBONE)
def test_backbone_builds_on_meta_and_gives_logits_at_its_own_size(name):
    """On meta at the model's own input size: (B, classes) logits in training mode, a tensor and not
    auxiliary outputs; no ImageNet-sized layer left; every parameter and buffer on meta."""
    model = build_model(name, num_classes=3, pretrained=False, device=META)
    size = resolve_backbone(name).default_image_size()
    logits = model.train()(torch.empty(2, 3, size, size, device=META))
    assert type(logits) is torch.Tensor and logits.shape == (2, 3)
    imagenet_layers = [layer for layer in model.modules()
                       if (isinstance(layer, torch.nn.Linear) and layer.out_features == 1000)
                       or (isinstance(layer, torch.nn.Conv2d) and layer.out_channels == 1000)]
    assert imagenet_layers == []
    assert {t.device.type for t in [*model.parameters(), *model.buffers()]} == {"meta"}


@pytest.mark.slow
@pytest.mark.parametrize("name", FAMILY_REPRESENTATIVES)
def test_one_backbone_per_family_takes_a_training_step_on_cpu(name):
    """A real step at the model's own size: finite loss, a gradient for every parameter (no dead auxiliary
    head), and the head's weights move."""
    torch.manual_seed(0)
    model = build_model(name, num_classes=3, pretrained=False, device=torch.device("cpu")).train()
    size = resolve_backbone(name).default_image_size()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    head_before = model.head.weight.detach().clone()
    loss = F.cross_entropy(model(torch.randn(2, 3, size, size)), torch.tensor([0, 2]))
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    assert [n for n, p in model.named_parameters() if p.grad is None] == []
    assert not torch.equal(model.head.weight, head_before)


@pytest.mark.parametrize("name", ["googlenet", "inception_v3"])
def test_imagenet_weights_with_auxiliary_heads_load_and_leave_no_auxiliary_head(name):
    """Their ImageNet weights hold the auxiliary classifiers (aux1 and aux2, AuxLogits): such a state loads,
    and the backbone has no auxiliary head left and gives one (B, F) tensor in training mode."""
    with torch.device("meta"):  # the layout of the ImageNet weights: torchvision builds them with the aux heads
        imagenet = models.get_model(name, weights=None, aux_logits=True, init_weights=False)
    state = imagenet.state_dict()
    assert any(key.lower().startswith("aux") for key in state)
    backbone, width = resolve_backbone(name).build(device=META, state=state)
    assert [path for path, _ in backbone.named_modules() if path.lower().startswith("aux")] == []
    size = resolve_backbone(name).default_image_size()
    features = backbone.train()(torch.empty(2, 3, size, size, device=META))
    assert type(features) is torch.Tensor and features.shape == (2, width)


def test_misspelt_backbone_is_one_line_naming_the_closest_names():
    """A typo is refused with the nearest valid names, in one line."""
    with pytest.raises(BackboneError) as info:
        resolve_backbone("resnet19")
    message = str(info.value)
    assert "'resnet19'" in message and "resnet18" in message and "\n" not in message


def test_misspelt_backbone_exits_2_before_anything_is_written(tmp_path, capsys):
    """train.py --backbone efficientnet_b9: exit 2, one stderr line with suggestions, no run folder."""
    code = train.main(["--backbone", "efficientnet_b9", "--device", "cpu", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "closest: efficientnet_b" in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("name", "wanted", "fitted"), [
    ("resnet18", 32, 32), ("inception_v3", 64, 75), ("alexnet", 32, 63), ("vit_b_16", 70, 80),
    ("vit_b_32", 70, 96), ("maxvit_t", 64, 224), ("swin_t", 48, 48),
])
def test_small_inputs_are_raised_to_the_nearest_size_the_architecture_takes(name, wanted, fitted):
    """The demo's 64 px reaches every backbone: sizes are raised to the next one the architecture accepts."""
    assert fit_image_size(name, wanted) == fitted
    model, _ = resolve_backbone(name).build(device=META, image_size=fitted)
    assert model.eval()(torch.empty(1, 3, fitted, fitted, device=META)).dim() == 2


def test_an_explicit_size_the_backbone_cannot_take_is_refused_with_one_it_can():
    """--image-size 64 with inception_v3 is a user error that names 75, not a crash inside the model."""
    with pytest.raises(BackboneError, match="--image-size 75"):
        check_image_size("inception_v3", 64)
