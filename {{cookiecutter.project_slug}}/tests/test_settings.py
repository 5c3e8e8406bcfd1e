"""replay.py and train.py --config: a run's config.json replays the run; flags beside it win; bad files exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import train_one_thread

import train
from {{ cookiecutter.package_name }} import config, settings
from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.errors import ConfigError
from {{ cookiecutter.package_name }}.outputs import read_metrics

TIMINGS = ("epoch_time_s", "images_per_s")


@pytest.fixture(scope="module")
def original(tiny_data, tmp_path_factory) -> Path:
    """A two-epoch run with several settings away from their defaults."""
    out = tmp_path_factory.mktemp("original") / "run"
    code = train_one_thread(["--data", str(tiny_data), "--device", "cpu", "--epochs", "2", "--batch-size", "6",
                       "--image-size", "32", "--seed", "11", "--lr", "0.003", "--label-smoothing", "0.1",
                       "--no-pretrained", "--precision", "fp32", "--parallel", "none", "--out", str(out)])
    assert code == 0
    return out


def parsed(argv: list[str]):
    """The TrainConfig train.py would run for `argv`, without running it."""
    return settings.settle(argv).cfg


@pytest.mark.slow
def test_config_json_replays_the_run_exactly(original, tmp_path):
    """`--config config.json` alone gives the same metrics.csv, timing columns apart, and the same settings."""
    replay = tmp_path / "replay"
    assert train_one_thread(["--config", str(original / "config.json"), "--out", str(replay)]) == 0
    first, second = read_metrics(original / "metrics.csv"), read_metrics(replay / "metrics.csv")
    strip = [{key: value for key, value in row.items() if key not in TIMINGS} for row in first]
    assert [{key: value for key, value in row.items() if key not in TIMINGS} for row in second] == strip
    recorded, replayed = (json.loads((path / "config.json").read_text()) for path in (original, replay))
    differ = {key for key in recorded if recorded[key] != replayed[key]}
    assert "out" in differ and differ <= {"out", "environment"}  # where it was written, and the command line


def test_flags_beside_config_override_the_file_and_out_and_resume_are_not_taken(tmp_path):
    """Given flags win; unflagged fields (weight_decay) come from the file; out/resume and the record are read past."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"epochs": 7, "lr": 0.5, "weight_decay": 0.2, "seed": 3, "precision": "bf16",
                                "out": "somewhere/else", "resume": "somewhere/else", "resolved_device": "cuda:3",
                                "class_names": ["a", "b"], "environment": {"torch": "0"}}))
    cfg = parsed(["--config", str(path), "--epochs", "2", "--precision", "fp32"])
    assert (cfg.epochs, cfg.precision) == (2, "fp32")  # flags given
    assert (cfg.lr, cfg.weight_decay, cfg.seed) == (0.5, 0.2, 3)  # from the file
    defaults = TrainConfig()
    assert (cfg.out, cfg.resume) == (defaults.out, defaults.resume)  # the defaults, not the file's


def test_a_whole_number_in_a_config_file_is_a_float_settings_value(tmp_path):
    """JSON may write 2.0 as 2: a whole number for a float setting is that float; None for an optional one is None."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"weight_decay": 0, "clip_grad": None}))
    cfg = parsed(["--config", str(path)])
    assert (cfg.weight_decay, type(cfg.weight_decay), cfg.clip_grad) == (0.0, float, None)


@pytest.mark.parametrize("content, message", [
    ({"epochs": 2, "learning_rate": 0.1}, "unknown key(s) learning_rate;"),
    ({"epochs": "three"}, 'bad value for epochs: "three" (expected int)'),
    ({"epochs": 2.5}, "bad value for epochs: 2.5 (expected int)"),
    ({"pretrained": "yes"}, 'bad value for pretrained: "yes" (expected bool)'),
    ({"epochs": True}, "bad value for epochs: true (expected int)"),
    ({"precision": "fp8"}, 'bad value for precision: "fp8" (expected one of fp32, fp16, bf16)'),
    # The expected choices are this bake's (csv, none and its tracker answer's), so any answer keeps this test green.
    ({"logger": "no-such-logger"},
     f'bad value for logger: "no-such-logger" (expected one of {", ".join(settings.choices()["logger"])})'),
    ([1, 2], "expected a JSON object of settings, got list"),
], ids=["unknown-key", "string-for-int", "float-for-int", "string-for-bool", "bool-for-int", "bad-choice", "bad-logger",
        "not-object"])
def test_bad_config_file_is_one_line_and_exit_2(content, message, tmp_path, capsys):
    """An unknown key or a value of the wrong type or choice: one error line naming it, exit 2, nothing written."""
    path, out = tmp_path / "config.json", tmp_path / "run"
    path.write_text(json.dumps(content))
    code = train.main(["--config", str(path), "--device", "cpu", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: --config {path}: ")
    assert message in err[0]
    assert not out.exists()


def test_unreadable_config_file_is_one_line_and_exit_2(tmp_path, capsys):
    """A missing file and a file that is not JSON: one line each, exit 2."""
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    for path, reason in ((tmp_path / "absent.json", "no such file"), (broken, "not a readable JSON file")):
        code = train.main(["--config", str(path), "--out", str(tmp_path / "run")])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and reason in err[0]


def test_threads_are_settled_as_typed_and_left_to_start_up_when_not():
    """--threads N is settled into the config and 0 is refused; without it the count is measured at start-up."""
    cores = settings.usable_cores()
    assert settings.settle(["--threads", str(cores)]).cfg.threads == cores
    assert settings.settle([]).cfg.threads is None
    with pytest.raises(ConfigError, match="--threads"):
        settings.settle(["--threads", "0"])


@pytest.mark.parametrize("flag, value", [("--epochs", "0"), ("--batch-size", "0"), ("--workers", "-1"),
                                         ("--image-size", "15"), ("--save-every-minutes", "-1.0"),
                                         ("--max-bad-fraction", "1.0"), ("--weight-decay", "-0.1"),
                                         ("--clip-grad", "inf")])
def test_a_number_out_of_its_range_is_refused_naming_the_flag_and_the_value(flag, value):
    """Each numeric setting has a range (finite, for every float); a value outside it is a ConfigError saying so."""
    with pytest.raises(ConfigError, match=f"^{flag} must be ") as refused:
        settings.settle([flag, value])
    assert str(refused.value).endswith(f", got {value}")


def test_default_threads_are_omp_num_threads_else_this_ranks_share_of_the_idle_cores(monkeypatch):
    """OMP_NUM_THREADS (at most the usable cores), else the cores idle now shared by the ranks on this node, >= 1."""
    cores = settings.usable_cores()
    monkeypatch.setenv("OMP_NUM_THREADS", str(cores + 5))
    assert config.default_threads() == cores
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(config, "idle_fraction", lambda: 0.0)
    assert config.default_threads() == 1  # every core busy: a second thread would wait for one
    monkeypatch.setattr(config, "idle_fraction", lambda: None)
    assert config.default_threads() == 1  # no measure: the count that is never slow
    monkeypatch.setattr(config, "idle_fraction", lambda: 1.0)
    assert config.default_threads() == cores
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert config.default_threads() == max(1, cores // 2)


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="the idle share is read from Linux's /proc/stat")
def test_the_idle_share_is_measured_over_a_moment_as_a_fraction():
    """The share of CPU time idle while this process sleeps: a number between 0 and 1."""
    assert 0.0 <= config.idle_fraction(0.05) <= 1.0
