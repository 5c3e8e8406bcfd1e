"""One listing of the data for train.py, evaluate.py, predict.py and the data check: directory links not
followed, hidden names skipped and named, aliased class folders refused, the README's folder of class folders
accepted by the check, images too large to resize unreadable everywhere."""

import importlib.util
import json
import os
import re
import shutil

import pytest
import torch
from PIL import Image

import evaluate
import predict
import train
from {{ cookiecutter.package_name }}.data import check
from {{ cookiecutter.package_name }}.data.folders import DataError, load_rgb, load_splits
from {{ cookiecutter.package_name }}.data.unreadable import UnreadableLog

BASE = ["--device", "cpu", "--batch-size", "8", "--image-size", "32", "--no-pretrained", "--precision", "fp32",
        "--parallel", "none", "--epochs", "1", "--workers", "1"]


def count_in_check(capsys, root, *flags) -> tuple[int, str]:
    code = check.main(["check", str(root), "--workers", "1", *flags])
    return code, capsys.readouterr().out


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1, err
    return err[0]


def write_wide_png(path):
    """A 1 x 1,000,000 PNG: a few KB on disk, under Pillow's pixel limit, gigabytes once resized."""
    Image.new("L", (1_000_000, 1), color=128).save(path)
    return path


@pytest.fixture
def data_copy(tiny_data, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(tiny_data, root)
    return root


def test_a_symlink_loop_in_a_class_folder_is_not_followed_by_training_or_the_check(data_copy, tmp_path, capsys):
    """train/a/loop -> .. would list the tree again under class a: training and the check see the same count."""
    first = sorted(p for p in (data_copy / "train").iterdir() if p.is_dir())[0]
    os.symlink("..", first / "loop")
    files = sum(1 for p in (data_copy / "train").rglob("*.png") if not p.is_symlink())
    train_set, _ = load_splits(data_copy, 32)
    assert len(train_set) == files
    assert all(f"{os.sep}loop{os.sep}" not in path for path, _ in train_set.samples)
    code, out = count_in_check(capsys, data_copy)
    assert code == 0 and f"train: {files} images" in out and "loop" in out  # the note names the link
    assert train.main(["--data", str(data_copy), "--out", str(tmp_path / "run"), *BASE]) == 0
    assert "directory links (not followed)" in capsys.readouterr().err


def test_hidden_folders_are_no_class_and_are_named_in_a_note(data_copy, tmp_path, capsys):
    """A .ipynb_checkpoints/ holding an image is skipped (named on stderr), not trained as a class."""
    for split in ("train", "val"):
        hidden = data_copy / split / ".ipynb_checkpoints"
        hidden.mkdir()
        shutil.copy(next((data_copy / split).rglob("*.png")), hidden / "copy.png")
    out = tmp_path / "run"
    assert train.main(["--data", str(data_copy), "--out", str(out), *BASE]) == 0
    assert ".ipynb_checkpoints" in capsys.readouterr().err
    classes = json.loads((out / "config.json").read_text())["class_names"]
    assert not [name for name in classes if name.startswith(".")]
    code, report = count_in_check(capsys, data_copy)
    assert code == 0 and ".ipynb_checkpoints" in report


@pytest.mark.parametrize("how", ["link", "nested"])
def test_an_aliased_class_folder_is_refused_with_one_line(data_copy, tmp_path, capsys, how):
    """A class folder that is another class folder (a link to it, or a link to a folder inside it): exit 2."""
    first = sorted(p for p in (data_copy / "train").iterdir() if p.is_dir())[0]
    if how == "nested":
        (first / "inner").mkdir()
    os.symlink(first if how == "link" else first / "inner", data_copy / "train" / "zz_alias")
    os.makedirs(data_copy / "val" / "zz_alias")
    shutil.copy(next(first.glob("*.png")), data_copy / "val" / "zz_alias" / "one.png")
    assert train.main(["--data", str(data_copy), "--out", str(tmp_path / "run"), *BASE]) == 2
    assert "same directory" in one_error_line(capsys)
    assert not (tmp_path / "run").exists()
    code, out = count_in_check(capsys, data_copy)
    assert code == 1 and "same directory" in out


def test_the_check_accepts_a_folder_of_class_folders_as_training_does(tiny_data, tmp_path, capsys):
    """The README's layout (class folders, no train/ or val/): the check divides it by --val-split as training."""
    root = tmp_path / "flat"
    shutil.copytree(tiny_data / "train", root)
    code, out = count_in_check(capsys, root, "--val-split", "0.5")
    assert code == 0, out
    train_set, val_set = load_splits(root, 32, val_split=0.5, seed=0)
    assert f"train: {len(train_set)} images" in out and f"val: {len(val_set)} images" in out


def test_the_unreadable_message_names_a_module_that_exists(tmp_path):
    """The hint in 'too many unreadable images' is a command that runs: python -m <package>.data check."""
    log = UnreadableLog({"train": 10, "val": 10}, 0.0)
    log.add("train", str(tmp_path / "bad.png"))
    with pytest.raises(DataError) as raised:
        log.check()
    module = re.search(r"python -m (\S+) check", str(raised.value)).group(1)
    assert importlib.util.find_spec(module) is not None and module.endswith(".data")


def test_an_image_too_wide_to_resize_is_unreadable_before_it_is_decoded(tmp_path):
    """1 x 1,000,000 px is under Pillow's limit but 32 x 32,000,000 once resized: a DataError, nothing allocated."""
    wide = write_wide_png(tmp_path / "wide.png")
    assert wide.stat().st_size < 100_000
    with pytest.raises(DataError, match="wide.png"):
        load_rgb(str(wide), 32)


def test_an_image_too_wide_to_resize_is_skipped_by_training_evaluate_and_predict(data_copy, tmp_path, capsys):
    """Skipped and counted like a decompression bomb, in each of the three tools."""
    for split in ("train", "val"):
        first = sorted(p for p in (data_copy / split).iterdir() if p.is_dir())[0]
        write_wide_png(first / "aaa_wide.png")
    out = tmp_path / "run"
    assert train.main(["--data", str(data_copy), "--out", str(out), *BASE, "--max-bad-fraction", "0.2"]) == 0
    assert "aaa_wide.png" in capsys.readouterr().err
    assert evaluate.main([str(out / "last.pt"), "--device", "cpu", "--out", str(tmp_path / "c.png"),
                          "--mistakes", str(tmp_path / "m.png")]) == 0
    result, err = capsys.readouterr()
    assert "aaa_wide.png" in err and "1 unreadable skipped" in result
    images = sorted(str(p) for p in first.iterdir())
    assert predict.main([str(out / "last.pt"), *images, "--device", "cpu", "--json"]) == 0
    result, err = capsys.readouterr()
    assert "aaa_wide.png" in err and len(json.loads(result)) == len(images) - 1
    assert torch.load(out / "last.pt", map_location="cpu", weights_only=True)["unreadable"]["train"]


def test_a_val_class_folder_that_is_the_train_one_is_refused(data_copy):
    """val/<class> a link to train/<class>: validation would measure the images it trains on."""
    first = sorted(p.name for p in (data_copy / "train").iterdir() if p.is_dir())[0]
    shutil.rmtree(data_copy / "val" / first)
    os.symlink(data_copy / "train" / first, data_copy / "val" / first)
    with pytest.raises(DataError, match="same directory"):
        load_splits(data_copy, 32)
