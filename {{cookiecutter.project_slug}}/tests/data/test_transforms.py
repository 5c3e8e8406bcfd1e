"""--augment: the named training recipes, and a run that records its recipe and resumes with it."""

import json

import pytest
import torch
from conftest import train_one_thread

from {{ cookiecutter.package_name }} import settings
from {{ cookiecutter.package_name }}.data.transforms import AUGMENTATIONS, Preprocessing, build_transforms
from {{ cookiecutter.package_name }}.errors import ConfigError
from {{ cookiecutter.package_name }}.training import run_state


def _mirror_pair() -> tuple[torch.Tensor, torch.Tensor]:
    """A (3, 32, 32) uint8 image bright on its left half only, and its mirror image."""
    image = torch.zeros(3, 32, 32, dtype=torch.uint8)
    image[:, :, :16] = 255
    return image, image.flip(-1)


def test_flags_offer_every_registered_recipe_and_refuse_anything_else():
    """--augment takes each name in AUGMENTATIONS (default: none); an unknown name is refused before a run starts
    (once torch has loaded: the names are the registry's, ConfigError is train.py's one line and exit 2)."""
    assert "none" in AUGMENTATIONS and Preprocessing(32).augment == "none"
    assert settings.settle([]).cfg.augment == "none"
    for recipe in AUGMENTATIONS:
        assert settings.settle(["--augment", recipe]).cfg.augment == recipe
    with pytest.raises(ConfigError, match="--augment"):
        settings.settle(["--augment", "no-such-recipe"])


@pytest.mark.parametrize("recipe", list(AUGMENTATIONS))
def test_every_recipe_gives_training_images_shaped_as_evaluation_sees_them(recipe):
    """Whatever a recipe does to an image, the model gets (3, size, size) floats in training as in evaluation."""
    prep = Preprocessing(32, augment=recipe)
    image = torch.randint(0, 256, (3, 40, 48), dtype=torch.uint8)
    trained, evaluated = build_transforms(prep, train=True)(image), build_transforms(prep, train=False)(image)
    assert trained.shape == evaluated.shape == (3, 32, 32) and trained.dtype == evaluated.dtype == torch.float32
    assert build_transforms(prep, train=True, normalize=False)(image).dtype == torch.uint8


def test_none_trains_on_exactly_what_evaluation_sees():
    """Recipe `none`: the training transform is the evaluation transform, draw after draw."""
    prep = Preprocessing(32, augment="none")
    image, _ = _mirror_pair()
    assert torch.equal(build_transforms(prep, train=True)(image), build_transforms(prep, train=False)(image))


@pytest.mark.parametrize("recipe", ["none", "light"])
def test_the_default_and_the_light_recipe_never_mirror_an_image(recipe):
    """The default recipe and `light` (digits, text, scans: left and right matter) never mirror an image."""
    prep = Preprocessing(32, augment=recipe)
    transform, image, mirror = build_transforms(prep, train=True), *_mirror_pair()
    torch.manual_seed(0)
    outputs = [transform(image) for _ in range(40)]
    assert all((out[:, :, :16].mean() > out[:, :, 16:].mean()).item() for out in outputs)
    assert not any(torch.equal(out, build_transforms(prep, train=False)(mirror)) for out in outputs)


def test_a_checkpoint_from_before_the_choice_reads_back_as_the_recipe_it_trained_with():
    """Preprocessing saved without `augment` (older checkpoints) means the flips and crops they trained with."""
    saved = Preprocessing(32).to_dict()
    del saved["augment"]
    assert Preprocessing.from_dict(saved).augment == "standard"


@pytest.mark.slow
@pytest.mark.parametrize("recipe", list(AUGMENTATIONS))
def test_every_recipe_trains_is_recorded_and_a_resumed_run_keeps_it(recipe, tiny_data, tmp_path):
    """--augment RECIPE (each registered one) trains and lands in config.json and last.pt; resuming without
    the flag trains on with the same recipe."""
    out = tmp_path / "run"
    common = ["--data", str(tiny_data), "--device", "cpu", "--batch-size", "6", "--image-size", "32",
              "--no-pretrained", "--precision", "fp32", "--parallel", "none"]
    assert train_one_thread([*common, "--epochs", "1", "--augment", recipe, "--out", str(out)]) == 0
    recorded = json.loads((out / "config.json").read_text())
    assert recorded["augment"] == recipe and recorded["preprocessing"]["augment"] == recipe
    assert run_state.preprocessing(run_state.read(out / "last.pt")).augment == recipe
    assert train_one_thread([*common, "--epochs", "2", "--resume", str(out)]) == 0
    assert run_state.preprocessing(run_state.read(out / "last.pt")).augment == recipe
    assert json.loads((out / "config.json").read_text())["augment"] == recipe


@pytest.mark.parametrize("recipe", sorted(AUGMENTATIONS))
def test_every_resize_samples_with_the_preprocessings_interpolation(recipe):
    """A timm model's weights may want bicubic: the evaluation resize and every recipe's resizes use it, and a
    recorded preprocessing without one (older checkpoints) reads back as bilinear, what they trained with."""
    for interpolation in ("bilinear", "bicubic"):
        prep = Preprocessing(32, 36, augment=recipe, interpolation=interpolation)
        ops = [*build_transforms(prep, train=True).transforms, *build_transforms(prep, train=False).transforms]
        modes = {op.interpolation.value for op in ops if hasattr(op, "interpolation")}
        assert modes == {interpolation}
    old = {key: value for key, value in Preprocessing(32).to_dict().items() if key != "interpolation"}
    assert Preprocessing.from_dict(old).interpolation == "bilinear"
    assert Preprocessing(32, interpolation="lanczos").problem().startswith("interpolation is 'lanczos'")
