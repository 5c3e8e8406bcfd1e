"""Round 14 of the device lint (after held-out 12 was scored): what that set's misses and false alarms showed.

A DataParallel subclass wraps like DataParallel; a file that mixes tabs and spaces in its indentation is read
as Python 2 read it and checked; a branch under a constant-false test never runs."""

from __future__ import annotations

import textwrap
from pathlib import Path

import devicelint  # tools/devicelint.py: pytest puts tools/ on sys.path (pyproject.toml)

CHECKED = sorted(code for code, rule in devicelint.RULES.items() if rule.default)


def tree_codes(root: Path, files: dict[str, str]) -> list[tuple[str, int, str]]:
    """(file, line, code) for a small program written under `root` (an application: a .git, no setup.py)."""
    (root / ".git").mkdir(parents=True, exist_ok=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    found = devicelint.lint_paths([str(root)], select=CHECKED)
    return sorted((Path(f.path).relative_to(root).as_posix(), f.line, f.code) for f in found)


def test_a_subclass_of_dataparallel_wraps_like_it(tmp_path: Path) -> None:
    """CompressAI's `class CustomDataParallel(nn.DataParallel)` (to reach the module's methods), made when several
    GPUs are there, then `net.state_dict()` saved: its keys carry `module.` like DataParallel's. A subclass of a
    subclass counts too; an unrelated class does not."""
    train = textwrap.dedent("""
        import torch
        from torch import nn

        class CustomDataParallel(nn.DataParallel):
            def __getattr__(self, key):
                return getattr(self.module, key)

        class Deeper(CustomDataParallel):
            pass

        class Plain(nn.Module):
            pass

        def main(net, out):
            if torch.cuda.device_count() > 1:
                net = WRAPPER(net)
            torch.save({"state_dict": net.state_dict()}, out)

        main(nn.Linear(2, 2), "checkpoint.pth.tar")
        """)
    for wrapper in ("CustomDataParallel", "Deeper"):
        root = tmp_path / wrapper
        assert tree_codes(root, {"train.py": train.replace("WRAPPER", wrapper)}) == [("train.py", 18, "DEV009")]
    assert tree_codes(tmp_path / "plain", {"train.py": train.replace("WRAPPER", "Plain")}) == []


def test_a_file_mixing_tabs_and_spaces_is_checked(tmp_path: Path) -> None:
    """PSMNet's finetune.py indents with tabs in some blocks and spaces in others: Python 3 refuses it (TabError),
    so the lint reported DEV000 and checked nothing. Read with tabs as 8 columns (Python 2), its load is checked."""
    source = "import sys\nimport torch\n\nif len(sys.argv) > 1:\n        state = 1\n\tstate = torch.load(sys.argv[1])\n"
    assert tree_codes(tmp_path, {"finetune.py": source}) == [("finetune.py", 6, "DEV003"), ("finetune.py", 6, "DEV004")]


def test_a_file_that_does_not_parse_for_another_reason_is_still_reported(tmp_path: Path) -> None:
    """Python 2 print statements are no indentation matter: still DEV000, nothing checked."""
    (tmp_path / "old.py").write_text("import torch\nprint 'x'\ntorch.load(open('a'))\n")
    found = devicelint.lint_paths([str(tmp_path / "old.py")], select=["DEV000", *CHECKED])
    assert [(f.line, f.code) for f in found] == [(2, "DEV000")]


def test_a_branch_under_a_constant_false_test_never_runs(tmp_path: Path) -> None:
    """CompressAI's `if False:  # torch.cuda.is_available():` keeps the CUDA choice it no longer makes: nothing in
    that branch runs, so nothing there is reported; its `else` is checked as usual."""
    source = textwrap.dedent("""
        import torch

        def main():
            if False:  # torch.cuda.is_available():
                device = torch.device("cuda:{}".format(torch.cuda.current_device()))
            else:
                device = torch.device("cpu")
                torch.cuda.synchronize()
            return device

        main()
        """)
    assert tree_codes(tmp_path, {"codec.py": source}) == [("codec.py", 9, "DEV012")]
