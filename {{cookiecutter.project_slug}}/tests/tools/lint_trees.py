"""Small programs written to disk and linted as one tree, for the rounds' behaviour tests."""

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
        (root / name).write_text(textwrap.dedent(text))
    found = devicelint.lint_paths([str(root)], select=CHECKED)
    return sorted((Path(f.path).relative_to(root).as_posix(), f.line, f.code) for f in found)
