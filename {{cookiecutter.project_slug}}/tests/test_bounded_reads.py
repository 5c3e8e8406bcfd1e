"""Files read from folders that came from elsewhere: a tar, a git clone or a share keeps named pipes, links to
devices and links out of the folder. Each file is read only as a regular file inside its folder, up to a bound;
anything else is one line and exit 2, never a hang, never memory exhausted. A damaged model.safetensors and
--device meta are one line and exit 2 as well.

The hostile entries are real: os.mkfifo, a real link to /dev/zero. Where the code before the fix hung or read
without end, the command runs in a process of its own, its address space capped so a regression fails fast.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HANG_S
from run_helpers import PROJECT

import evaluate
import export
import predict
import train

pytest.importorskip("safetensors", reason="needs the export extra: pip install -e '.[export]'")
posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes and /dev/zero are POSIX")
BASE = ["--device", "cpu", "--epochs", "1", "--batch-size", "4", "--image-size", "32", "--workers", "0",
        "--no-pretrained", "--progress", "none"]
ADDRESS_SPACE = 8 * 2**30  # a CLI needs about 4 GiB of address space; reading /dev/zero would take all there is


@pytest.fixture(scope="module")
def shared_folder(checkpoint, tmp_path_factory) -> Path:
    """A model folder as export.py writes it (model.safetensors, config.json, README.md)."""
    folder = tmp_path_factory.mktemp("shared") / "my-classifier"
    assert export.main([str(checkpoint), "--format", "safetensors", "--out", str(folder)]) == 0
    return folder


def replaced(path: Path, kind: str) -> Path:
    """`path` swapped for a named pipe, a link to /dev/zero, or a link to a good copy of itself outside its folder."""
    if kind == "outside":
        outside = path.parent.parent / f"elsewhere-{path.name}"
        shutil.copy(path, outside)
        path.unlink()
        path.symlink_to(outside)
        return path
    path.unlink(missing_ok=True)
    os.mkfifo(path) if kind == "fifo" else path.symlink_to("/dev/zero")
    return path


def run_capped(args: list[str]) -> subprocess.CompletedProcess:
    """A CLI in a process of its own, its address space capped (reading /dev/zero then fails fast)."""
    import resource

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    return subprocess.run([sys.executable, *args], cwd=PROJECT, capture_output=True, text=True, timeout=HANG_S,
                          preexec_fn=cap)


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@posix_only
@pytest.mark.slow  # a process of its own: before the fix, the pipe hung and /dev/zero exhausted memory
@pytest.mark.parametrize("member", ["config.json", "model.safetensors"])
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_model_folder_holding_a_pipe_or_a_device_is_one_line_not_a_hang(shared_folder, image, tmp_path, member,
                                                                          kind):
    """predict.py FOLDER: the entry named, exit 2; not a hang, not memory exhausted, not "last.pt does not exist"."""
    folder = shutil.copytree(shared_folder, tmp_path / "downloaded")
    replaced(folder / member, kind)
    result = run_capped(["predict.py", str(folder), str(image), "--device", "cpu"])
    assert result.returncode == 2, result.stderr[-2000:]
    line = one_line(result.stderr)
    assert member in line and ("not a regular file" in line or "outside" in line) and "last.pt" not in line


@posix_only
@pytest.mark.parametrize("member", ["config.json", "model.safetensors"])
def test_a_model_folder_file_linking_out_of_the_folder_is_refused(shared_folder, image, tmp_path, capsys, member):
    """A link to a file outside the folder (a good copy, even) is not read: the folder is what was shared."""
    folder = shutil.copytree(shared_folder, tmp_path / "downloaded")
    replaced(folder / member, "outside")
    assert predict.main([str(folder), str(image), "--device", "cpu"]) == 2
    assert "outside" in one_line(capsys.readouterr().err)


def lying(data: bytes) -> bytes:
    """model.safetensors whose header places its first tensor far beyond the file's end."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    first = next(key for key in header if key != "__metadata__")
    header[first]["data_offsets"] = [0, 10**12]
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + data[8 + size:]


@pytest.mark.parametrize("how", ["lying header", "truncated", "a link to the folder's README"])
def test_a_damaged_model_safetensors_is_one_line_and_exit_2(shared_folder, image, tmp_path, capsys, how):
    """safetensors' own error (SafetensorError, exit 1 before) becomes one line naming the file, exit 2."""
    folder = shutil.copytree(shared_folder, tmp_path / "downloaded")
    weights = folder / "model.safetensors"
    if how == "a link to the folder's README":
        weights.unlink()
        weights.symlink_to("README.md")
    else:
        data = weights.read_bytes()
        weights.write_bytes(lying(data) if how == "lying header" else data[:len(data) // 2])
    assert predict.main([str(folder), str(image), "--device", "cpu"]) == 2
    assert "model.safetensors" in one_line(capsys.readouterr().err)


@posix_only
@pytest.mark.slow  # a process of its own: before the fix, export waited on the pipe forever
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_run_folders_config_json_that_is_a_pipe_or_a_device_stops_export(checkpoint, tmp_path, kind):
    """export.py RUN/best.pt --format safetensors reads the run's config.json for the card: refused, one line."""
    run = tmp_path / "copied-run"
    run.mkdir()
    shutil.copy(checkpoint, run / "best.pt")
    replaced(run / "config.json", kind)
    result = run_capped(["export.py", str(run / "best.pt"), "--format", "safetensors", "--out", str(tmp_path / "m")])
    assert result.returncode == 2, result.stderr[-2000:]
    assert "config.json" in one_line(result.stderr) and not (tmp_path / "m").exists()


@posix_only
@pytest.mark.slow  # a process of its own: before the fix, --config waited on the pipe forever
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_config_file_that_is_a_pipe_or_a_device_is_refused(tiny_data, tmp_path, kind):
    """train.py --config FILE: the size check read stat()'s 0 bytes for both, then read without end."""
    config = replaced(tmp_path / "config.json", kind)
    result = run_capped(["train.py", "--config", str(config), "--data", str(tiny_data), "--out",
                         str(tmp_path / "run"), *BASE])
    assert result.returncode == 2, result.stderr[-2000:]
    assert "--config" in one_line(result.stderr) and not (tmp_path / "run").exists()


@posix_only
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "outside"])
def test_a_labels_file_that_is_a_pipe_a_device_or_a_link_out_is_refused(tiny_data, tmp_path, capsys, kind):
    """A data folder's labels.csv is read as the folder's own regular file, or the run stops before it starts."""
    data = tmp_path / "data"
    (data / "images").mkdir(parents=True)
    rows = ["path,label,split"]
    for split in ("train", "val"):
        for index, png in enumerate(sorted((tiny_data / split).rglob("*.png"))):
            shutil.copy(png, data / "images" / f"{split}-{index}.png")
            rows.append(f"images/{split}-{index}.png,{png.parent.name},{split}")
    (data / "labels.csv").write_text("\n".join(rows) + "\n")
    replaced(data / "labels.csv", kind)
    assert train.main(["--data", str(data), "--out", str(tmp_path / "run"), *BASE]) == 2
    assert "labels.csv" in one_line(capsys.readouterr().err) and not (tmp_path / "run").exists()


@posix_only
@pytest.mark.slow  # trains a run, then resumes it in a process of its own (its address space capped)
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_resuming_a_run_folder_whose_metrics_csv_is_a_pipe_or_a_device_is_one_line(tiny_data, tmp_path, kind):
    """--resume reads the run's metrics.csv to continue it: a pipe or /dev/zero there is refused, last.pt kept.
    Before, either passed for "no metrics.csv yet", and the resumed run's file held its own epochs alone."""
    out = tmp_path / "run"
    assert train.main(["--data", str(tiny_data), "--out", str(out), *BASE]) == 0
    kept = (out / "last.pt").read_bytes()
    replaced(out / "metrics.csv", kind)
    result = run_capped(["train.py", "--resume", str(out), "--data", str(tiny_data), *BASE[:2], "--epochs", "2",
                         *BASE[4:]])
    assert result.returncode == 2, result.stderr[-2000:]
    assert "metrics.csv" in one_line(result.stderr) and (out / "last.pt").read_bytes() == kept


def test_device_meta_is_refused_by_every_command_that_computes(checkpoint, tiny_data, image, tmp_path, capsys):
    """meta holds shapes, not values: predict.py and evaluate.py refuse it as train.py does (exit 1 before)."""
    assert predict.main([str(checkpoint), str(image), "--device", "meta"]) == 2
    assert "--device meta" in one_line(capsys.readouterr().err)
    assert evaluate.main([str(checkpoint), "--data", str(tiny_data), "--device", "meta",
                          "--out", str(tmp_path / "c.png"), "--mistakes", str(tmp_path / "m.png")]) == 2
    assert "--device meta" in one_line(capsys.readouterr().err) and not (tmp_path / "c.png").exists()
