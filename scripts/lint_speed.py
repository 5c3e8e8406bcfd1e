"""How fast the device lint checks files: files per CPU-second of `python devicelint.py FOLDER` as users run it.

Each run is a fresh process (interpreter start, import, linting, exit), timed by the CPU it used (user + system,
from the operating system's account of the child), so other work on the machine slows the wall clock but
not the figure much. With several lint files (`--lint old.py --lint new.py`) the runs alternate, so a slower
spell of the machine falls on all of them alike. Printed: each run's CPU seconds and the median's files per
CPU-second. A benchmark that prints, not a test: it asserts nothing.

    python scripts/lint_speed.py FOLDER [--runs 5] [--lint path/to/devicelint.py ...]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

LINT = Path(__file__).resolve().parents[1] / "{{cookiecutter.project_slug}}" / "tools" / "devicelint.py"


def python_files(folder: Path) -> int:
    """How many *.py files the lint will read under the folder (it skips the same folders)."""
    skip = {".venv", "venv", ".git", "__pycache__", "build", "dist", ".tox", ".eggs", "node_modules"}
    return sum(name.endswith(".py") for root, dirs, files in os.walk(folder)
               if not skip & set(Path(root).relative_to(folder).parts) for name in files)


def cpu_seconds(lint: Path, folder: Path) -> float:
    """User + system CPU seconds of one `python LINT FOLDER` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, str(lint), str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main(argv: list[str] | None = None) -> int:
    """Time the lint files over the folder, alternating; print each run and the median files per CPU-second."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a folder of Python files (e.g. an installed torchvision)")
    parser.add_argument("--runs", type=int, default=5, help="runs of each lint file (default 5)")
    parser.add_argument("--lint", type=Path, action="append", help="a devicelint.py to time (default: the template's)")
    args = parser.parse_args(argv)
    lints = args.lint or [LINT]
    missing = [str(p) for p in [args.folder, *lints] if not p.exists()]
    if missing or args.runs < 1:
        print(f"lint_speed: {'no such path: ' + missing[0] if missing else '--runs must be at least 1'}",
              file=sys.stderr)
        return 2
    files = python_files(args.folder)
    times: dict[Path, list[float]] = {lint: [] for lint in lints}
    for _ in range(args.runs):
        for lint in lints:
            times[lint].append(cpu_seconds(lint, args.folder))
    for lint, runs in times.items():
        median = statistics.median(runs)
        rate = f"{files / median:.0f}" if median > 0 else "too fast to time"
        print(f"{lint}: {files} files; CPU seconds per run {', '.join(f'{t:.2f}' for t in runs)}; "
              f"median {median:.2f} s = {rate} files per CPU-second")
    return 0


if __name__ == "__main__":
    sys.exit(main())
