"""The hooks: bad answers are refused with one ERROR line and nothing left behind; answers never run as code.

Hooks are tested two ways: rendered and run on their own (exact stderr, every rule, even ones
cookiecutter's own checks shadow), and end to end through `python -m cookiecutter` (exit code,
stderr and the output folder as a user sees them).
"""

from __future__ import annotations

import ast
import json
import shutil
import sys
from pathlib import Path

import pytest
from cookiecutter.environment import StrictEnvironment
from helpers import CONTEXT, DEFAULT_PACKAGE, TEMPLATE, cookiecutter_cli, describe, run

BAD_PACKAGE_NAMES = [
    "my-pkg", "1abc", "café", "", "has space",  # not ASCII identifiers
    "class", "match", "None",  # keywords, soft keywords included
    "json", "os", "random", "typing",  # the standard library
    "torch", "torchvision", "numpy", "tqdm", "Torch", "PIL",  # dependencies, any case
    "tests", "train",  # files of the generated project
]
BAD_CHOICES = {
    "backbone": "vgg16",
    "pretrained": "maybe",
    "default_device": "gpu",
    "default_precision": "fp8",
    "multi_gpu": "fsdp",
    "license": "GPL-3.0",
}

# Payloads that would run code if an answer were pasted into Python source. Each writes the file
# named by $PWNED_FILE (an absolute path, so it is found whatever the hook's working directory).
TOUCH_DQ = '__import__("pathlib").Path(__import__("os").environ["PWNED_FILE"]).touch()'
TOUCH_SQ = TOUCH_DQ.replace('"', "'")
PAYLOADS = {
    "triple-double": f'"""+{TOUCH_DQ}+"""',
    "triple-single": f"'''+{TOUCH_SQ}+'''",
    "escaped-double": f'\\"+{TOUCH_DQ}+\\"',
    "double": f'"+{TOUCH_SQ}+"',
    "single-statement": f"');{TOUCH_SQ};('",
    "newline": f"x\n{TOUCH_DQ}\n",
    "backslash-N": "Cat\\N sorter",
    "trailing-backslash": "Cat sorter\\",
}
FREE_TEXT = ["project_name", "project_slug", "package_name", "description", "author"]
# End to end, project_slug payloads are refused exactly like package_name ones; the hook test covers them.
CLI_FREE_TEXT = ["project_name", "package_name", "description", "author"]


def base_answers(**overrides: str) -> dict:
    """A cookiecutter context as the hooks receive it: defaults resolved, derived names filled in."""
    answers = {k: (v[0] if isinstance(v, list) else v) for k, v in CONTEXT.items()}
    answers.update(project_slug="image-classifier", package_name=DEFAULT_PACKAGE)
    answers.update(_template=str(TEMPLATE), _output_dir="/tmp/out", _repo_dir=str(TEMPLATE), _checkout=None)
    answers.update(overrides)
    return answers


def run_hook(tmp_path: Path, name: str, answers: dict, under: str | None = None):
    """Render hooks/<name>.py the way cookiecutter does and run it in a fresh project folder; `under` names the
    cruft command (create, update) whose process runs it, as cruft's does."""
    env = StrictEnvironment(context={"cookiecutter": answers}, keep_trailing_newline=True)
    source = (TEMPLATE / "hooks" / f"{name}.py").read_text(encoding="utf-8")
    script = tmp_path / f"{name}.py"
    script.write_text(env.from_string(source).render(cookiecutter=answers), encoding="utf-8")
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    hook = [sys.executable, str(script)]
    if under:  # a parent process whose command line reads like `cruft update ...`
        hook = [sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[2:]))", under, *hook]
    return run(hook, cwd=project, timeout=60, PWNED_FILE=str(tmp_path / "PWNED"))


def hook_errors(stderr: str) -> list[str]:
    """The ERROR lines our hook wrote, without cookiecutter's own 'Stopping generation' line."""
    return [
        line for line in stderr.splitlines()
        if line.startswith("ERROR:") and not line.startswith("ERROR: Stopping generation")
    ]


def leftovers(tmp_path: Path) -> list[Path]:
    """Whatever a refused bake left in the output folder."""
    out = tmp_path / "out"
    return sorted(out.iterdir()) if out.exists() else []


def pwned(tmp_path: Path) -> list[Path]:
    """Any file a payload managed to create: the absolute marker, or a PWNED anywhere below tmp_path."""
    return sorted(p for p in tmp_path.rglob("*PWNED*"))


# --- pre-gen hook on its own -----------------------------------------------------------------


def test_pre_gen_accepts_the_defaults(tmp_path):
    """Default answers pass the pre-gen hook silently with exit code 0."""
    proc = run_hook(tmp_path, "pre_gen_project", base_answers())
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


@pytest.mark.parametrize("name", BAD_PACKAGE_NAMES)
def test_pre_gen_refuses_bad_package_name_in_one_line(tmp_path, name):
    """A package name that is no identifier, a keyword, stdlib or a dependency: exit 1, one ERROR line."""
    proc = run_hook(tmp_path, "pre_gen_project", base_answers(package_name=name))
    assert proc.returncode == 1, describe(proc)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERROR: package_name"), proc.stderr


@pytest.mark.parametrize("slug", ["My Project", "-leading-dash", "", "a/b", "trailing\n"])
def test_pre_gen_refuses_bad_slug_in_one_line(tmp_path, slug):
    """A project_slug that is not lowercase letters, digits, '-' and '_': exit 1, one ERROR line."""
    proc = run_hook(tmp_path, "pre_gen_project", base_answers(project_slug=slug))
    assert proc.returncode == 1, describe(proc)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERROR: project_slug"), proc.stderr


@pytest.mark.parametrize(("var", "value"), BAD_CHOICES.items())
def test_pre_gen_refuses_unknown_choice_in_one_line(tmp_path, var, value):
    """A choice value outside cookiecutter.json (e.g. from a replay file): exit 1, one ERROR line."""
    proc = run_hook(tmp_path, "pre_gen_project", base_answers(**{var: value}))
    assert proc.returncode == 1, describe(proc)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ERROR: {var}") and value in lines[0], proc.stderr


def test_pre_gen_hook_choices_match_cookiecutter_json(tmp_path):
    """Every value cookiecutter.json offers is accepted by the hook (the two lists cannot drift)."""
    for var, values in CONTEXT.items():
        if isinstance(values, list):
            for value in values:
                needs = {"multi_gpu": "ddp"} if (var, value) == ("scheduler", "slurm") else {}
                proc = run_hook(tmp_path, "pre_gen_project", base_answers(**{var: value}, **needs))
                assert proc.returncode == 0, f"{var}={value}: {describe(proc)}"


@pytest.mark.parametrize("multi_gpu", ["none", "dp"])
def test_pre_gen_refuses_slurm_without_the_torchrun_it_starts(tmp_path, multi_gpu):
    """scheduler=slurm's batch script runs torchrun, which only the ddp answer brings: one ERROR line."""
    proc = run_hook(tmp_path, "pre_gen_project", base_answers(scheduler="slurm", multi_gpu=multi_gpu))
    assert proc.returncode == 1, describe(proc)
    assert proc.stderr.startswith("ERROR: scheduler 'slurm' needs multi_gpu 'ddp'"), proc.stderr


def test_pre_gen_reports_only_the_first_of_many_problems(tmp_path):
    """Several bad answers at once still give exactly one ERROR line."""
    answers = base_answers(package_name="torch", project_slug="Bad Slug", backbone="vgg16")
    proc = run_hook(tmp_path, "pre_gen_project", answers)
    assert proc.returncode == 1
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("ERROR: "), proc.stderr


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_hooks_read_answers_as_data(tmp_path, payload):
    """Both hooks, rendered with a code-injection payload in every free-text answer, run none of it."""
    answers = base_answers(**{field: payload for field in FREE_TEXT})
    pre = run_hook(tmp_path, "pre_gen_project", answers)
    post = run_hook(tmp_path, "post_gen_project", answers)
    assert not pwned(tmp_path), "a hook executed an answer"
    assert pre.returncode == 1 and len(pre.stderr.splitlines()) == 1, describe(pre)  # package_name refused
    assert post.returncode == 0, describe(post)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize(("under", "commit", "new_project"), [(None, None, True), ("create", "0" * 40, True),
                                                               ("update", "0" * 40, False), ("diff", "0" * 40, False)])
def test_the_post_gen_hook_makes_a_repository_and_says_what_next_only_for_a_new_project(tmp_path, under, commit,
                                                                                        new_project):
    """Plain cookiecutter and `cruft create` make the user's project: a git repository (cruft update needs one)
    and the next steps, printed once. The bakes `cruft update` and `cruft diff` compare in scratch folders must
    hold the template's files only and print nothing. Only plain cookiecutter gets .cruft.json from the hook (cruft
    sets _commit and writes its own)."""
    answers = base_answers(**({"_commit": commit} if commit else {}))
    project = tmp_path / "project"
    proc = run_hook(tmp_path, "post_gen_project", answers, under=under)
    assert proc.returncode == 0, describe(proc)
    assert (project / ".git").exists() is new_project
    assert (project / ".cruft.json").exists() is (commit is None)
    assert proc.stdout.count("Created ") == (1 if new_project else 0), proc.stdout


# --- end to end through the cookiecutter CLI -----------------------------------------------------


@pytest.mark.parametrize("name", ["my-pkg", "1abc", "café", "class", "match", "json", "os", "random",
                                  "torch", "torchvision", "numpy", "tqdm"])
def test_cli_refuses_bad_package_name(tmp_path, cli_config, name):
    """`cookiecutter --no-input package_name=<bad>` exits non-zero, says why once, and leaves no folder."""
    proc = cookiecutter_cli(tmp_path, cli_config, f"package_name={name}")
    assert proc.returncode != 0, describe(proc)
    errors = hook_errors(proc.stderr)
    assert len(errors) == 1 and errors[0].startswith("ERROR: package_name"), proc.stderr
    assert repr(name) in errors[0]
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("project_name", ["!!!", "2048 Game"])
def test_cli_refuses_project_name_without_a_usable_package(tmp_path, cli_config, project_name):
    """A project name whose derived package is empty or starts with a digit is refused, nothing left behind."""
    proc = cookiecutter_cli(tmp_path, cli_config, f"project_name={project_name}")
    assert proc.returncode != 0, describe(proc)
    assert len(hook_errors(proc.stderr)) == 1, proc.stderr
    assert leftovers(tmp_path) == []
    assert (tmp_path / "cookiecutter-config.yaml").is_file(), "the refusal removed files it did not create"


def test_cli_refuses_bad_choice_value(tmp_path, cli_config):
    """A value outside a choice's list is refused before anything is written, naming the bad value."""
    proc = cookiecutter_cli(tmp_path, cli_config, "backbone=vgg16")
    assert proc.returncode != 0, describe(proc)
    assert "vgg16" in proc.stderr
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
@pytest.mark.parametrize("field", CLI_FREE_TEXT)
def test_hostile_answer_is_inert(tmp_path, cli_config, field, payload):
    """A hostile answer either bakes as plain text (project compiles, importing runs nothing) or is refused cleanly."""
    proc = cookiecutter_cli(tmp_path, cli_config, f"{field}={payload}")
    assert not pwned(tmp_path), "baking executed the answer"
    if proc.returncode != 0:
        assert len(hook_errors(proc.stderr)) == 1, proc.stderr
        assert leftovers(tmp_path) == []
        return
    (project,) = leftovers(tmp_path)
    trees = {path: ast.parse(path.read_text(encoding="utf-8"), str(path))  # SyntaxError fails the test
             for path in sorted(project.rglob("*.py"))}
    (package,) = [p.parent.name for p in project.glob("*/__init__.py")]
    probe = f"import json, {package} as p; print(json.dumps(p.PROJECT_NAME))"
    imported = run([sys.executable, "-c", probe], cwd=project, timeout=120, PWNED_FILE=str(tmp_path / "PWNED"))
    assert not pwned(tmp_path), "importing the baked package executed the answer"
    assert imported.returncode == 0, describe(imported)
    for path, tree in trees.items():
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "__import__"]
        assert not calls, f"{path.relative_to(project)} turned the answer into code"
    if field == "project_name":
        assert json.loads(imported.stdout) == payload, "the project name did not survive as text"
