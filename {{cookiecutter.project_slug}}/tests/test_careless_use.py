"""Careless and hostile use of the CLIs: bad values are exit 2 with nothing written, resumes keep their run,
degenerate data is refused, unreadable images (a decompression bomb) are skipped and counted everywhere."""

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from data.test_images import write_bomb

import evaluate
import export
import predict
import train
from {{ cookiecutter.package_name }}.data import check as data_check
from {{ cookiecutter.package_name }}.devkit import __main__ as device_table
from {{ cookiecutter.package_name }}.devkit import checkpoint as ckpt
from {{ cookiecutter.package_name }}.devkit.atomic import DiskFullError

BASE = ["--device", "cpu", "--batch-size", "8", "--image-size", "32", "--no-pretrained", "--precision", "fp32",
        "--parallel", "none"]


def run_train(data, out, *extra) -> int:
    return train.main(["--data", str(data), "--out", str(out), "--epochs", "1", *BASE, *extra])


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


MISTYPED = {  # a command line with one mistake each, and the word the error must name
    "train.py --epochs abc": (train.main, ["--epochs", "abc"], "--epochs"),
    "train.py --no-such-flag": (train.main, ["--no-such-flag"], "--no-such-flag"),
    "evaluate.py (no checkpoint)": (evaluate.main, [], "checkpoint"),
    "evaluate.py --verb (abbreviated)": (evaluate.main, ["last.pt", "--verb"], "--verb"),
    "predict.py --topk many": (predict.main, ["last.pt", "cat.png", "--topk", "many"], "--topk"),
    "export.py --format zip": (export.main, ["last.pt", "--format", "zip", "--out", "model"], "--format"),
    "devkit cuda:0 cuda:1": (device_table.main, ["cuda:0", "cuda:1"], "cuda:1"),
    "data check (no data)": (data_check.main, ["check"], "data"),
}


@pytest.mark.parametrize("command", MISTYPED)
def test_a_mistyped_command_line_is_one_line_and_exit_2(command, capsys):
    """A flag or value argparse refuses is one line on stderr naming it, and exit 2, for every CLI: not a screen of
    usage with the error below it (the last line a log keeps may be the usage's)."""
    main, argv, named = MISTYPED[command]
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    out, err = capsys.readouterr()
    assert stopped.value.code == 2 and out == "", out
    assert len(err.splitlines()) == 1 and err.startswith("error:") and named in err and "--help" in err, err


@pytest.fixture(scope="module")
def bomb_data(tiny_data, tmp_path_factory):
    """The tiny data with a real 30000x30000 PNG in one class of train/ and of val/."""
    root = tmp_path_factory.mktemp("bomb") / "data"
    shutil.copytree(tiny_data, root)
    for split in ("train", "val"):
        first_class = sorted(p for p in (root / split).iterdir() if p.is_dir())[0]
        write_bomb(first_class / "aaa_bomb.png")
    return root


@pytest.fixture(scope="module")
def one_epoch_run(tiny_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("careless") / "run"
    assert run_train(tiny_data, out, "--batch-size", "4", "--epochs", "1") == 0
    return out


BAD_TRAIN_FLAGS = [["--lr", "nan"], ["--lr", "-0.1"], ["--lr", "0"], ["--weight-decay", "-1"],
                   ["--label-smoothing", "1"], ["--label-smoothing", "-0.1"], ["--label-smoothing", "nan"],
                   ["--image-size", "100000"], ["--workers", "1000"], ["--max-bad-fraction", "nan"],
                   ["--save-every-minutes", "inf"], ["--device", "meta"]]


@pytest.mark.parametrize("flags", BAD_TRAIN_FLAGS, ids=lambda flags: " ".join(flags))
def test_bad_training_values_exit_2_and_write_nothing(flags, tiny_data, tmp_path, capsys):
    """Each value that cannot train is one line naming the flag, exit 2, and no run folder."""
    out = tmp_path / "run"
    assert run_train(tiny_data, out, *flags) == 2
    assert flags[0].lstrip("-").split("-")[0] in one_error_line(capsys)
    assert not out.exists()


def test_an_out_that_is_a_file_is_exit_2_and_left_alone(tiny_data, tmp_path, capsys):
    """--out naming a file: one line, exit 2, the file unchanged."""
    out = tmp_path / "notes.txt"
    out.write_text("mine")
    assert run_train(tiny_data, out) == 2
    assert "file" in one_error_line(capsys)
    assert out.read_text() == "mine"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_an_out_on_a_read_only_place_is_exit_2(tiny_data, tmp_path, capsys):
    """An --out that cannot be created is one line and exit 2, not a traceback."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert run_train(tiny_data, locked / "run") == 2
        assert "cannot write" in one_error_line(capsys)
    finally:
        locked.chmod(0o700)


def test_an_out_on_a_read_only_file_system_is_exit_2(tiny_data, tmp_path, capsys, monkeypatch):
    """A read-only file system (EROFS from mkdir) is one line and exit 2 with nothing written."""
    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    assert run_train(tiny_data, tmp_path / "run") == 2
    assert "Read-only file system" in one_error_line(capsys)
    assert not (tmp_path / "run").exists()


def test_a_single_class_is_refused_before_anything_is_written(tiny_data, tmp_path, capsys):
    """One class would train to loss 0 and accuracy 1.0: one line, exit 2, no run folder."""
    root = tmp_path / "data"
    for split in ("train", "val"):
        first_class = sorted(p for p in (tiny_data / split).iterdir() if p.is_dir())[0]
        shutil.copytree(first_class, root / split / first_class.name)
    assert run_train(root, tmp_path / "run") == 2
    assert "two class" in one_error_line(capsys)
    assert not (tmp_path / "run").exists()


def test_an_empty_validation_split_is_refused_before_anything_is_written(tiny_data, tmp_path, capsys):
    """val/ with class folders but no images: one line, exit 2, no run folder."""
    root = tmp_path / "data"
    shutil.copytree(tiny_data / "train", root / "train")
    for name in os.listdir(root / "train"):
        (root / "val" / name).mkdir(parents=True)
        (root / "val" / name / "readme.txt").write_text("no images here")
    assert run_train(root, tmp_path / "run") == 2
    assert "val" in one_error_line(capsys)
    assert not (tmp_path / "run").exists()


def test_a_last_batch_of_one_image_never_reaches_batchnorm(tiny_data, tmp_path):
    """A split of n images with --batch-size n - 1 trains (the lone last image waits for the next epoch)."""
    images = sum(1 for p in (tiny_data / "train").rglob("*") if p.is_file())
    assert run_train(tiny_data, tmp_path / "run", "--batch-size", str(images - 1), "--epochs", "2") == 0


def test_resume_keeps_the_runs_settings(one_epoch_run, tmp_path, capsys):
    """--resume DIR alone continues with the run's batch size; --epochs extends it with a note."""
    out = tmp_path / "copy"
    shutil.copytree(one_epoch_run, out)
    assert train.main(["--resume", str(out), "--device", "cpu", "--epochs", "2"]) == 0
    assert "resume: --epochs 2 (the run had 1)" in capsys.readouterr().out
    state = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    assert state["config"]["batch_size"] == 4 and state["epoch"] == 2
    assert state["config"]["data"] == json.loads((one_epoch_run / "config.json").read_text())["data"]


@pytest.mark.parametrize("flags", [["--batch-size", "8"], ["--image-size", "64"], ["--seed", "3"], ["--lr", "0.1"],
                                   ["--accum-steps", "2"], ["--backbone", "resnet34"]],
                         ids=lambda flags: flags[0])
def test_resume_refuses_a_flag_that_changes_the_run(flags, one_epoch_run, tmp_path, capsys):
    """A flag that would change what is trained is one line naming it and pointing at --init-from, exit 2."""
    out = tmp_path / "copy"
    shutil.copytree(one_epoch_run, out)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert train.main(["--resume", str(out), "--device", "cpu", *flags]) == 2
    line = one_error_line(capsys)
    assert flags[0] in line and "--init-from" in line
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_a_checkpoint_whose_config_is_not_a_mapping_is_exit_2(one_epoch_run, tmp_path, capsys):
    """A config that is a string (a hand-edited or foreign file) is one line and exit 2 for every CLI."""
    state = torch.load(one_epoch_run / "last.pt", map_location="cpu", weights_only=True)
    bad = ckpt.save_checkpoint(tmp_path / "bad.pt", {**state, "config": "resnet18"})
    assert train.main(["--resume", str(bad), "--device", "cpu", "--out", str(tmp_path / "run")]) == 2
    assert "config is a str" in one_error_line(capsys)
    assert evaluate.main([str(bad), "--device", "cpu"]) == 2
    assert "config is a str" in one_error_line(capsys)
    assert not (tmp_path / "run").exists()


def test_a_garbage_onnx_file_is_exit_2_for_predict(tmp_path, tiny_data, capsys):
    """predict.py with a .onnx that is not one: one line and exit 2."""
    fake = tmp_path / "model.onnx"
    fake.write_bytes(b"this is not a protobuf" * 10)
    image = next(p for p in tiny_data.rglob("*.png"))
    assert predict.main([str(fake), str(image), "--device", "cpu"]) == 2
    assert "not a readable .onnx" in one_error_line(capsys)


def test_export_refuses_a_nan_tolerance(one_epoch_run, tmp_path, capsys):
    """--tolerance nan would accept any difference: exit 2, no file."""
    out = tmp_path / "model.pt2"
    assert export.main([str(one_epoch_run / "last.pt"), "--format", "pt2", "--out", str(out),
                        "--tolerance", "nan"]) == 2
    assert "--tolerance" in one_error_line(capsys)
    assert not out.exists()


def test_a_full_disk_names_the_file(tmp_path, monkeypatch):
    """ENOSPC while a checkpoint is written: 'no space left on device' with the file's name, no temp file left."""
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt.os, "fsync", full)
    with pytest.raises(DiskFullError, match=r"no space left on device: cannot write .*last\.pt"):
        ckpt.save_checkpoint(tmp_path / "last.pt", {"x": torch.zeros(3)})
    assert list(tmp_path.iterdir()) == []


def test_a_decompression_bomb_is_skipped_and_counted_in_training(bomb_data, tmp_path, capsys):
    """Training warns once per bomb, counts both in metrics.csv, and finishes."""
    out = tmp_path / "run"
    assert run_train(bomb_data, out, "--max-bad-fraction", "0.2") == 0
    err = capsys.readouterr().err
    assert err.count("warning: skipping unreadable image") == 2 and "aaa_bomb.png" in err
    assert (out / "metrics.csv").read_text().splitlines()[1].split(",")[8] == "2"


def test_a_decompression_bomb_is_skipped_and_counted_by_evaluate(bomb_data, one_epoch_run, tmp_path, capsys):
    """evaluate.py warns about the bomb, counts it, and measures the rest."""
    code = evaluate.main([str(one_epoch_run / "last.pt"), "--data", str(bomb_data), "--device", "cpu",
                          "--out", str(tmp_path / "c.png"), "--mistakes", str(tmp_path / "m.png")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "aaa_bomb.png" in err and "1 unreadable skipped" in out


def test_a_decompression_bomb_is_skipped_by_predict_keeping_its_batch(bomb_data, one_epoch_run, capsys):
    """predict.py warns about the bomb and still classifies the other images of the same batch."""
    folder = sorted(p for p in (bomb_data / "val").iterdir() if p.is_dir())[0]
    images = sorted(str(p) for p in folder.iterdir())
    assert predict.main([str(one_epoch_run / "last.pt"), *images, "--device", "cpu", "--json"]) == 0
    out, err = capsys.readouterr()
    assert "skipped" in err and "aaa_bomb.png" in err
    assert len(json.loads(out)) == len(images) - 1
