"""Remove what disabled options do not need, then say what to run next."""

import json
import os
import shutil
import sys

ANSWERS = json.loads(r"""{{ cookiecutter | tojson }}""")

# Each path belongs to one option; it is removed when that option is off.
REMOVE_PATHS = {
    "LICENSE": ANSWERS["license"] == "Proprietary",
    "scripts/launch_ddp.sh": ANSWERS["multi_gpu"] != "ddp",
}


def remove(path: str) -> None:
    """Delete a file or folder of the generated project if it exists."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def main() -> int:
    for path, disabled in REMOVE_PATHS.items():
        if disabled:
            remove(path)
    scripts = "scripts"
    if os.path.isdir(scripts) and not os.listdir(scripts):
        os.rmdir(scripts)
    slug = ANSWERS["project_slug"]
    print(
        f"\nCreated {slug}. Next (README.md has the details):\n"
        f"  cd {slug}\n"
        "  python3 -m venv .venv && . .venv/bin/activate\n"
        "  python -m pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu"
        "  # CPU-only machine only\n"
        "  python -m pip install -e '.[test]'\n"
        "  python train.py --epochs 3                # trains on the built-in demo data\n"
        "  python evaluate.py runs/latest/best.pt    # accuracy, per-class table, confusion matrix\n"
        "  python predict.py runs/latest/best.pt data/demo/val/circle --topk 2\n"
        "  python -m pytest                          # the device-consistency suite\n"
        f"  python -m {ANSWERS['package_name']}.devkit          # what devices this machine has\n"
        "runs/latest is the newest run made without --out; a run with --out DIR leaves it alone: "
        "use DIR/best.pt.\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
