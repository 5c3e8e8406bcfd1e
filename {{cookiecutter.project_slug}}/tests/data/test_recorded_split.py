"""A run records its --val-split division; --resume and evaluate.py refuse data that no longer matches it
(one line, exit 2) unless told --resplit."""

import json
import shutil

import pytest
import torch

import evaluate
import train

BASE = ["--device", "cpu", "--batch-size", "8", "--image-size", "32", "--no-pretrained", "--precision", "fp32",
        "--parallel", "none", "--val-split", "0.3", "--seed", "3"]


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


@pytest.fixture
def grown_run(tiny_data, tmp_path):
    """A one-epoch run on class folders divided by --val-split, then one more image in every class."""
    root, out = tmp_path / "flat", tmp_path / "run"
    shutil.copytree(tiny_data / "train", root)
    assert train.main(["--data", str(root), "--out", str(out), "--epochs", "1", *BASE]) == 0
    for folder in (p for p in root.iterdir() if p.is_dir()):
        shutil.copy(sorted(folder.glob("*.png"))[0], folder / "zz_added.png")
    return root, out


def evaluate_args(out, tmp_path, *extra) -> list[str]:
    return [str(out / "last.pt"), "--device", "cpu", "--out", str(tmp_path / "c.png"),
            "--mistakes", str(tmp_path / "m.png"), *extra]


def test_the_split_is_recorded_in_the_checkpoint_and_config(grown_run):
    """The rule, fraction, seed, count and digest are in last.pt and config.json alike."""
    _, out = grown_run
    recorded = torch.load(out / "last.pt", map_location="cpu", weights_only=True)["split"]
    assert recorded == json.loads((out / "config.json").read_text())["split"]
    assert recorded["rule"] == "val_split" and recorded["val_split"] == 0.3 and recorded["seed"] == 3


def test_resume_refuses_data_that_changed_since_the_run_split_it(grown_run, capsys):
    """An image added per class would move the split: one line, exit 2, the run's files untouched."""
    root, out = grown_run
    before = (out / "last.pt").read_bytes()
    assert train.main(["--data", str(root), "--out", str(out), "--epochs", "2", "--resume", str(out), *BASE]) == 2
    assert "--resplit" in one_error_line(capsys)
    assert (out / "last.pt").read_bytes() == before


def test_evaluate_refuses_data_that_changed_since_the_run_split_it(grown_run, tmp_path, capsys):
    """evaluate.py on the grown folder: one line, exit 2, no figures written."""
    _, out = grown_run
    assert evaluate.main(evaluate_args(out, tmp_path)) == 2
    assert "has changed" in one_error_line(capsys)
    assert not (tmp_path / "c.png").exists()


def test_resplit_divides_the_changed_data_anew(grown_run, tmp_path, capsys):
    """--resplit: evaluate.py measures, and --resume continues, on the data as it is now."""
    root, out = grown_run
    assert evaluate.main(evaluate_args(out, tmp_path, "--resplit")) == 0
    capsys.readouterr()
    assert train.main(["--data", str(root), "--out", str(out), "--epochs", "2", "--resume", str(out), "--resplit",
                       *BASE]) == 0
    assert evaluate.main(evaluate_args(out, tmp_path)) == 0  # the new division is the recorded one now
    assert json.loads((out / "config.json").read_text())["resplit"] is False  # the flag acted once
