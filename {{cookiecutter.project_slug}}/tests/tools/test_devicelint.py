"""The device linter: every rule fires on a hazard and stays quiet on the fix, and the project is clean."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import devicelint  # tools/devicelint.py: pytest puts tools/ on sys.path (pyproject.toml)

PROJECT_ROOT = Path(devicelint.__file__).resolve().parent.parent
PACKAGE_DIR = PROJECT_ROOT / "{{ cookiecutter.package_name }}"


def codes(source: str, filename: str = "snippet.py", **options) -> list[str]:
    """The codes the linter reports for a snippet, in order."""
    return [f.code for f in devicelint.lint_source(textwrap.dedent(source), filename, **options)]


# One row per hazard: the rule's code, a snippet that must fire it, a fix that must not.
CASES = [
    ("DEV001", "x = torch.ones(2).cuda()", "x = torch.ones(2).to(device)"),
    ("DEV001", "model.cuda(1)", "ok = torch.cuda.is_available()"),
    ("DEV002", "d = torch.device('cuda:1')", "d = torch.device(spec)"),
    ("DEV002", "x = x.to('mps')", "x = x.to(device)"),
    ("DEV002", "x = torch.zeros(2, device='cuda')", "x = torch.zeros(2, device='cpu')"),
    ("DEV002", "d = torch.device('cuda' if ok else 'cpu')", "on_gpu = device.type == 'cuda'"),
    ("DEV002", "d = torch.device(f'cuda:{rank}')", "x = x.to('meta')"),
    ("DEV002", "def run(device='cuda'):\n    return device", "def run(device=None, mode='cuda'):\n    return device"),
    ("DEV003", "s = torch.load(p, weights_only=True)", "s = torch.load(p, map_location=device, weights_only=True)"),
    ("DEV003", "s = torch.load(p, weights_only=True)", "s = torch.load(p, 'cpu', weights_only=True)"),
    ("DEV004", "s = torch.load(p, map_location='cpu')", "s = torch.load(p, map_location='cpu', weights_only=True)"),
    ("DEV004", "s = torch.load(p, map_location='cpu', weights_only=False)", "s = torch.load(p, **options)"),
    ("DEV005", "from .config import DEVICE", "from . import config"),
    ("DEV005", "from pkg.config import TrainConfig, DEVICE as D", "from .config import TrainConfig"),
    ("DEV006", "torch.save(model, path)", "torch.save(model.state_dict(), path)"),
    ("DEV006", "torch.save(self.net, path)", "torch.save(dict(model=model.state_dict(), epoch=3), path)"),
    ("DEV006", "torch.save(self, path)", "torch.save(model_state, path)"),
    ("DEV007", """
        class Head(nn.Module):
            def forward(self, x):
                return x + torch.zeros(x.shape[-1])
        """, """
        class Head(nn.Module):
            def forward(self, x):
                return x + torch.zeros(x.shape[-1], device=x.device)
        """),
    ("DEV007", """
        class Pos(nn.Module):
            def forward(self, x):
                return x + torch.arange(x.shape[1])
        """, """
        class Pos(nn.Module):
            def __init__(self):
                self.table = torch.arange(8)
            def forward(self, x):
                return x + torch.zeros_like(x) + torch.arange(x.shape[1])[None].float().to(x.device)
        """),
    ("DEV008", """
        class Images(Dataset):
            def __getitem__(self, i):
                return self.images[i].to(self.device)
        """, """
        class Images(Dataset):
            def __getitem__(self, i):
                return self.images[i].to(torch.float32)
        """),
    ("DEV008", """
        class Images(torch.utils.data.Dataset):
            def __getitem__(self, i):
                return self.images[i].cuda()
        """, """
        class Batch:
            def __getitem__(self, i):
                return self.images[i].to(self.device)
        """),
    ("DEV009", """
        model = nn.DataParallel(model)
        state = model.state_dict()
        """, """
        model = nn.DataParallel(model)
        state = model.module.state_dict()
        """),
    ("DEV009", """
        class Trainer:
            def __init__(self, model):
                self.model = DistributedDataParallel(model)
            def save(self):
                return self.model.state_dict()
        """, """
        ddp = DDP(model)
        state = unwrap(ddp).state_dict()
        ddp = ddp.module
        again = ddp.state_dict()
        """),
    ("DEV010", "noise = torch.cuda.FloatTensor(8, 4).normal_()",
     "Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor"),
    ("DEV012", "torch.cuda.synchronize()", "if device.type == 'cuda':\n    torch.cuda.synchronize()"),
    ("DEV012", "torch.cuda.set_device(rank)", "torch.cuda.empty_cache()"),
    ("DEV011", "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')",
     "device = resolve_device(args.device)"),
]


@pytest.mark.parametrize("code, bad, good", CASES)
def test_rule_fires_on_the_hazard(code: str, bad: str, good: str) -> None:
    """The bad snippet is reported under the rule it illustrates (DEV011 once selected: it is off by default)."""
    assert code in codes(bad, select=[code])


@pytest.mark.parametrize("code, bad, good", CASES)
def test_rule_is_quiet_on_the_fix(code: str, bad: str, good: str) -> None:
    """The corrected snippet raises nothing at all, even with every rule selected, so no rule misfires."""
    assert codes(good, select=list(devicelint.RULES)) == []


def test_every_rule_is_proven_both_ways() -> None:
    """Each rule (DEV000 aside, it is the parser's) has a firing and a quiet case above."""
    assert {code for code, _, _ in CASES} == set(devicelint.RULES) - {"DEV000"}


def test_cuda_call_is_reported_with_position_and_a_short_message() -> None:
    """The output line reads like any linter: path:line:col: CODE message; the fix is behind --explain."""
    [finding] = devicelint.lint_source("import torch\nx = torch.ones(2).cuda()\n", "train.py", select=["DEV001"])
    assert finding.format() == "train.py:2:5: DEV001 .cuda() outside a CUDA guard"


def test_device_strings_are_allowed_in_the_module_that_resolves_devices() -> None:
    """The file that checks availability may name devices, whatever its name; a file name alone exempts nothing."""
    resolver = "def resolve(spec):\n    if not torch.cuda.is_available():\n        raise RuntimeError(spec)\n" \
        "    return torch.device('cuda:1')\n"
    assert codes(resolver, "pkg/devkit/resolve.py") == codes(resolver, "anything.py") == []
    source = "d = torch.device('cuda:1')\n"
    assert codes(source, "pkg/devices.py") == codes(source, "config.py") == ["DEV002"]
    assert codes(source, "setup_gpu.py", allow_devices_in=("setup_gpu.py",)) == []


def test_pyproject_names_the_files_that_may_hold_device_strings(tmp_path: Path) -> None:
    """`[tool.devicelint] allow-devices-in` in the nearest pyproject.toml is read relative to that file."""
    (tmp_path / "pyproject.toml").write_text('[tool.devicelint]\nallow-devices-in = ["pkg/config.py"]\n')
    (tmp_path / "pkg").mkdir()
    for name in ("config.py", "other.py"):
        (tmp_path / "pkg" / name).write_text("DEFAULT_DEVICE = 'cuda'\n")
    found = devicelint.lint_paths([str(tmp_path / "pkg")])
    assert [(Path(f.path).name, f.code) for f in found] == [("other.py", "DEV002")]


def test_ignore_comment_silences_only_the_named_code_on_its_line() -> None:
    """`# devicelint: ignore[CODE]` is targeted; a bare `ignore` silences the whole line."""
    line = "x = torch.ones(2, device='cuda').cuda()"
    both = {"select": ["DEV001", "DEV002"]}
    assert codes(line, **both) == ["DEV001", "DEV002"]
    assert codes(line + "  # devicelint: ignore[DEV002]", **both) == ["DEV001"]
    assert codes(line + "  # devicelint: ignore[DEV001, DEV002]", **both) == []
    assert codes(line + "  # devicelint: ignore", **both) == []
    assert codes(f"# devicelint: ignore[DEV001]\n{line}", **both) == ["DEV001", "DEV002"]


def test_select_and_ignore_filter_the_rules(tmp_path: Path, capsys) -> None:
    """--select keeps only the listed codes, --ignore drops codes; unknown codes are an error."""
    target = tmp_path / "bad.py"
    target.write_text("x = torch.ones(2, device='cuda').cuda()\ntorch.cuda.synchronize()\n")
    assert devicelint.main(["--select", "DEV002", str(target)]) == 1
    assert "DEV012" not in capsys.readouterr().out
    assert devicelint.main(["--ignore", "DEV012,DEV002,DEV001", str(target)]) == 0
    assert capsys.readouterr().out == "devicelint: 1 file checked, 0 findings\n"
    assert devicelint.main(["--select", "DEV123", str(target)]) == 2


def test_syntax_error_is_one_finding_and_fails(tmp_path: Path, capsys) -> None:
    """A file that does not parse is reported as DEV000 on its line, and the exit code is 1."""
    (tmp_path / "broken.py").write_text("x = 1\ndef f(:\n")
    assert devicelint.main([str(tmp_path)]) == 1
    [line, summary] = capsys.readouterr().out.splitlines()
    assert summary.startswith("devicelint: 1 finding in 1 file (DEV000 x1)")
    assert line.startswith(f"{tmp_path / 'broken.py'}:2:") and " DEV000 syntax error" in line


def test_missing_path_is_a_usage_error(tmp_path: Path, capsys) -> None:
    """A path that does not exist prints one line on stderr and exits 2."""
    assert devicelint.main([str(tmp_path / "nope.py")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_folders_are_walked_sorted_and_virtualenvs_skipped(tmp_path: Path, capsys) -> None:
    """Directories recurse into *.py (not .venv/__pycache__); findings sort by path, line, col."""
    (tmp_path / "b.py").write_text("torch.cuda.synchronize()\ntorch.cuda.set_device(0)\n")
    (tmp_path / "a.py").write_text("z = torch.load(p)\n")
    (tmp_path / "notes.txt").write_text("x.cuda()\n")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "site.py").write_text("x.cuda()\n")
    assert devicelint.main([str(tmp_path)]) == 1
    *lines, summary = capsys.readouterr().out.splitlines()
    assert summary.startswith("devicelint: 4 findings in 2 files")
    assert [line.split(": ")[1].split()[0] for line in lines] == ["DEV003", "DEV004", "DEV012", "DEV012"]
    assert lines[2].startswith(str(tmp_path / "b.py") + ":1:") and ".venv" not in "".join(lines)


def test_list_rules_prints_every_code_and_marks_the_ones_off_by_default(capsys) -> None:
    """--list-rules documents each code in one line; DEV007 and DEV011 say they are opt-in (--porting)."""
    assert devicelint.main(["--list-rules"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(devicelint.RULES)
    assert [line.split()[0] for line in lines if "[off by default; on with --porting]" in line] == \
        ["DEV007", "DEV011"]


def test_explain_prints_the_long_hint(capsys) -> None:
    """--explain CODE prints the rule and its fix; an unknown code is a usage error."""
    assert devicelint.main(["--explain", "dev004"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("DEV004: torch.load without weights_only=True") and "save vars(args)" in out
    assert devicelint.main(["--explain", "DEV999"]) == 2


def test_command_line_exit_codes(tmp_path: Path) -> None:
    """`python tools/devicelint.py` exits 1 with findings on stdout, 0 on clean code."""
    bad, good = tmp_path / "bad.py", tmp_path / "good.py"
    bad.write_text("torch.cuda.synchronize()\n")
    good.write_text("model.to(device)\n")
    command = [sys.executable, devicelint.__file__]
    failed = subprocess.run([*command, str(bad)], cwd=PROJECT_ROOT, capture_output=True, text=True)
    passed = subprocess.run([*command, str(good)], cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert (failed.returncode, passed.returncode) == (1, 0), failed.stderr + passed.stderr
    assert " DEV012 " in failed.stdout and passed.stdout == "devicelint: 1 file checked, 0 findings\n"


def test_generated_project_is_clean_under_its_own_linter(capsys) -> None:
    """The package and the root-level scripts obey every rule (tests/ may name 'cuda:1')."""
    targets = [str(PACKAGE_DIR), str(PROJECT_ROOT / "tools"), *sorted(str(p) for p in PROJECT_ROOT.glob("*.py"))]
    status = devicelint.main(targets)
    assert status == 0, capsys.readouterr().out


def test_the_lint_with_no_path_checks_what_pyproject_names_and_passes() -> None:
    """`python tools/devicelint.py` (CI's and the README's command) lints pyproject's paths: all exist, all clean."""
    result = subprocess.run([sys.executable, devicelint.__file__], cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert (result.returncode, result.stderr) == (0, "")
    assert re.fullmatch(r"devicelint: \d+ files checked, 0 findings\n", result.stdout)
