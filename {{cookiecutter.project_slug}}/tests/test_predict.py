"""predict.py: inputs as files, folders and globs; batched inference; a row per readable image."""

import json
from pathlib import Path

import pytest
import torch
from conftest import DEVICES
from PIL import Image

import predict
from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.data.demo import DEMO_CLASSES
from {{ cookiecutter.package_name }}.data.transforms import build_transforms
from {{ cookiecutter.package_name }}.devkit.checkpoint import model_state, save_checkpoint
from {{ cookiecutter.package_name }}.devkit.precision import half_copy
from {{ cookiecutter.package_name }}.model import build_model
from {{ cookiecutter.package_name }}.model_files import Metadata, TorchPredictor
from {{ cookiecutter.package_name }}.training.hardware import Hardware
from {{ cookiecutter.package_name }}.training.run_state import model_from_state

CLASSES = sorted(DEMO_CLASSES)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A real checkpoint of the project's default model (untrained: labels need not be right)."""
    torch.manual_seed(0)
    cfg = TrainConfig(device="cpu", pretrained=False)
    model = build_model(cfg.backbone, len(CLASSES), pretrained=False, device=torch.device("cpu"))
    state = {"model": model_state(model), "config": cfg.to_dict(), "class_names": CLASSES, "image_size": 32, "epoch": 1}
    return save_checkpoint(tmp_path_factory.mktemp("run") / "best.pt", state)


def write_images(folder: Path, count: int, suffix: str = ".png") -> list[Path]:
    """`count` small distinct RGB images in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"img{i:03d}{suffix}" for i in range(count)]
    for i, path in enumerate(paths):
        Image.new("RGB", (40, 30), (i * 2 % 256, 100, 255 - i % 256)).save(path)
    return paths


def run(capsys, *argv: str) -> tuple[int, list[str], list[str]]:
    """predict.main's exit code, stdout lines and stderr lines."""
    code = predict.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err.splitlines()


def test_folder_of_100_images_prints_100_rows(checkpoint, tmp_path, capsys):
    """A folder of 100 images gives a header and exactly 100 rows, each a known label and a probability."""
    paths = write_images(tmp_path / "photos" / "nested", 100)
    code, out, err = run(capsys, checkpoint, tmp_path / "photos", "--device", "cpu", "--batch-size", "16")
    assert code == 0 and err == []
    assert out[0].split() == ["path", "label", "probability"]
    assert len(out[1:]) == 100
    assert [row.split()[0] for row in out[1:]] == [str(p) for p in paths]
    for row in out[1:]:
        _, label, probability = row.split()
        assert label in CLASSES and 0.0 <= float(probability) <= 1.0


def test_corrupt_file_is_a_warning_and_the_rest_are_still_classified(checkpoint, tmp_path, capsys):
    """An unreadable image is one 'warning: skipped' line on stderr; every other image gets its row."""
    paths = write_images(tmp_path, 5)
    (tmp_path / "broken.png").write_bytes(b"not a png at all")
    code, out, err = run(capsys, checkpoint, tmp_path, "--device", "cpu", "--batch-size", "2")
    assert code == 0
    assert len(err) == 1 and err[0].startswith(f"warning: skipped {tmp_path / 'broken.png'}: ")
    assert "Traceback" not in err[0]
    assert [row.split()[0] for row in out[1:]] == [str(p) for p in paths]


def test_files_folders_and_globs_expand_in_order_without_repeats(tmp_path):
    """Files stay as given, folders recurse for image extensions only, globs expand, duplicates drop."""
    a = write_images(tmp_path / "a", 2)
    b = write_images(tmp_path / "b" / "deeper", 2, suffix=".JPG")
    (tmp_path / "a" / "notes.txt").write_text("not an image")
    warnings = []
    found = predict.expand_inputs([str(a[1]), str(tmp_path / "a"), str(tmp_path / "b" / "**" / "*.JPG"),
                                   str(tmp_path / "missing.png"), str(tmp_path / "none*.png")], warnings.append)
    assert found == [a[1], a[0], *b]
    assert warnings == [f"warning: skipped {tmp_path / 'missing.png'}: no such file or directory",
                        f"warning: skipped {tmp_path / 'none*.png'}: no file matches"]


def test_json_lists_top_k_labels_in_falling_probability(checkpoint, tmp_path, capsys):
    """--json --topk 3 prints a JSON list: per image its path, best label, and three distinct ranked labels."""
    paths = write_images(tmp_path, 3)
    code, out, _ = run(capsys, checkpoint, *paths, "--device", "cpu", "--json", "--topk", "3")
    results = json.loads("\n".join(out))
    assert code == 0 and [r["path"] for r in results] == [str(p) for p in paths]
    for result in results:
        probabilities = [entry["probability"] for entry in result["topk"]]
        assert len({entry["label"] for entry in result["topk"]}) == 3
        assert probabilities == sorted(probabilities, reverse=True) and sum(probabilities) <= 1.0 + 1e-6
        assert result["label"] == result["topk"][0]["label"]


def test_topk_table_shows_label_probability_pairs(checkpoint, tmp_path, capsys):
    """In the table, --topk 2 shows 'label p, label p' after each path; K above the class count is clipped."""
    paths = write_images(tmp_path, 2)
    code, out, _ = run(capsys, checkpoint, *paths, "--device", "cpu", "--topk", "9")
    assert code == 0 and "top-4" in out[0]
    pairs = out[1].split(None, 1)[1].split(", ")
    assert len(pairs) == 4 and all(pair.split()[0] in CLASSES for pair in pairs)


def test_half_precision_labels_every_image_on_cpu(checkpoint, tmp_path, capsys):
    """--half runs a float16 copy of the model on the CPU too and still labels every image."""
    paths = write_images(tmp_path, 3)
    code, out, err = run(capsys, checkpoint, *paths, "--device", "cpu", "--half")
    assert code == 0 and err == [] and len(out) == 4


@pytest.mark.parametrize("device", [d for d in DEVICES if d != "meta"])  # meta holds no values to print
def test_cpu_images_are_moved_and_cast_to_the_model(device, checkpoint, tmp_path):
    """The loader yields CPU uint8 batches; top_predictions normalises them on the model's device, in its dtype."""
    device = torch.device(device)
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    model = half_copy(model_from_state(state, device).eval())
    seen = []
    model.register_forward_pre_hook(lambda module, args: seen.append((args[0].device, args[0].dtype)))
    dataset = predict.ImagePaths(write_images(tmp_path, 3), build_transforms(32, train=False, normalize=False))
    loader = torch.utils.data.DataLoader(dataset, batch_size=2, collate_fn=predict.collate_readable)
    predictor = TorchPredictor(model, Metadata(CLASSES, 32, [0.5] * 3, [0.5] * 3), device)
    hw = Hardware.create(device, mean=(0.5,) * 3, std=(0.5,) * 3)
    assert next(iter(loader))[0].dtype == torch.uint8
    results = list(predict.top_predictions(predictor, loader, 1, print, hw))
    assert [index for index, _, _ in results] == [0, 1, 2]
    assert seen == [(device, torch.float16)] * 2


def test_no_readable_image_exits_2_with_one_error_line(checkpoint, tmp_path, capsys):
    """When nothing can be read, the warnings are followed by one error line and exit code 2."""
    (tmp_path / "a.png").write_bytes(b"")
    code, _, err = run(capsys, checkpoint, tmp_path / "a.png", tmp_path / "nothing-here", "--device", "cpu")
    assert code == 2
    assert err[-1] == "error: none of the 1 image(s) could be read"
    assert [line.split(":")[0] for line in err] == ["warning", "warning", "error"]


def test_bad_topk_and_missing_checkpoint_exit_2(checkpoint, tmp_path, capsys):
    """--topk 0 and a checkpoint path that does not exist are user errors: exit 2, one line each."""
    image = write_images(tmp_path, 1)[0]
    assert run(capsys, checkpoint, image, "--device", "cpu", "--topk", "0")[0] == 2
    code, _, err = run(capsys, tmp_path / "absent.pt", image, "--device", "cpu")
    assert code == 2 and len(err) == 1 and "does not exist" in err[0]
