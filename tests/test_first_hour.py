"""A newcomer's first hour: the generated README and the post-generation hint agree, start with a virtual
environment and the CPU build of torch, and every command of the README's "Quick start" and "Train on your own
data" runs as written in a freshly baked project.

The install lines (venv, pip) are not run here: test_baked_runs.py runs the suite after the README's install.
train.py lines get a tiny training appended (later flags win); `python -m pytest` is the suite test's job.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from helpers import DEFAULT_PACKAGE, TEMPLATE, cookiecutter_cli, describe, run

CPU_TORCH = "python -m pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu"
NOT_RUN = ("pip install", "-m venv", "-m pytest")
TINY_TRAINING = ["--epochs", "1", "--batch-size", "16", "--image-size", "32"]


def bash_commands(readme: str, section: str) -> list[str]:
    """The commands of the first bash block under `## section`, comments stripped; a quoted argument may span
    lines (a `python -c "..."` script)."""
    block = re.search(rf"^## {re.escape(section)}\n.*?```bash\n(.*?)```", readme, re.S | re.M)
    assert block, f"no bash block under ## {section}"
    commands, pending = [], ""
    for line in block.group(1).splitlines():
        pending = f"{pending}\n{line}" if pending else line.split("  #")[0].strip()
        try:
            shlex.split(pending)
        except ValueError:  # an open quote: the command goes on
            continue
        if pending:
            commands.append(pending)
        pending = ""
    return commands


@pytest.fixture(scope="module")
def readme(bakery) -> str:
    """The default bake's README.md."""
    return (bakery.project() / "README.md").read_text(encoding="utf-8")


def test_quick_start_opens_with_a_virtualenv_and_names_the_cpu_build_of_torch(readme):
    """The first command makes and activates a venv; the CPU-only torch comes from the official index; the
    install of the project follows both."""
    commands = bash_commands(readme, "Quick start")
    assert commands[0].startswith("python3 -m venv .venv") and ". .venv/bin/activate" in commands[0]
    assert commands[1] == CPU_TORCH
    assert commands[2] == "python -m pip install -e '.[test]'"
    assert set(re.findall(r"https?://([\w.-]+)", readme)) <= {"download.pytorch.org"}


def test_readme_says_that_a_run_with_out_leaves_runs_latest_alone(readme):
    """runs/latest is explained before a reader relies on it: a run with --out does not move it."""
    assert re.search(r"`runs/latest` points at the newest run \*\*made without `--out`\*\*", readme)
    assert readme.index("leaves `runs/latest` where it was") < readme.index("## Train on your own data")


def test_the_post_generation_hint_gives_the_readmes_commands(tmp_path, cli_config):
    """Every command the hint prints is the README's own (same evaluate and predict paths), and the hint too
    says that --out leaves runs/latest alone."""
    proc = cookiecutter_cli(tmp_path, cli_config)
    assert proc.returncode == 0, describe(proc)
    project = tmp_path / "out" / "image-classifier"
    quick_start = bash_commands((project / "README.md").read_text(encoding="utf-8"), "Quick start")
    hinted = [line.split("  #")[0].strip() for line in proc.stdout.splitlines() if line.startswith("  python")]
    assert any(line.startswith("python evaluate.py runs/latest/best.pt") for line in hinted)
    devkit = f"python -m {DEFAULT_PACKAGE}.devkit"  # the README names it just below its Quick start block
    missing = [line for line in hinted if line not in quick_start and line != devkit]
    assert not missing, f"hint lines the README's Quick start does not have: {missing}"
    assert "a run with --out DIR leaves it alone" in proc.stdout


def test_the_template_readme_has_no_placeholder_to_fill(readme):
    """No `gh:<org>` style placeholder: the generate command runs from a clone as written."""
    text = (TEMPLATE / "README.md").read_text(encoding="utf-8")
    assert "<org>" not in text and "uv run --locked cookiecutter . --output-dir .." in text


def test_try_it_points_at_the_interpreter_that_trained(monkeypatch, capsys, tmp_path):
    """Try-it's closing hint runs pytest with the interpreter it trained with, not whatever `python` is."""
    sys.path.insert(0, str(TEMPLATE / "scripts"))
    try:
        import try_it
    finally:
        sys.path.remove(str(TEMPLATE / "scripts"))
    project = tmp_path / "image-classifier"
    project.mkdir()
    (project / "train.py").write_text("")
    monkeypatch.setattr(try_it, "cookiecutter", lambda *args, **kwargs: str(project))
    monkeypatch.setattr(try_it.subprocess, "call", lambda *args, **kwargs: 0)
    assert try_it.main(["--scratch", str(tmp_path)]) == 0
    assert f"&& {sys.executable} -m pytest" in capsys.readouterr().out


def _run_section(project: Path, readme: str, section: str) -> list[str]:
    """Run a section's commands in order in `project` (python -> this interpreter); the lines run."""
    ran = []
    for command in bash_commands(readme, section):
        if any(skip in command for skip in NOT_RUN):
            continue
        args = shlex.split(command)
        assert args[0] == "python", command
        args = [sys.executable, *args[1:], *(TINY_TRAINING if args[1:2] == ["train.py"] else [])]
        proc = run(args, cwd=project, timeout=900, OMP_NUM_THREADS="1", **{f"{DEFAULT_PACKAGE.upper()}_DEVICE": "cpu"})
        assert proc.returncode == 0, f"{command}\n{describe(proc)}"
        ran.append(command)
    return ran


@pytest.mark.slow
def test_quick_start_runs_as_written(bakery, tmp_path, readme):
    """train, evaluate runs/latest/best.pt and predict run one after the other in a fresh bake."""
    project = tmp_path / "project"
    shutil.copytree(bakery.project(), project)
    small = (f"from pathlib import Path; from {DEFAULT_PACKAGE}.data import write_demo_dataset; "
             "write_demo_dataset(Path('data/demo'), train_per_class=6, val_per_class=3)")
    assert run([sys.executable, "-c", small], cwd=project).returncode == 0
    ran = _run_section(project, readme, "Quick start")
    assert [command.split()[1] for command in ran] == ["train.py", "evaluate.py", "predict.py"]
    assert (project / "runs" / "latest" / "confusion_val.png").is_file()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="the example's data comes from scikit-learn")
def test_train_on_your_own_data_runs_as_written(bakery, tmp_path, readme):
    """The own-data example writes the digits as class folders, trains on them, evaluates without --data (the
    checkpoint's data and split) and predicts."""
    project = tmp_path / "project"
    shutil.copytree(bakery.project(), project)
    ran = _run_section(project, readme, "Train on your own data")
    assert [command.split()[1] for command in ran] == ["-c", "train.py", "evaluate.py", "predict.py"]
    assert len(list((project / "data" / "digits").rglob("*.png"))) == 1797
    assert (project / "runs" / "digits" / "confusion_val.png").is_file()
