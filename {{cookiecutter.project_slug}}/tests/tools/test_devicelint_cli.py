"""The device linter's command line: it never crashes, and each odd input gets its own message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import devicelint  # tools/devicelint.py: pytest puts tools/ on sys.path (pyproject.toml)

PROJECT_ROOT = Path(devicelint.__file__).resolve().parent.parent  # tools/ is at the root


def run(capsys, *argv: str) -> tuple[int, list[str], list[str]]:
    """Exit status, stdout lines and stderr lines of one in-process run."""
    status = devicelint.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out.splitlines(), captured.err.splitlines()


@pytest.mark.skipif(not hasattr(os, "symlink") or sys.platform == "win32", reason="needs symlinks")
def test_a_broken_symlink_in_a_folder_is_an_error_not_a_crash(tmp_path: Path, capsys) -> None:
    """The other files are still checked; the link gets one stderr line and the exit status is 2."""
    (tmp_path / "bad.py").write_text("torch.cuda.synchronize()\n")
    (tmp_path / "gone.py").symlink_to(tmp_path / "missing.py")
    status, out, err = run(capsys, str(tmp_path))
    assert status == 2
    assert " DEV012 " in out[0]
    assert err == [f"{tmp_path / 'gone.py'}: error: broken symbolic link"]


@pytest.mark.skipif(not hasattr(os, "symlink") or sys.platform == "win32", reason="needs symlinks")
def test_a_broken_symlink_named_on_the_command_line_is_a_usage_error(tmp_path: Path, capsys) -> None:
    """Named directly, it is reported as a broken link, not as a missing file."""
    (tmp_path / "gone.py").symlink_to(tmp_path / "missing.py")
    status, out, err = run(capsys, str(tmp_path / "gone.py"))
    assert (status, out, err) == (2, [], [f"devicelint: broken symbolic link: {tmp_path / 'gone.py'}"])


def test_a_very_deep_expression_is_an_error_not_a_crash(tmp_path: Path, capsys) -> None:
    """Generated code with a 100000-term expression around a load: one message, exit 2, whether the parser gives up
    (Python 3.11+) or the walk would recurse past the interpreter's limit (3.10, where the tree parses)."""
    (tmp_path / "deep.py").write_text("import torch\nx = torch.load('m.pt') + " + " + ".join(["1"] * 100_000) + "\n")
    status, out, err = run(capsys, str(tmp_path))
    assert (status, out) == (2, [])
    assert err == [f"{tmp_path / 'deep.py'}: error: nested too deeply to check"]


def test_an_undecodable_file_is_not_a_syntax_error(tmp_path: Path, capsys) -> None:
    """Latin-1 bytes without an encoding cookie: a decode error on stderr, no DEV000, exit 2."""
    (tmp_path / "latin.py").write_bytes(b"name = '\xe9t\xe9'\n")
    (tmp_path / "nul.py").write_bytes(b"x = 1\x00\n")
    status, out, err = run(capsys, str(tmp_path))
    assert (status, out) == (2, [])
    assert err[0].startswith(f"{tmp_path / 'latin.py'}: error: cannot decode as Python source")
    assert err[1] == f"{tmp_path / 'nul.py'}: error: contains null bytes; not a Python source file"


def test_an_encoding_cookie_is_honoured(tmp_path: Path, capsys) -> None:
    """The same bytes with `# -*- coding: latin-1 -*-` are ordinary source."""
    (tmp_path / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\nname = '\xe9t\xe9'\n")
    assert run(capsys, str(tmp_path)) == (0, ["devicelint: 1 file checked, 0 findings"], [])


def test_overlapping_paths_print_each_finding_once(tmp_path: Path, capsys) -> None:
    """`devicelint src src/a.py ./src` checks a.py once."""
    (tmp_path / "a.py").write_text("torch.cuda.synchronize()\n")
    status, out, _ = run(capsys, str(tmp_path), str(tmp_path / "a.py"), str(tmp_path / "." / "a.py"))
    assert status == 1
    assert out[-1].startswith("devicelint: 1 finding in 1 file (DEV012 x1)")
    assert len(out) == 2


def test_exclude_skips_files_and_folders_by_glob(tmp_path: Path, capsys) -> None:
    """--exclude takes a glob or a path, for files and folders, and can repeat."""
    for name in ("src/a.py", "src/gen/b.py", "tests/test_c.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("torch.cuda.synchronize()\n")
    status, out, _ = run(capsys, str(tmp_path), "--exclude", "tests", "--exclude", "*/gen/*")
    assert status == 1 and out[0].startswith(str(tmp_path / "src" / "a.py")) and len(out) == 2
    assert run(capsys, str(tmp_path), "--exclude", "*.py")[0] == 0


def test_allow_devices_in_matches_paths_and_globs(tmp_path: Path, capsys) -> None:
    """--allow-devices-in takes a file name, a path suffix or a glob, not only a bare name."""
    for name in ("setup/gpu.py", "other/gpu.py", "scripts/bench.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("d = torch.device('cuda:1')\n")
    status, out, _ = run(capsys, str(tmp_path), "--allow-devices-in", "setup/gpu.py",
                         "--allow-devices-in", "scripts/*")
    assert status == 1 and len(out) == 2 and out[0].startswith(str(tmp_path / "other" / "gpu.py"))


def test_exit_status_is_0_clean_1_findings_2_usage(tmp_path: Path, capsys) -> None:
    """0 clean (one line says how many files were checked), 1 findings plus a summary line, 2 for a bad command
    line."""
    (tmp_path / "good.py").write_text("model.to(device)\n")
    (tmp_path / "bad.py").write_text("torch.cuda.synchronize()\n")
    assert run(capsys, str(tmp_path / "good.py")) == (0, ["devicelint: 1 file checked, 0 findings"], [])
    status, out, _ = run(capsys, str(tmp_path))
    assert status == 1 and out[-1].endswith("`--explain CODE` shows the fix")
    with pytest.raises(SystemExit) as usage:
        devicelint.main(["--no-such-flag"])
    assert usage.value.code == 2


def test_the_file_runs_as_a_script_outside_any_package(tmp_path: Path) -> None:
    """Copied alone, `python devicelint.py PATH` works: it imports only the standard library."""
    copy = tmp_path / "devicelint.py"
    copy.write_text(Path(devicelint.__file__).read_text())
    (tmp_path / "bad.py").write_text("torch.cuda.synchronize()\n")
    result = subprocess.run([sys.executable, "-I", str(copy), str(tmp_path / "bad.py")],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 1 and " DEV012 " in result.stdout, result.stderr


def test_no_path_lints_what_pyproject_names(tmp_path: Path, capsys, monkeypatch) -> None:
    """`python tools/devicelint.py` alone lints `[tool.devicelint] paths` (globs too), not the rest of the project."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n\n[tool.devicelint]\npaths = ["src", "*.py"]\n')
    for name in ("src/model.py", "train.py", "tests/test_gpu.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("torch.cuda.synchronize()\n")
    monkeypatch.chdir(tmp_path)
    status, out, _ = run(capsys)
    assert status == 1
    assert sorted(line.split(":")[0] for line in out[:-1]) == [os.path.join("src", "model.py"), "train.py"]


def test_no_path_and_no_paths_setting_lints_the_whole_project(tmp_path: Path, capsys, monkeypatch) -> None:
    """Without `paths`, the project around the current folder (where pyproject.toml is) is linted."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n')
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "model.py").write_text("torch.cuda.synchronize()\n")
    monkeypatch.chdir(tmp_path / "pkg")
    status, out, _ = run(capsys)
    assert status == 1 and out[0].startswith(str(tmp_path / "pkg" / "model.py")) and " DEV012 " in out[0]


def test_a_path_pyproject_names_that_is_missing_is_a_usage_error(tmp_path: Path, capsys, monkeypatch) -> None:
    """A misspelt `paths` entry is one line and exit 2, not a silently smaller lint."""
    (tmp_path / "pyproject.toml").write_text('[tool.devicelint]\npaths = ["scr"]\n')
    monkeypatch.chdir(tmp_path)
    status, _, err = run(capsys)
    assert status == 2 and err == ["devicelint: no such file or directory: scr"]


def test_porting_reports_cuda_only_code_and_the_opt_in_rules(tmp_path: Path, capsys) -> None:
    """--porting: a .cuda() after NCCL started is reported, and so are the opt-in rules (DEV007)."""
    (tmp_path / "ddp.py").write_text(
        "import torch\n"
        "def main():\n"
        "    torch.distributed.init_process_group('nccl')\n"
        "    model = Net().cuda()\n"
        "class Net(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x + torch.ones(3)\n")
    assert run(capsys, str(tmp_path))[0] == 0
    status, out, _ = run(capsys, "--porting", str(tmp_path))
    assert status == 1 and [line.split()[1] for line in out[:-1]] == ["DEV001", "DEV007"]


def test_pyproject_can_turn_porting_on(tmp_path: Path, capsys, monkeypatch) -> None:
    """`porting = true` under [tool.devicelint] reports a guarded .cuda() (quiet otherwise) without the flag."""
    (tmp_path / "model.py").write_text("if torch.cuda.is_available():\n    x = x.cuda()\n")
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "model.py")[0] == 0
    (tmp_path / "pyproject.toml").write_text("[tool.devicelint]\nporting = true\n")
    status, out, _ = run(capsys, "model.py")
    assert status == 1 and " DEV001 " in out[0]
