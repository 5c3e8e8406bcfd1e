"""Generate a project from this template with the default answers and train it on the demo data.

Run from the template root (the README's "Try it" command does that inside the template's uv
environment, which has cookiecutter, torch and torchvision):

    python scripts/try_it.py [--scratch DIR] [--epochs N] [--device SPEC]

Each try gets a fresh folder DIR/try-it-XXXX/ (DIR defaults to ./.scratch/, which git ignores);
the run lands in <project>/runs/try-it/. Both paths are printed. Exits with train.py's exit code.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from cookiecutter.main import cookiecutter

TEMPLATE = Path(__file__).resolve().parents[1]


def get_args_parser() -> argparse.ArgumentParser:
    """The command-line options of this script."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scratch", type=Path, default=TEMPLATE / ".scratch",
                        help="parent folder for the fresh project folder")
    parser.add_argument("--epochs", type=int, default=3, help="epochs to train on the demo data")
    parser.add_argument("--device", default=None, help="passed on to train.py --device (default: the project's)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Bake with default answers, then run the baked train.py with this interpreter."""
    args = get_args_parser().parse_args(argv)
    args.scratch.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="try-it-", dir=args.scratch)).resolve()
    project = Path(cookiecutter(str(TEMPLATE), no_input=True, output_dir=str(scratch)))
    out = project / "runs" / "try-it"
    print(f"project: {project}", flush=True)
    print(f"run dir: {out}", flush=True)

    if not (project / "train.py").is_file():
        print(f"error: the baked project has no train.py ({project})", file=sys.stderr)
        return 1
    command = [sys.executable, "train.py", "--epochs", str(args.epochs), "--out", str(out)]
    if args.device:
        command += ["--device", args.device]
    print(f"$ cd {project} && {' '.join(command)}", flush=True)
    code = subprocess.call(command, cwd=project)

    print(f"\ntrain.py exited with {code}.")
    if code == 0:
        print(f"Checkpoints, metrics.csv and the curves are in {out}")
        # The interpreter that trained (the template's uv environment), not whatever `python` is on PATH
        # The quick tier (minutes); the whole suite adds real training runs
        print(f"Next: cd {project} && {sys.executable} -m pytest -m 'not slow' -n auto")
    return code


if __name__ == "__main__":
    sys.exit(main())
