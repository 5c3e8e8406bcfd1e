"""The template repository itself: the README's commands are the ones CI and the try-it script use."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest
from helpers import CONTEXT, TEMPLATE

README = (TEMPLATE / "README.md").read_text(encoding="utf-8")
UV_FIRST = "python3 -m pip install -q --upgrade --target .uv uv && .uv/bin/uv run --locked "


def section_command(title: str) -> str:
    """The single line of the first ```bash block under the README heading `## <title>`."""
    match = re.search(rf"^## {re.escape(title)}\n.*?```bash\n(.*?)\n```", README, re.M | re.S)
    assert match, f"README has no bash block under '## {title}'"
    lines = match.group(1).strip().splitlines()
    assert len(lines) == 1, f"'{title}' must be one command, got {lines}"
    return lines[0]


def test_ci_runs_exactly_the_readme_test_command():
    """.ci/run is executable bash with strict mode, and its only command is the README's Test-it line
    (after sourcing the SLURM test's cluster set-up, which does nothing unless root on Debian)."""
    script = TEMPLATE / ".ci" / "run"
    assert os.access(script, os.X_OK), ".ci/run is not executable"
    lines = [ln for ln in script.read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "set -euo pipefail"
    commands = [ln for ln in lines[1:] if not ln.startswith("cd ") and ln != "source scripts/slurm/ci.sh"]
    assert commands == [section_command("Test it")]


def test_readme_commands_use_the_lock_file():
    """Both README commands install uv with pip into ./.uv/ (allowed where PEP 668 refuses a plain install) and run
    through the committed uv.lock."""
    assert (TEMPLATE / "uv.lock").is_file()
    for title in ("Try it", "Test it"):
        command = section_command(title)
        assert command.startswith(UV_FIRST), command


def test_try_it_command_runs_an_existing_script():
    """The Try-it command names scripts/try_it.py, which exists."""
    command = section_command("Try it")
    assert "scripts/try_it.py" in command and (TEMPLATE / "scripts" / "try_it.py").is_file()


def test_options_table_lists_every_variable_with_default_first():
    """Each cookiecutter.json variable has a README row; choices appear in cookiecutter.json order."""
    for var, value in CONTEXT.items():
        if var.startswith("_"):
            continue
        row = re.search(rf"^\| `{var}` \|([^|]*)\|", README, re.M)
        assert row, f"no options-table row for {var}"
        if isinstance(value, list):
            assert re.findall(r"`([^`]+)`", row.group(1)) == value, f"{var}: {row.group(1)}"


def load_try_it():
    """scripts/try_it.py as a module, so its main() can be called with subprocess stubbed out."""
    spec = importlib.util.spec_from_file_location("try_it", TEMPLATE / "scripts" / "try_it.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("train_exit", [0, 3])
def test_try_it_bakes_defaults_and_runs_train_with_this_interpreter(tmp_path, monkeypatch, capsys, train_exit):
    """try_it.py bakes the defaults into a fresh scratch folder, runs `train.py --epochs N --out DIR`
    there with the same interpreter, prints both paths, and exits with train.py's exit code.

    Training itself is stubbed: the default project's own suite trains for real, and a real run here
    would cost minutes.
    """
    try_it = load_try_it()
    calls = []

    def fake_call(command, cwd):
        calls.append((command, Path(cwd)))
        return train_exit

    monkeypatch.setattr(try_it.subprocess, "call", fake_call)
    isolated = functools.partial(try_it.cookiecutter, config_file=None, default_config=True)
    monkeypatch.setattr(try_it, "cookiecutter", isolated)
    code = try_it.main(["--scratch", str(tmp_path), "--epochs", "2"])
    assert code == train_exit
    ((command, cwd),) = calls
    (project,) = tmp_path.glob("try-it-*/image-classifier")
    assert cwd == project and (project / "train.py").is_file()
    assert command == [sys.executable, "train.py", "--epochs", "2", "--out", str(project / "runs" / "try-it")]
    printed = capsys.readouterr().out
    assert str(project) in printed and str(project / "runs" / "try-it") in printed
    if train_exit == 0:  # the next step it suggests is the quick tier (minutes), not the whole suite
        (suggestion,) = [line for line in printed.splitlines() if line.startswith("Next:")]
        assert suggestion.endswith(f"{sys.executable} -m pytest -m 'not slow' -n auto"), suggestion
