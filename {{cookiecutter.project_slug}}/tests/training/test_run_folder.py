"""Run folders: a fresh run never destroys another run's results; `--resume auto` continues or starts fresh."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import train
from {{ cookiecutter.package_name }}.training import run_folder

ARGS = ["--device", "cpu", "--epochs", "1", "--batch-size", "8", "--image-size", "32", "--no-pretrained",
        "--precision", "fp32", "--parallel", "none"]


def test_an_out_holding_a_checkpoint_is_refused_with_one_line_naming_the_ways_on(tiny_data, tmp_path, capsys):
    """Exit 2, one stderr line naming --resume, --resume auto and --overwrite; the old files are untouched."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "best.pt").write_bytes(b"an earlier run's weights")
    code = train.main(["--data", str(tiny_data), "--out", str(out), *ARGS])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert all(flag in err[0] for flag in ("--resume", "--resume auto", "--overwrite"))
    assert sorted(path.name for path in out.iterdir()) == ["best.pt"]
    assert (out / "best.pt").read_bytes() == b"an earlier run's weights"


def test_resume_auto_without_out_is_refused(tiny_data, tmp_path, capsys, monkeypatch):
    """A restarted job must name the folder it continues in: exit 2, one line, no runs/ folder."""
    monkeypatch.chdir(tmp_path)
    code = train.main(["--data", str(tiny_data), "--resume", "auto", *ARGS])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--resume auto needs --out" in err[0]
    assert not (tmp_path / "runs").exists()


def test_plans_for_each_combination_of_out_resume_and_overwrite(tmp_path, monkeypatch):
    """auto continues from last.pt when there is one; --resume DIR alone continues in DIR; no --out: a new folder."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    assert run_folder.plan(str(out), "auto", False) == run_folder.Plan(out, None, f"resume auto: no {out / 'last.pt'} "
                                                                         "yet, starting fresh")
    out.mkdir()
    (out / "last.pt").write_bytes(b"x")
    assert run_folder.plan(str(out), "auto", False).resume == str(out / "last.pt")
    assert run_folder.plan(None, str(out), False).out == out
    assert run_folder.plan(None, str(out / "last.pt"), False).out == out
    assert run_folder.plan(str(out), None, True) == run_folder.Plan(out, None)
    with pytest.raises(run_folder.RunDirError):
        run_folder.plan(str(out), None, False)
    with pytest.raises(run_folder.ConfigError, match="cannot be combined"):
        run_folder.plan(str(out), "auto", True)
    fresh = run_folder.plan(None, None, False)
    assert fresh.out.parent == Path("runs") and fresh.link_latest and fresh.resume is None


def test_two_runs_started_in_the_same_second_get_two_folders(tmp_path):
    """The timestamp gets a suffix rather than reusing the folder a finished run made in the same second."""
    (tmp_path / "20250101-000000").mkdir()
    with run_folder.claim(run_folder.Plan(tmp_path / "20250101-000000", None, link_latest=True)) as folder:
        assert folder == tmp_path / "20250101-000000-2"


def test_latest_is_repointed_atomically_and_a_real_folder_is_left_alone(tmp_path):
    """runs/latest follows the newest run; a runs/latest folder from an older version is not replaced."""
    old, new = tmp_path / "20260101-000000", tmp_path / "20260101-000001"
    old.mkdir()
    new.mkdir()
    assert run_folder.link_latest(old) is None and run_folder.link_latest(new) is None
    assert os.readlink(tmp_path / "latest") == new.name and not list(tmp_path.glob(".*.tmp"))
    real = tmp_path / "other"
    (real / "latest").mkdir(parents=True)
    (real / "run").mkdir()
    assert "real folder" in run_folder.link_latest(real / "run")
    assert (real / "latest").is_dir() and not (real / "latest").is_symlink()


@pytest.mark.slow
def test_runs_without_out_get_a_folder_each_and_latest_points_at_the_newest(tiny_data, tmp_path, monkeypatch):
    """An earlier run's folder is untouched; runs/latest/best.pt is the new run's, so the README commands work."""
    monkeypatch.chdir(tmp_path)
    earlier = tmp_path / "runs" / "20250101-000000"
    earlier.mkdir(parents=True)
    (earlier / "best.pt").write_bytes(b"an earlier run's weights")
    (tmp_path / "runs" / "latest").symlink_to(earlier.name)
    assert train.main(["--data", str(tiny_data), *ARGS]) == 0
    folders = sorted(path.name for path in (tmp_path / "runs").iterdir() if not path.is_symlink())
    assert len(folders) == 2 and (earlier / "best.pt").read_bytes() == b"an earlier run's weights"
    latest = (tmp_path / "runs" / "latest").resolve()
    assert latest.name == folders[-1] and latest != earlier.resolve()
    state = torch.load(tmp_path / "runs" / "latest" / "best.pt", map_location="cpu", weights_only=True)
    assert state["epoch"] == 1 and state["config"]["out"] == str(Path("runs") / latest.name)


@pytest.mark.slow
def test_overwrite_replaces_the_old_run_and_resume_auto_continues_a_finished_one(tiny_data, tmp_path, capsys):
    """--overwrite starts afresh over old checkpoints; the same command with --resume auto then has nothing to do."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "best.pt").write_bytes(b"an earlier run's weights")
    assert train.main(["--data", str(tiny_data), "--out", str(out), "--overwrite", *ARGS]) == 0
    trained = (out / "last.pt").read_bytes()
    assert torch.load(out / "best.pt", map_location="cpu", weights_only=True)["epoch"] == 1
    capsys.readouterr()
    assert train.main(["--data", str(tiny_data), "--out", str(out), "--resume", "auto", *ARGS]) == 0
    assert "resume auto: continuing from" in capsys.readouterr().out
    assert (out / "last.pt").read_bytes() == trained  # already finished: nothing trained, nothing rewritten
