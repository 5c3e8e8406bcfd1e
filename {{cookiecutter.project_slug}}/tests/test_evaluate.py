"""evaluate.py and the task's metrics: the one evaluation loop, per-class figures, and the confusion-matrix PNG."""

import re

import numpy as np
import pytest
import torch
from conftest import DEVICES
from PIL import Image

import evaluate
import train
from {{ cookiecutter.package_name }}.data.demo import DEMO_CLASSES, write_demo_dataset
from {{ cookiecutter.package_name }}.data.folders import image_folder
from {{ cookiecutter.package_name }}.data.loaders import build_loader
from {{ cookiecutter.package_name }}.outputs import read_metrics
from {{ cookiecutter.package_name }}.plots import ConfidentMistakes, mistakes_figure
from {{ cookiecutter.package_name }}.task import Metrics, WeightedCrossEntropy, class_report, new_confusion, update_confusion
from {{ cookiecutter.package_name }}.training import run_state
from {{ cookiecutter.package_name }}.training.hardware import Hardware
from {{ cookiecutter.package_name }}.training.loop import evaluate as engine_evaluate

CLASSES = sorted(DEMO_CLASSES)
CPU = torch.device("cpu")


def test_evaluate_prints_accuracy_and_a_row_per_class_and_writes_the_png(checkpoint, tiny_data, capsys):
    """Exit 0; accuracy line, the metrics under metrics.csv's names, a precision/recall/F1 row per class, macro-F1,
    confusion_val.png beside the checkpoint."""
    code = evaluate.main([str(checkpoint), "--data", str(tiny_data), "--device", "cpu", "--batch-size", "5"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0].startswith("val: accuracy ") and "(12 images, 4 classes" in out[0]
    assert {"val_loss", "val_acc", "val_macro_f1"} <= set(out[1].split()[::2])
    assert out[2].split() == ["class", "precision", "recall", "f1", "support"]
    assert [row.split()[0] for row in out[3:7]] == CLASSES
    assert all(row.split()[4] == "3" for row in out[3:7])
    # lines a project adds to the report (another metric) may come anywhere after the class rows
    [macro_f1] = [line for line in out[7:] if line.split()[:1] == ["macro-F1"]]
    assert 0 <= float(macro_f1.split()[1]) <= 1
    png = checkpoint.parent / "confusion_val.png"
    assert f"confusion matrix: {png}" in out
    with Image.open(png) as image:
        assert np.asarray(image.convert("RGB")).std() > 10


def test_evaluate_without_data_measures_the_data_the_checkpoint_trained_on(checkpoint, tmp_path, capsys):
    """No --data: the checkpoint's recorded data folder and --val-split, not the demo data (whose classes differ)."""
    write_demo_dataset(tmp_path / "demo", train_per_class=5, val_per_class=1, image_size=32, seed=1)
    flat = tmp_path / "shapes"  # class folders without train/ and val/, split 4:1 by --val-split 0.2
    flat.mkdir()
    for index, name in enumerate(CLASSES):
        (tmp_path / "demo" / "train" / name).rename(flat / f"kind{index}")
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    state["config"] = {**state["config"], "data": str(flat), "val_split": 0.2}
    state["class_names"] = [f"kind{index}" for index in range(len(CLASSES))]
    torch.save(state, tmp_path / "best.pt")
    assert evaluate.main([str(tmp_path / "best.pt"), "--device", "cpu"]) == 0
    assert "(4 images, 4 classes" in capsys.readouterr().out  # one of each class's five images validates


@pytest.fixture(scope="module")
def imbalanced_run(tmp_path_factory):
    """A real two-epoch run on imbalanced data (6:3:2:1 train images per class) with label smoothing,
    bf16 autocast and channels_last, so class weights, smoothing and autocast all shape val_loss."""
    root = tmp_path_factory.mktemp("imbalanced") / "data"
    write_demo_dataset(root, train_per_class=7, val_per_class=5, image_size=32, seed=3)
    for split, keep in (("train", (6, 3, 2, 1)), ("val", (5, 3, 2, 1))):
        for name, count in zip(sorted(DEMO_CLASSES), keep):
            for extra in sorted((root / split / name).iterdir())[count:]:
                extra.unlink()
    out = tmp_path_factory.mktemp("run")
    code = train.main(["--data", str(root), "--device", "cpu", "--epochs", "2", "--batch-size", "4",
                       "--image-size", "32", "--label-smoothing", "0.2", "--precision", "bf16", "--channels-last",
                       "--parallel", "none", "--out", str(out)])
    assert code == 0
    return root, out


def printed_numbers(line: str) -> tuple[float, float]:
    """(accuracy, loss) from evaluate.py's first line."""
    match = re.match(r"val: accuracy ([0-9.]+)  loss ([0-9.]+) ", line)
    assert match, line
    return float(match.group(1)), float(match.group(2))


@pytest.mark.slow
def test_evaluate_on_best_pt_prints_the_val_numbers_metrics_csv_recorded_for_its_epoch(imbalanced_run, capsys):
    """Class weights, label smoothing, bf16 autocast and channels_last: evaluate.py equals training's validation."""
    root, out = imbalanced_run
    epoch = torch.load(out / "best.pt", map_location="cpu", weights_only=True)["epoch"]
    row = next(row for row in read_metrics(out / "metrics.csv") if row["epoch"] == epoch)
    capsys.readouterr()
    assert evaluate.main([str(out / "best.pt"), "--data", str(root), "--device", "cpu"]) == 0
    printed = capsys.readouterr().out.splitlines()
    accuracy, loss = printed_numbers(printed[0])
    assert (accuracy, loss) == (row["val_acc"], row["val_loss"])
    [macro_f1] = [float(line.split()[1]) for line in printed if line.startswith("macro-F1")]
    assert macro_f1 == pytest.approx(row["val_macro_f1"], abs=1e-6)  # the same matrix, from the same loop


@pytest.mark.slow
def test_plain_cross_entropy_would_not_match_the_recorded_val_loss(imbalanced_run):
    """The equality above means something: an unweighted, unsmoothed loss gives another number on this data."""
    root, out = imbalanced_run
    state = run_state.read(out / "best.pt")
    row = next(row for row in read_metrics(out / "metrics.csv") if row["epoch"] == state["epoch"])
    model = run_state.model_from_state(state, CPU)
    loader = build_loader(image_folder(root, "val", 32, train=False), 4, CPU, train=False)
    plain = engine_evaluate(model, WeightedCrossEntropy(torch.ones(4)), loader, Hardware.create(CPU), progress=False)
    assert abs(plain.loss - row["val_loss"]) > 1e-3


def test_the_confusion_matrix_is_filled_by_the_evaluation_loop_itself(checkpoint, tiny_data):
    """loop.evaluate counts every image into the metrics it is given; their accuracy is the loop's accuracy."""
    state = run_state.read(checkpoint)
    model = run_state.model_from_state(state, CPU)
    loader = build_loader(image_folder(tiny_data, "val", 32, train=False), 4, CPU, train=False)
    metrics = Metrics(4, CPU)
    stats = engine_evaluate(model, WeightedCrossEntropy(torch.ones(4)), loader, Hardware.create(CPU), progress=False,
                            metrics=metrics)
    matrix = metrics.confusion
    assert matrix.sum() == 12 and matrix.shape == (4, 4)
    assert class_report(matrix).accuracy == pytest.approx(stats.acc)


def test_out_flag_and_split_choose_where_and_what(checkpoint, tiny_data, tmp_path, capsys):
    """--split train measures train/ (24 images); --out puts the PNG where asked."""
    out = tmp_path / "figures" / "cm.png"
    code = evaluate.main([str(checkpoint), "--data", str(tiny_data), "--split", "train", "--out", str(out),
                          "--device", "cpu"])
    assert code == 0 and out.stat().st_size > 0
    assert "(24 images" in capsys.readouterr().out


def test_class_report_matches_hand_computed_precision_and_recall():
    """Rows are true classes, columns predictions; a class never predicted has precision 0, not NaN."""
    report = class_report(torch.tensor([[2, 1, 0], [0, 3, 0], [1, 0, 0]]))
    assert report.accuracy == pytest.approx(5 / 7)
    assert report.precision == pytest.approx([2 / 3, 3 / 4, 0.0])
    assert report.recall == pytest.approx([2 / 3, 1.0, 0.0])
    assert report.support == [3, 3, 1]


@pytest.mark.parametrize("device", [d for d in DEVICES if d != "meta"])  # bincount needs real values
def test_confusion_accumulates_on_the_device_of_the_predictions(device):
    """update_confusion counts (true, predicted) pairs with bincount, the matrix staying on its device."""
    device = torch.device(device)
    matrix = new_confusion(3, device)
    update_confusion(matrix, torch.tensor([0, 1, 1, 2], device=device), torch.tensor([0, 1, 2, 2], device=device))
    update_confusion(matrix, torch.tensor([2], device=device), torch.tensor([0], device=device))
    assert matrix.device == device
    assert matrix.cpu().tolist() == [[1, 0, 1], [0, 1, 0], [0, 1, 1]]


def test_classes_that_differ_from_the_checkpoint_exit_2(checkpoint, tmp_path, capsys):
    """A split whose class folders are not the checkpoint's is one error line and exit 2, no PNG."""
    for name in ("apple", "pear"):
        (tmp_path / "val" / name).mkdir(parents=True)
        Image.new("RGB", (32, 32)).save(tmp_path / "val" / name / "0.png")
    code = evaluate.main([str(checkpoint), "--data", str(tmp_path), "--device", "cpu",
                          "--out", str(tmp_path / "cm.png")])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and "apple" in err[0]
    assert not (tmp_path / "cm.png").exists()


def test_missing_split_exits_2(checkpoint, tiny_data, capsys):
    """A --split with no folder is a user error, not a traceback."""
    assert evaluate.main([str(checkpoint), "--data", str(tiny_data), "--split", "test", "--device", "cpu"]) == 2
    assert "test" in capsys.readouterr().err


@pytest.mark.parametrize("device", [d for d in DEVICES if d != "meta"])  # meta holds no probabilities to rank
def test_confident_mistakes_keeps_the_most_confident_wrong_predictions_across_batches(device):
    """Over two batches, the collector keeps the wrong predictions of highest probability, best first."""
    device = torch.device(device)
    mistakes = ConfidentMistakes(count=3)
    images = torch.arange(6, dtype=torch.float32, device=device).view(6, 1, 1, 1).expand(6, 3, 2, 2)
    # Probabilities of the predicted class (class 0): 0.9, 0.6, 0.8 | 0.7, 0.95, 0.55; targets 1 = wrong.
    probs = torch.tensor([0.9, 0.6, 0.8, 0.7, 0.95, 0.55], device=device)
    logits = torch.stack([probs.log(), (1 - probs).log()], dim=1)  # (6, 2): softmax gives back probs
    targets = torch.tensor([1, 1, 0, 1, 0, 1], device=device)  # images 2 and 4 are predicted right
    mistakes(images[:3], targets[:3], logits[:3])
    mistakes(images[3:], targets[3:], logits[3:])
    kept, true, predicted, confidences = mistakes.result()
    assert kept[:, 0, 0, 0].tolist() == [0.0, 3.0, 1.0]  # 0.9, 0.7, 0.6; the right 0.95 and 0.8 are not mistakes
    assert true == [1, 1, 1] and predicted == [0, 0, 0]
    assert confidences == pytest.approx([0.9, 0.7, 0.6], abs=1e-5)


def test_evaluate_writes_a_grid_of_the_most_confident_mistakes(checkpoint, tiny_data, tmp_path, capsys):
    """mistakes_val.png holds one titled image per wrong prediction (true, predicted, probability), best first."""
    png = tmp_path / "mistakes.png"
    code = evaluate.main([str(checkpoint), "--data", str(tiny_data), "--device", "cpu", "--batch-size", "5",
                          "--mistakes", str(png)])
    out = capsys.readouterr().out.splitlines()
    wrong = round((1 - float(out[0].split()[2])) * 12)  # an untrained model: some of the 12 images are wrong
    assert code == 0 and wrong > 0 and out[-1] == f"most confident mistakes ({min(wrong, 16)}): {png}"
    with Image.open(png) as image:
        assert np.asarray(image.convert("RGB")).std() > 10
    # The same collector and figure evaluate.py uses, inspected before saving.
    state = run_state.read(checkpoint)
    loader = build_loader(image_folder(tiny_data, "val", 32, train=False), 5, CPU, train=False)
    mistakes = ConfidentMistakes(16)
    engine_evaluate(run_state.model_from_state(state, CPU), run_state.loss_from_state(state, CPU), loader,
                    Hardware.create(CPU), progress=False, on_batch=mistakes)
    images, true, predicted, probabilities = mistakes.result()
    assert len(true) == wrong and probabilities == sorted(probabilities, reverse=True)
    figure = mistakes_figure(images, true, predicted, probabilities, CLASSES, mean=[0.5] * 3, std=[0.5] * 3)
    titles = [axis.get_title() for axis in figure.axes if axis.get_title()]
    assert len(titles) == wrong
    for title, t, p, prob in zip(titles, true, predicted, probabilities):
        assert title == f"true {CLASSES[t]}\npred {CLASSES[p]} ({prob:.2f})" and t != p
