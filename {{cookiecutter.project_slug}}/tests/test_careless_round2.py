"""Careless and hostile use, round 2: a full disk, a run folder deleted under a run, flags at their limits,
a read-only checkpoint folder, file names that are not UTF-8, fp16 on a CPU.

The full-disk and read-only tests use a real small tmpfs, which only root may mount; elsewhere they
skip (the read-only test falls back to chmod, which binds everyone but root).
"""

import contextlib
import errno
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import HANG_S
from run_helpers import PROJECT, start_train, wait_for

import evaluate
import export
import predict
import train
from {{ cookiecutter.package_name }} import settings, startup
from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.data.demo import DEMO_CLASSES
from {{ cookiecutter.package_name }}.devkit import checkpoint as ckpt
from {{ cookiecutter.package_name }}.devkit import precision
from {{ cookiecutter.package_name }}.devkit.atomic import DiskFullError
from {{ cookiecutter.package_name }}.model import build_model
from {{ cookiecutter.package_name }}.settings import usable_cores

BASE = ["--device", "cpu", "--batch-size", "4", "--image-size", "32", "--no-pretrained", "--precision", "fp32",
        "--parallel", "none", "--workers", "0"]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


@contextlib.contextmanager
def tmpfs(folder: Path, size: int, read_only: bool = False, fill_from: Path | None = None):
    """A real tmpfs of `size` bytes mounted on `folder` (root only), optionally filled then remounted read-only."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip() or 'mount failed'})")
    try:
        if fill_from is not None:
            shutil.copytree(fill_from, folder, dirs_exist_ok=True)
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def model_bytes() -> int:
    """The default model's weights for the demo classes, in bytes (an epoch-0 checkpoint's size, roughly)."""
    model = build_model(TrainConfig().backbone, len(DEMO_CLASSES), pretrained=False,
                        device=torch.device("meta"))
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


@pytest.mark.skipif(not IS_ROOT, reason="needs root to mount a small tmpfs (a real full disk)")
def test_a_checkpoint_save_on_a_full_disk_names_the_file(tmp_path):
    """torch.save's own '[enforce fail at inline_container.cc] unexpected pos' becomes DiskFullError naming the file."""
    with tmpfs(tmp_path / "disk", 256 * 1024) as disk:
        with pytest.raises(DiskFullError, match=r"^no space left on device: cannot write .*last\.pt$"):
            ckpt.save_checkpoint(disk / "last.pt", {"weights": torch.zeros(1 << 20)})  # 4 MiB
        assert list(disk.iterdir()) == []  # no temp file left


@pytest.mark.skipif(not IS_ROOT, reason="needs root to mount a small tmpfs (a real full disk)")
@pytest.mark.parametrize("when", ["epoch end", "mid-epoch"])
def test_a_full_disk_stops_training_with_the_documented_line_and_no_metrics_ahead(when, tiny_data, tmp_path, capsys):
    """Room for config.json and the epoch-0 last.pt, not for a checkpoint with the optimizer's moments:
    exit 1, 'no space left on device: cannot write PATH', and no metrics.csv row that no checkpoint holds."""
    extra = ["--save-every-minutes", "0.0001"] if when == "mid-epoch" else []
    with tmpfs(tmp_path / "disk", int(model_bytes() * 1.6)) as disk:
        out = disk / "run"
        assert train.main(["--data", str(tiny_data), "--out", str(out), "--epochs", "1", *BASE, *extra]) == 1
        line = one_error_line(capsys)
        assert line.startswith(f"error: no space left on device: cannot write {out}") and line.endswith(".pt")
        assert not (out / "metrics.csv").exists() and not (out / "curves.png").exists()
        assert torch.load(out / "last.pt", map_location="cpu", weights_only=True)["epoch"] == 0  # still whole


@pytest.mark.slow
def test_a_run_whose_folder_is_deleted_stops_instead_of_recreating_it(tiny_data, tmp_path):
    """The folder removed while the run is paused mid-epoch; SIGTERM's save stops with one line, exit 1,
    and the folder is not made again (no unlocked folder a second run could start in)."""
    out, log = tmp_path / "run", tmp_path / "train.log"
    process = start_train(tiny_data, out, 0, resume=False, pause="step:1:1", log=log)
    try:
        wait_for(process, log, "paused at step:1:1")
        shutil.rmtree(out)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=HANG_S) == 1
    finally:
        process.kill()
    errors = [line for line in log.read_text().splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "was deleted or replaced" in errors[0] and str(out) in errors[0], errors
    assert not out.exists()


def test_threads_beyond_the_usable_cores_are_exit_2(tiny_data, tmp_path, capsys):
    out = tmp_path / "run"
    assert train.main(["--data", str(tiny_data), "--out", str(out), *BASE, "--threads", str(usable_cores() + 1)]) == 2
    assert "--threads" in one_error_line(capsys) and not out.exists()


@pytest.mark.parametrize("seed", [str(2**64), str(-2**63 - 1)])
def test_a_seed_beyond_64_bits_is_exit_2(seed, tiny_data, tmp_path, capsys):
    out = tmp_path / "run"
    assert train.main(["--data", str(tiny_data), "--out", str(out), *BASE, "--seed", seed]) == 2
    assert "--seed" in one_error_line(capsys) and not out.exists()


def test_data_naming_a_file_is_exit_2(tiny_data, tmp_path, capsys):
    """An image (not a labels .csv) as --data: one line, exit 2 (was NotADirectoryError, exit 1)."""
    image, out = next(tiny_data.rglob("*.png")), tmp_path / "run"
    assert train.main(["--data", str(image), "--out", str(out), *BASE]) == 2
    assert "not a folder" in one_error_line(capsys) and not out.exists()


@pytest.mark.parametrize("body", ["[" * 100_000 + "]" * 100_000, json.dumps({"epochs": 1, "lr": [[[[[[[[[1]]]]]]]]]})],
                         ids=["100000 levels", "10 levels"])
def test_a_deeply_nested_config_is_exit_2(body, tiny_data, tmp_path, capsys):
    config, out = tmp_path / "config.json", tmp_path / "run"
    config.write_text(body)
    assert train.main(["--data", str(tiny_data), "--out", str(out), *BASE, "--config", str(config)]) == 2
    assert re.search(r"nested (more than|too deeply)", one_error_line(capsys)) and not out.exists()


@pytest.fixture(scope="module")
def trained(tiny_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("round2") / "run"
    assert train.main(["--data", str(tiny_data), "--out", str(out), "--epochs", "1", *BASE]) == 0
    return out


def test_evaluate_beside_a_read_only_checkpoint_measures_and_notes_the_plots(trained, tiny_data, tmp_path, capsys):
    """The figures are printed, the plots cannot be written: a note each on stderr, exit 0."""
    folder = tmp_path / "ro"
    with contextlib.ExitStack() as stack:
        if IS_ROOT:  # root writes through chmod: a read-only mount binds it
            # room for the run's files whatever the backbone (a copy does not keep best.pt a link of last.pt)
            size = sum(f.stat().st_size for f in trained.rglob("*") if f.is_file()) + (64 << 20)
            stack.enter_context(tmpfs(folder, size, read_only=True, fill_from=trained))
        else:
            shutil.copytree(trained, folder)
            folder.chmod(0o555)
            stack.callback(folder.chmod, 0o755)
        assert evaluate.main([str(folder / "last.pt"), "--data", str(tiny_data), "--device", "cpu"]) == 0
        captured = capsys.readouterr()
        assert "val: accuracy" in captured.out
        notes = [line for line in captured.err.splitlines() if "not written" in line]
        assert len(notes) == 2 and all(str(folder) in note for note in notes), captured.err
        assert not list(folder.glob("confusion_*.png")) and not list(folder.glob("mistakes_*.png"))


def test_predict_prints_a_file_name_that_is_not_utf8_on_a_strict_stdout(trained, tiny_data, tmp_path, monkeypatch):
    """stdout as PYTHONIOENCODING=utf-8:strict makes it: the name is printed escaped, valid UTF-8, exit 0."""
    folder = tmp_path / "photos"
    folder.mkdir()
    try:
        name = folder / os.fsdecode(b"caf\xe9.png")
        shutil.copyfile(next(tiny_data.rglob("*.png")), name)
    except (OSError, UnicodeError):
        pytest.skip("this file system refuses names that are not UTF-8")
    buffer = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(buffer, encoding="utf-8", errors="strict"))
    assert predict.main([str(trained / "last.pt"), str(folder), "--device", "cpu"]) == 0
    sys.stdout.flush()
    rows = buffer.getvalue().decode("utf-8").splitlines()  # valid UTF-8 throughout
    assert len(rows) == 2 and "caf\\" in rows[1]


@pytest.mark.slow
def test_predict_in_a_process_with_a_strict_stdout(trained, tiny_data, tmp_path):
    """The same as users run it: a real process under PYTHONIOENCODING=utf-8:strict."""
    folder = tmp_path / "photos"
    folder.mkdir()
    try:
        shutil.copyfile(next(tiny_data.rglob("*.png")), folder / os.fsdecode(b"caf\xe9.png"))
    except (OSError, UnicodeError):
        pytest.skip("this file system refuses names that are not UTF-8")
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "predict.py", str(trained / "last.pt"), str(folder), "--device", "cpu"],
                          cwd=PROJECT, env=env, capture_output=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert "caf" in done.stdout.decode("utf-8")


def test_an_fp16_default_on_a_cpu_falls_back_to_fp32_with_a_note():
    cpu = torch.device("cpu")
    if precision.cpu_fp16_native():
        pytest.skip("this CPU computes fp16 natively (AVX512_FP16 / AMX-FP16)")
    name, note = precision.resolve_precision(None, "fp16", cpu)
    assert name == "fp32" and "fp16 is emulated" in note
    name, note = precision.resolve_precision("fp16", "fp32", cpu)  # asked for: honoured, with the cost
    assert name == "fp16" and "slower than fp32" in note
    start = startup.settle(settings.parse(["--device", "cpu", "--precision", "fp16", "--no-pretrained"], []), [])
    assert start.cfg.precision == "fp16" and note in start.notes  # settled once, for train.py to print


# Red team, round 2: careless inputs beyond the list that did harm before.

def test_an_out_inside_the_data_is_exit_2_and_makes_no_class(tiny_data, tmp_path, capsys):
    """--out inside a folder of class folders would become a class (its PNGs the images) on the next run."""
    data = tmp_path / "data"
    shutil.copytree(tiny_data / "train", data)
    before = sorted(p.name for p in data.iterdir())
    assert train.main(["--data", str(data), "--out", str(data / "myrun"), *BASE, "--val-split", "0.3"]) == 2
    assert "inside --data" in one_error_line(capsys)
    assert sorted(p.name for p in data.iterdir()) == before


@pytest.mark.parametrize("flag", ["--out", "--data", "--resume", "--init-from"])
def test_an_empty_path_is_exit_2_not_the_current_folder(flag, tiny_data, tmp_path, capsys, monkeypatch):
    """--out '' was the current folder: last.pt, config.json and .lock written into the project."""
    monkeypatch.chdir(tmp_path)
    flags = {"--data": str(tiny_data), "--out": str(tmp_path / "run"), flag: ""}
    assert train.main([arg for pair in flags.items() for arg in pair] + BASE) == 2
    assert f"{flag} is empty" in one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_a_huge_mistakes_count_is_exit_2(trained, tiny_data, tmp_path, capsys):
    """Every mistake is an image held on the device and a panel of one figure: bounded."""
    assert evaluate.main([str(trained / "last.pt"), "--data", str(tiny_data), "--device", "cpu",
                          "--mistakes-count", "1000000000", "--out", str(tmp_path / "c.png")]) == 2
    assert "--mistakes-count" in one_error_line(capsys) and not (tmp_path / "c.png").exists()


def no_space(fd: int) -> None:
    """os.fsync on a disk that filled up (a full quota on a shared machine, without root's tmpfs)."""
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("disk", ["a full tmpfs", "ENOSPC from fsync"])
@pytest.mark.parametrize("fmt", ["pt2", "safetensors"])
def test_export_onto_a_full_disk_is_exit_1_whatever_the_format(fmt, disk, trained, tmp_path, monkeypatch, capsys):
    """A full disk is no bad input: a file (.pt2) and a model folder alike stop with exit 1 and
    'no space left on device: cannot write OUT', leaving nothing behind (the folder was exit 2 as 'cannot write')."""
    if fmt == "safetensors":
        pytest.importorskip("safetensors", reason="needs the export extra: pip install -e '.[export]'")
    with contextlib.ExitStack() as stack:
        if disk == "a full tmpfs":
            if not IS_ROOT:
                pytest.skip("needs root to mount a small tmpfs (a real full disk)")
            place = stack.enter_context(tmpfs(tmp_path / "disk", 256 * 1024))  # less than the weights
        else:
            place = tmp_path / "disk"
            place.mkdir()
            monkeypatch.setattr(os, "fsync", no_space)  # every file is fsynced before it is renamed into place
        out = place / ("model.pt2" if fmt == "pt2" else "my-classifier")
        assert export.main([str(trained / "last.pt"), "--format", fmt, "--out", str(out)]) == 1
        assert one_error_line(capsys) == f"error: no space left on device: cannot write {out}"
        assert list(place.iterdir()) == []


@pytest.mark.parametrize("where", ["under a file", "a folder", "/proc"])
def test_export_to_a_place_it_cannot_write_is_exit_2(where, trained, tmp_path, capsys):
    """Was a raw FileExistsError / FileNotFoundError, exit 1 (after the whole export, for /proc)."""
    (tmp_path / "afile").write_text("x")
    out = {"under a file": tmp_path / "afile" / "model.pt2", "a folder": tmp_path,
           "/proc": Path("/proc") / "model.pt2"}[where]
    if where == "/proc" and not Path("/proc/self").exists():
        pytest.skip("no /proc here")
    assert export.main([str(trained / "last.pt"), "--format", "pt2", "--out", str(out)]) == 2
    assert "--out" in one_error_line(capsys)
