"""The generated docs/runs.md's "See, replay and ship a run" commands (the README links the page), run as
written in a freshly baked project.

The commands run in one subprocess of this interpreter (which has torch, onnx and onnxruntime), each
script as __main__ with the line's arguments, in a copy of the default bake, on the CPU: one torch import
instead of eight. The demo data is written small first (the project keeps an existing data/demo), and
train.py lines get `--epochs 1 --batch-size 8 --image-size 32` appended (later flags win). Installing is
the line not run (and starting a TensorBoard server, in a bake with that tracker).
"""

from __future__ import annotations

import csv
import json
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from helpers import DEFAULT_PACKAGE, describe, run

pytestmark = pytest.mark.slow

PAGE = "docs/runs.md"  # the README's "Where to read more" sends a reader there
SECTION = "## See, replay and ship a run"
NOT_RUN = ("pip install", "tensorboard --logdir")
TINY_TRAINING = ["--epochs", "1", "--batch-size", "8", "--image-size", "32"]
TIMINGS = {"epoch_time_s", "images_per_s"}


def section_commands(page: str) -> list[str]:
    """The command lines of the section's bash block, comments stripped, the not-run lines left out."""
    block = re.search(re.escape(SECTION) + r".*?```bash\n(.*?)```", page, re.S)
    assert block, f"the generated {PAGE} has no bash block under {SECTION!r}"
    lines = [line.split("  #")[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line and not any(skip in line for skip in NOT_RUN)]


# Runs each `python SCRIPT ARGS...` as __main__ in one interpreter, so torch is imported once, not
# once per command; prints one JSON line per command: the line, its exit code, stdout and seconds.
RUNNER = r"""
import contextlib, io, json, os, runpy, sys, time
sys.path.insert(0, os.getcwd())
for line, argv in json.loads(sys.argv[1]):
    sys.argv, out, code, started = argv, io.StringIO(), 0, time.monotonic()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    print("COMMAND " + json.dumps([line, code, out.getvalue(), time.monotonic() - started]), flush=True)
    if code:
        break
"""


@pytest.fixture(scope="module")
def ran(bakery, tmp_path_factory) -> tuple[Path, dict[str, tuple[int, str]]]:
    """A copy of the default bake after running the section's commands in order: line -> (exit code, stdout)."""
    project = tmp_path_factory.mktemp("commands") / "project"
    shutil.copytree(bakery.project(), project)
    commands = []
    for line in section_commands((project / PAGE).read_text(encoding="utf-8")):
        args = shlex.split(line)
        assert args[0] == "python" and args[1].endswith(".py"), line
        commands.append([line, [*args[1:], *(TINY_TRAINING if args[1] == "train.py" else [])]])
    small = (f"from pathlib import Path; from {DEFAULT_PACKAGE}.data import write_demo_dataset; "
             "write_demo_dataset(Path('data/demo'), train_per_class=6, val_per_class=3)\n")
    proc = run([sys.executable, "-c", small + RUNNER, json.dumps(commands)], cwd=project, timeout=600,
               **{f"{DEFAULT_PACKAGE.upper()}_DEVICE": "cpu"})
    results = [json.loads(row[len("COMMAND "):]) for row in proc.stdout.splitlines() if row.startswith("COMMAND ")]
    for line, code, _, seconds in results:
        print(f"{seconds:6.1f} s  exit {code}  {line}")
    assert proc.returncode == 0 and len(results) == len(commands), describe(proc)
    failed = [(line, out) for line, code, out, _ in results if code != 0]
    assert not failed, f"{failed[0][0]} failed:\n{describe(proc)}"
    return project, {line: (code, out) for line, code, out, _ in results}


def metrics(path: Path) -> list[dict]:
    """metrics.csv rows without the timing columns."""
    with open(path, newline="") as handle:
        return [{k: v for k, v in row.items() if k not in TIMINGS} for row in csv.DictReader(handle)]


def test_section_lists_training_replay_export_predict_and_evaluate(bakery):
    """The section shows training, --config, export to both formats and a model folder, predict on each, evaluate
    (the default bake has no tracker: its lines come with the tracker answer)."""
    commands = " ; ".join(section_commands((bakery.project() / PAGE).read_text(encoding="utf-8")))
    for needle in ("train.py --epochs 3 --out runs/exp1", "--config", "--format onnx", "--format pt2",
                   "--format safetensors", "predict.py model.onnx", "predict.py model.pt2", "evaluate.py"):
        assert needle in commands, needle


def test_readme_commands_log_replay_export_predict_and_evaluate(ran):
    """A run; an exact replay and one with --lr changed; both exports checked, the model folder read back; same labels;
    a mistakes grid."""
    project, outputs = ran
    runs = project / "runs"
    assert (runs / "exp1" / "last.pt").is_file() and not list((runs / "exp1").glob("events.out.tfevents.*"))
    assert metrics(runs / "exp1-again" / "metrics.csv") == metrics(runs / "exp1" / "metrics.csv")
    assert json.loads((runs / "exp1-lr" / "config.json").read_text())["lr"] == 1e-3
    exports = [out for line, (_, out) in outputs.items() if "export.py" in line and "safetensors" not in line]
    assert len(exports) == 2 and all("parity on" in out and "wrote model." in out for out in exports)
    assert (project / "model.onnx").stat().st_size > 0 and (project / "model.pt2").stat().st_size > 0
    folder = [out for line, (_, out) in outputs.items() if "--format safetensors" in line]
    assert len(folder) == 1 and "read back: max |logit difference| 0)" in folder[0]
    assert sorted(path.name for path in (project / "my-classifier").iterdir()) == [
        "README.md", "config.json", "model.safetensors"]
    labels = [[row.split()[1] for row in out.splitlines()[1:]]
              for line, (_, out) in outputs.items() if line.startswith("python predict.py")]
    assert len(labels) == 2 and len(labels[0]) == 3 and labels[0] == labels[1]  # onnx and pt2 agree
    assert (runs / "exp1" / "mistakes_val.png").is_file()
