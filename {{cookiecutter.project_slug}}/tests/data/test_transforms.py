"""--augment: the named training recipes, and a run that records its recipe and resumes with it."""

import json

import pytest
import torch
from conftest import train_one_thread

from {{ cookiecutter.package_name }} import settings
from {{ cookiecutter.package_name }}.data.transforms import AUGMENTATIONS, Preprocessing, build_transforms
from {{ cookiecutter.package_name }}.training import run_state


def _mirror_pair() -> tuple[torch.Tensor, torch.Tensor]:
    """A (3, 32, 32) uint8 image bright on its left half only, and its mirror image."""
    image = torch.zeros(3, 32, 32, dtype=torch.uint8)
    image[:, :, :16] = 255
    return image, image.flip(-1)


def test_the_recipes_are_none_light_and_standard_and_flags_offer_exactly_these():
    """--augment takes the recipe names (default: none); anything else is refused before a run starts."""
    assert set(AUGMENTATIONS) == {"none", "light", "standard"} and Preprocessing(32).augment == "none"
    assert settings.settle([]).cfg.augment == "none"
    assert settings.settle(["--augment", "none"]).cfg.augment == "none"
    with pytest.raises(SystemExit):
        settings.settle(["--augment", "heavy"])


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
def test_a_run_records_its_recipe_and_a_resumed_run_keeps_it(tiny_data, tmp_path):
    """--augment light lands in config.json and last.pt; resuming without the flag trains on with `light`."""
    out = tmp_path / "run"
    common = ["--data", str(tiny_data), "--device", "cpu", "--batch-size", "6", "--image-size", "32",
              "--no-pretrained", "--precision", "fp32", "--parallel", "none"]
    assert train_one_thread([*common, "--epochs", "1", "--augment", "light", "--out", str(out)]) == 0
    recorded = json.loads((out / "config.json").read_text())
    assert recorded["augment"] == "light" and recorded["preprocessing"]["augment"] == "light"
    assert run_state.preprocessing(run_state.read(out / "last.pt")).augment == "light"
    assert train_one_thread([*common, "--epochs", "2", "--resume", str(out)]) == 0
    assert run_state.preprocessing(run_state.read(out / "last.pt")).augment == "light"
    assert json.loads((out / "config.json").read_text())["augment"] == "light"

