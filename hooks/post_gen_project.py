"""Remove what disabled options do not need, start a git repository that records the template's commit
for `cruft update`, then say what to run next."""

import json
import os
import shutil
import subprocess
import sys

ANSWERS = json.loads(r"""{{ cookiecutter | tojson }}""")

PACKAGE = ANSWERS["package_name"]
# What each answer brings, as whole files and folders (README "What each answer brings"); removed when not chosen.
BROUGHT_BY = {
    # with the compile cache: runs that restart (torchrun's elastic restarts, scheduler=slurm's requeues, which
    # needs ddp) need not compile again
    ("multi_gpu", "ddp"): [f"{PACKAGE}/plugins/ddp", "tests/plugins/ddp", "scripts/launch_ddp.sh",
                           "docs/multi-node.md", f"{PACKAGE}/plugins/compile_cache.py",
                           "tests/plugins/test_compile_cache.py", "benchmarks/compile_cache.py"],
    ("scheduler", "slurm"): ["scripts/slurm_train.sh", "docs/preemption.md"],
    ("tracker", "tensorboard"): [f"{PACKAGE}/plugins/tensorboard.py", "tests/plugins/test_tensorboard.py"],
    ("tracker", "mlflow"): [f"{PACKAGE}/plugins/mlflow.py", f"{PACKAGE}/plugins/_tracker_run.py",
                            "tests/plugins/test_mlflow.py"],
    ("tracker", "wandb"): [f"{PACKAGE}/plugins/wandb.py", f"{PACKAGE}/plugins/_tracker_run.py",
                           "tests/plugins/test_wandb.py"],
    ("gpu_decode", "yes"): [f"{PACKAGE}/plugins/gpu_decode", "tests/plugins/gpu_decode", "docs/gpu-decode.md"],
    ("fine_tuning", "yes"): [f"{PACKAGE}/plugins/fine_tuning", "tests/plugins/fine_tuning", "docs/fine-tuning.md"],
}
KEPT = {path for (answer, value), paths in BROUGHT_BY.items() if ANSWERS[answer] == value for path in paths}
REMOVE_PATHS = {  # a path two answers bring (a helper both trackers use) stays when either is chosen
    "LICENSE": ANSWERS["license"] == "Proprietary",
    **{path: path not in KEPT for paths in BROUGHT_BY.values() for path in paths},
}


def remove(path: str) -> None:
    """Delete a file or folder of the generated project if it exists."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def git(*args: str, cwd: str = ".") -> str | None:
    """git's stdout, or None when git is missing or fails (neither stops generation)."""
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def template_folder() -> str | None:
    """The template's folder as an absolute path: `_repo_dir` may be relative to where cookiecutter was run."""
    repo_dir = ANSWERS.get("_repo_dir") or ""
    starts = ["", os.environ.get("PWD", "")]  # the shell's folder when cookiecutter started
    if os.path.isdir(f"/proc/{os.getppid()}/cwd"):  # cookiecutter runs hooks from inside the template
        starts.append(os.path.realpath(f"/proc/{os.getppid()}/cwd"))
    for start in starts:
        folder = os.path.join(start, repo_dir) if repo_dir else start
        if os.path.isabs(folder) and os.path.isfile(os.path.join(folder, "cookiecutter.json")):
            return os.path.realpath(folder)
    return None


def template_source(folder: str) -> str:
    """What cruft should clone: the URL the template came from, or its local folder."""
    given = str(ANSWERS.get("_template", ""))
    prefixes = {"gh:": "https://github.com/{}.git", "gl:": "https://gitlab.com/{}.git",
                "bb:": "https://bitbucket.org/{}"}
    for prefix, url in prefixes.items():
        if given.startswith(prefix):
            return url.format(given[len(prefix):])
    if "://" in given or given.startswith("git@"):
        return given
    return folder


def record_template_commit() -> None:
    """Write .cruft.json (template, commit, answers) so that `cruft update` can bring the template's later fixes."""
    folder = template_folder()
    commit = git("rev-parse", "HEAD", cwd=folder) if folder else None
    if not commit:
        return  # a template that is not a git checkout has no commit to update from
    answers = {key: value for key, value in ANSWERS.items() if not key.startswith("_")}
    template, top = template_source(folder), git("rev-parse", "--show-toplevel", cwd=folder) or folder
    inside = os.path.relpath(folder, os.path.realpath(top))  # the template's folder within its repository
    if template == folder:
        template = os.path.realpath(top)
    state = {"template": template, "commit": commit, "checkout": ANSWERS.get("_checkout"),
             "context": {"cookiecutter": {**answers, "_template": template, "_commit": commit}},
             "directory": None if inside == "." else inside, "skip": []}
    with open(".cruft.json", "w", encoding="utf-8") as handle:  # cruft's own layout, so its rewrites stay small
        handle.write(json.dumps(state, ensure_ascii=False, indent=2, separators=(",", ": ")) + "\n")


def remove_empty_folders() -> None:
    """Remove a folder whose every file belongs to answers not chosen."""
    for folder in ("scripts", "docs", "tests/plugins"):
        if os.path.isdir(folder) and not [name for name in os.listdir(folder) if name != "__pycache__"]:
            shutil.rmtree(folder)


def parent_arguments() -> list[str]:
    """The command line of the process that runs this hook (cookiecutter or cruft); [] where it cannot be read."""
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as handle:
            return handle.read().decode(errors="replace").split("\0")
    except OSError:
        pass
    try:  # macOS and the BSDs have no /proc
        done = subprocess.run(["ps", "-o", "args=", "-p", str(os.getppid())], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    return done.stdout.split()


def creating() -> bool:
    """Whether this bake is the user's new project: plain cookiecutter, or `cruft create` (cruft sets _commit),
    not one of the scratch bakes `cruft update` and `cruft diff` compare, which must stay plain files."""
    return "_commit" not in ANSWERS or "create" in parent_arguments()


def print_next_steps() -> None:
    """What to run first, as the generated README's Quick start says it."""
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
        '  python -m pytest -m "not slow" -n auto    # the device-consistency suite\'s quick tier\n'
        f"  python -m {ANSWERS['package_name']}.devkit          # what devices this machine has\n"
        "runs/latest is the newest run made without --out; a run with --out DIR leaves it alone: "
        "use DIR/best.pt.\n"
    )


def main() -> int:
    new_project = creating()
    if new_project and "_commit" not in ANSWERS:  # under cruft create, cruft writes .cruft.json itself
        record_template_commit()
    if new_project and git("rev-parse", "--is-inside-work-tree") is None:  # not in a repository the user has
        git("init", "--quiet")  # the README's first steps (pre-commit install) and `cruft update` need a repository
    for path, disabled in REMOVE_PATHS.items():
        if disabled:
            remove(path)
    remove_empty_folders()
    if new_project:
        print_next_steps()
    return 0


if __name__ == "__main__":
    sys.exit(main())
