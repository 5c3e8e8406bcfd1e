"""Run-directory files: atomic JSON and CSV, and the curves and confusion-matrix pictures."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from {{ cookiecutter.package_name }}.outputs import METRICS_COLUMNS, read_metrics, run_environment, write_json, write_metrics
from {{ cookiecutter.package_name }}.plots import confusion_figure, curves_figure, save_figure

TAB_BLUE, TAB_ORANGE = (31, 119, 180), (255, 127, 14)  # matplotlib's first two line colours


def rows_for(epochs: int) -> list[dict]:
    """Metrics rows whose loss falls and accuracy rises, as a real run's would."""
    return [{"epoch": e, "train_loss": 2.0 / e, "train_acc": 0.3 + 0.1 * e, "val_loss": 2.2 / e,
             "val_acc": 0.25 + 0.1 * e, "lr": 1e-3, "epoch_time_s": 1.0, "images_per_s": 100.0}
            for e in range(1, epochs + 1)]


def pixels(path: Path) -> np.ndarray:
    """A PNG read back as an (H, W, 3) uint8 array."""
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def has_colour(image: np.ndarray, rgb: tuple, tolerance: int = 12) -> bool:
    """Whether any pixel is within `tolerance` of `rgb` in every channel."""
    return bool((np.abs(image.astype(int) - np.array(rgb)).max(axis=2) <= tolerance).any())


def test_curves_figure_draws_train_and_val_for_loss_and_accuracy():
    """Two panels (loss, accuracy), each with a train and a val line holding one point per epoch."""
    figure = curves_figure(rows_for(3))
    loss_ax, acc_ax = figure.axes
    assert [loss_ax.get_title(), acc_ax.get_title()] == ["loss", "accuracy"]
    for axis in (loss_ax, acc_ax):
        lines = axis.get_lines()
        assert [line.get_label() for line in lines] == ["train", "val"]
        assert all(list(line.get_xdata()) == [1, 2, 3] for line in lines)
    assert list(acc_ax.get_lines()[1].get_ydata()) == pytest.approx([0.35, 0.45, 0.55])


def test_curves_png_is_a_real_picture_with_both_lines(tmp_path):
    """The saved curves are a PNG that is not blank and shows the train (blue) and val (orange) colours."""
    save_figure(curves_figure(rows_for(4)), tmp_path / "curves.png")
    image = pixels(tmp_path / "curves.png")
    assert image.shape == (350, 900, 3)
    assert image.std() > 10
    assert has_colour(image, TAB_BLUE) and has_colour(image, TAB_ORANGE)
    assert [p.name for p in tmp_path.iterdir()] == ["curves.png"]  # no temp file left behind


def test_confusion_figure_has_one_cell_and_one_count_per_class_pair():
    """A C x C image with the class names on both axes and each count written in its cell."""
    matrix = torch.tensor([[5, 1, 0], [0, 4, 2], [1, 0, 6]])
    names = ["cat", "dog", "eel"]
    axis = confusion_figure(matrix, names).axes[0]
    assert axis.images[0].get_array().shape == (3, 3)
    assert [t.get_text() for t in axis.get_xticklabels()] == names
    assert [t.get_text() for t in axis.get_yticklabels()] == names
    assert sorted(int(t.get_text()) for t in axis.texts) == sorted(matrix.flatten().tolist())


def test_confusion_png_shows_the_counts_as_shades(tmp_path):
    """The saved matrix is a real picture: non-trivial variance and a dark cell for the largest count."""
    path = save_figure(confusion_figure(torch.tensor([[9, 0], [3, 6]]), ["a", "b"]), tmp_path / "cm.png")
    image = pixels(path)
    assert image.std() > 10
    assert has_colour(image, (8, 48, 107), tolerance=20)  # the darkest shade of the "Blues" map


def test_write_json_replaces_the_file_whole(tmp_path):
    """write_json overwrites atomically: the new content, sorted keys, no temporary files left."""
    path = tmp_path / "config.json"
    write_json(path, {"b": 1, "a": [1, 2]})
    write_json(path, {"epochs": 3})
    assert json.loads(path.read_text()) == {"epochs": 3}
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


def test_metrics_csv_round_trips_with_the_fixed_columns(tmp_path):
    """write_metrics then read_metrics gives back the rows, epoch as int, in METRICS_COLUMNS order."""
    rows = rows_for(2)
    write_metrics(tmp_path / "metrics.csv", rows)
    assert (tmp_path / "metrics.csv").read_text().splitlines()[0] == ",".join(METRICS_COLUMNS)
    assert read_metrics(tmp_path / "metrics.csv") == rows
    assert read_metrics(tmp_path / "absent.csv") == []


def test_run_environment_records_what_a_rerun_needs():
    """The library versions and the command line go into config.json."""
    environment = run_environment()
    assert environment["torch"] == torch.__version__
    assert {"python", "torchvision", "command", "platform"} <= environment.keys()
    json.dumps(environment)  # plain values only
