"""Your own data, the two documented ways: a labels file (CSV `path,label[,split]`) beside a folder of images,
and your own dataset in a module outside the package (`--data module:function`, data/dataset.py's
ImageDataset). Each trains, resumes, evaluates and predicts, with loader workers on."""

import csv
import json
import shutil
import textwrap

import pytest
from run_helpers import assert_evaluate_equals_training

import evaluate
import export
import predict
import train
from {{ cookiecutter.package_name }}.data import check

BASE = ["--device", "cpu", "--batch-size", "8", "--image-size", "32", "--no-pretrained", "--precision", "fp32",
        "--parallel", "none", "--workers", "1"]


def flat_images_with_labels(tiny_data, root, with_split: bool):
    """tiny_data's images copied into one flat images/ folder, their classes in labels.csv."""
    (root / "images").mkdir(parents=True)
    rows = []
    for split in ("train", "val"):
        for path in sorted((tiny_data / split).rglob("*.png")):
            name = f"{split}_{path.parent.name}_{path.name}"
            shutil.copy(path, root / "images" / name)
            rows.append({"path": f"images/{name}", "label": path.parent.name, "split": split})
    with open(root / "labels.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["path", "label", "split"] if with_split else ["path", "label"])
        writer.writeheader()
        writer.writerows(rows if with_split else [{"path": r["path"], "label": r["label"]} for r in rows])
    return root


def train_resume_evaluate_predict(data: str, out, tmp_path, capsys, *extra) -> None:
    """One epoch, a resume to two, evaluate.py on the data the run recorded, predict.py on two images, and
    export.py (a .pt2 file checked against the checkpoint's outputs)."""
    assert train.main(["--data", data, "--out", str(out), "--epochs", "1", *BASE, *extra]) == 0
    assert train.main(["--data", data, "--out", str(out), "--epochs", "2", "--resume", str(out), *BASE, *extra]) == 0
    capsys.readouterr()
    allow = ["--allow-import", data] if ":" in data else []  # the checkpoint names the user's own dataset
    for name in ("best.pt", "last.pt"):
        assert evaluate.main([str(out / name), "--device", "cpu", "--workers", "1", "--out", str(tmp_path / "c.png"),
                              "--mistakes", str(tmp_path / "m.png"), *allow]) == 0
    assert_evaluate_equals_training(capsys.readouterr().out, out)  # the val_loss and metrics metrics.csv holds
    classes = json.loads((out / "config.json").read_text())["class_names"]
    images = [str(p) for p in sorted((tmp_path / "probe").glob("*.png"))]
    assert predict.main([str(out / "best.pt"), *images, "--device", "cpu", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(images) and {row["label"] for row in rows} <= set(classes)
    assert export.main([str(out / "best.pt"), "--format", "pt2", "--out", str(tmp_path / "model.pt2")]) == 0


@pytest.fixture
def probe(tiny_data, tmp_path):
    (tmp_path / "probe").mkdir()
    for path in sorted((tiny_data / "val").rglob("*.png"))[:2]:
        shutil.copy(path, tmp_path / "probe" / f"{path.parent.name}.png")


@pytest.mark.slow
def test_a_labels_file_beside_a_flat_folder_divided_by_val_split(tiny_data, tmp_path, capsys, probe):
    """--data FOLDER holding labels.csv (path,label): divided by --val-split, recorded, resumed, evaluated."""
    root = flat_images_with_labels(tiny_data, tmp_path / "flat", with_split=False)
    assert check.main(["check", str(root), "--workers", "1", "--val-split", "0.3"]) == 0  # as training reads it
    out = tmp_path / "run"
    train_resume_evaluate_predict(str(root), out, tmp_path, capsys, "--val-split", "0.3")
    assert json.loads((out / "config.json").read_text())["split"]["rule"] == "val_split"


@pytest.mark.slow
def test_a_labels_file_with_a_split_column(tiny_data, tmp_path, capsys, probe):
    """--data labels.csv with a split column: its train and val rows are the splits."""
    root = flat_images_with_labels(tiny_data, tmp_path / "flat", with_split=True)
    out = tmp_path / "run"
    train_resume_evaluate_predict(str(root / "labels.csv"), out, tmp_path, capsys)
    first = capsys.readouterr()
    assert evaluate.main([str(out / "best.pt"), "--device", "cpu", "--split", "train", "--out",
                          str(tmp_path / "t.png"), "--mistakes", str(tmp_path / "tm.png")]) == 0, first
    assert f"({len(list((tiny_data / 'train').rglob('*.png')))} images" in capsys.readouterr().out


def test_a_bad_labels_file_is_one_line_and_exit_2(tiny_data, tmp_path, capsys):
    """A row naming a missing file: refused with its row number before a run folder exists."""
    root = flat_images_with_labels(tiny_data, tmp_path / "flat", with_split=False)
    with open(root / "labels.csv", "a") as handle:
        handle.write("images/missing.png,circle\n")
    assert train.main(["--data", str(root), "--out", str(tmp_path / "run"), "--epochs", "1", *BASE]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "missing.png" in err[0] and "row" in err[0]
    assert not (tmp_path / "run").exists()


OWN_DATASET = textwrap.dedent('''
    """A user's own dataset: images made in memory (no files), implementing ImageDataset."""
    import random

    from PIL import Image, ImageDraw


    class Stripes:
        """Horizontal or vertical stripes; classes and targets known without drawing anything."""

        classes = ["horizontal", "vertical"]

        def __init__(self, count, seed):
            rng = random.Random(seed)
            self.targets = [i % 2 for i in range(count)]
            self.offsets = [rng.randrange(6) for _ in range(count)]

        def __len__(self):
            return len(self.targets)

        def __getitem__(self, index):
            image = Image.new("RGB", (32, 32), "black")
            draw = ImageDraw.Draw(image)
            for k in range(self.offsets[index], 32, 6):
                line = (0, k, 31, k) if self.targets[index] == 0 else (k, 0, k, 31)
                draw.line(line, fill="white", width=2)
            return image, self.targets[index]


    def make():
        return {"train": Stripes(24, seed=0), "val": Stripes(8, seed=1)}
''')


@pytest.mark.slow
def test_your_own_dataset_from_a_module_outside_the_package(tmp_path, capsys, monkeypatch, probe):
    """--data my_stripes:make (a module on the path, not in the package) trains, resumes, evaluates, predicts."""
    (tmp_path / "user_code").mkdir()
    (tmp_path / "user_code" / "my_stripes.py").write_text(OWN_DATASET)
    monkeypatch.syspath_prepend(str(tmp_path / "user_code"))
    out = tmp_path / "run"
    train_resume_evaluate_predict("my_stripes:make", out, tmp_path, capsys)
    assert json.loads((out / "config.json").read_text())["class_names"] == ["horizontal", "vertical"]


def test_a_dataset_that_gives_neither_a_path_nor_an_image_is_one_line(tmp_path, capsys, monkeypatch):
    """dataset[i] giving, say, a NumPy array: refused by name before a run folder exists."""
    (tmp_path / "user_code").mkdir()
    (tmp_path / "user_code" / "arrays.py").write_text(textwrap.dedent('''
        import numpy as np

        class Arrays:
            classes, targets = ["a", "b"], [0, 1, 0, 1]
            def __len__(self):
                return 4
            def __getitem__(self, index):
                return np.zeros((8, 8, 3), dtype=np.uint8), self.targets[index]
    '''))
    monkeypatch.syspath_prepend(str(tmp_path / "user_code"))
    assert train.main(["--data", "arrays:Arrays", "--out", str(tmp_path / "run"), "--epochs", "1", *BASE]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "ndarray" in err[0] and "PIL image" in err[0]
    assert not (tmp_path / "run").exists()
