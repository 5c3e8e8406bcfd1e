"""What each answer bakes: product lines and code lines, files, the largest module, and the layering rules.

    python scripts/bake_report.py            # every answer bake; exit 1 when a rule is broken

Product code is the generated package and the CLIs at the project root (train.py, evaluate.py, ...); the
device lint, tests and benchmarks are not product. A code line holds a Python token other than a comment
or a docstring. Rules, checked in every bake:
- no import arrow runs upward in LAYERS (the device kit imports nothing outside itself, data/ nothing from
  training/, training/ nothing from the flags or the CLIs; nothing imports a CLI);
- every module is imported by another one of the bake (or is a CLI, a package's __init__ or __main__;
  a plugins/ folder's __init__ imports what the folder holds): a bake carries no module its answers cannot reach;
- every top-level function and class is named somewhere else in the bake's product code: none is left that
  only tests (or nothing) call;
- no module over MAX_MODULE lines, no function over MAX_FUNCTION lines or MAX_PARAMETERS parameters,
  train.py at most MAX_TRAIN lines.
The default bake's code lines are printed against their budget (MAX_DEFAULT_CODE, issue 41's goal).
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import subprocess
import sys
import tempfile
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[1]
# An answer the pre-gen hook refuses alone, baked with the one it needs (scheduler=slurm runs torchrun).
NEEDS = {("scheduler", "slurm"): {"multi_gpu": "ddp"}}
CLIS = ("train.py", "evaluate.py", "predict.py", "export.py")
MAX_MODULE, MAX_FUNCTION, MAX_PARAMETERS, MAX_TRAIN, MAX_DEFAULT_CODE = 300, 50, 8, 120, 3000
# Lower layers never import higher ones. Paths inside the package; the longest matching prefix decides.
LAYERS = {
    "devkit": 0, "deferred": 0,
    "errors": 1, "config": 1, "processes": 1, "hooks": 1, "files": 1, "signing": 1,
    "data": 2, "backbones": 2, "backbones_timm": 2,
    "model": 3, "task": 3, "outputs": 3, "plots": 3, "model_files": 3,
    "pt2_check": 3, "onnx_check": 3,
    "training": 4,
    "plugins": 5, "model_folder": 5,  # an exported folder is read as a training checkpoint is (run_state.check)
    "settings": 6, "config_file": 6, "cli": 6,
    "": 6,  # any other module at the package's top
}
CLI_LAYER = 7


@dataclass
class Module:
    """One product file: where it is, its size, what it imports."""

    name: str  # dotted, relative to the project root: image_classifier.data.folders, train
    path: Path
    source: str
    lines: int
    code: int
    imports: set[str] = field(default_factory=set)


def code_lines(source: str) -> int:
    """Lines holding a token that is not a comment or part of a docstring (a string statement on its own)."""
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            docstrings.update(range(node.lineno, node.end_lineno + 1))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skip:
            lines.update(line for line in range(token.start[0], token.end[0] + 1) if line not in docstrings)
    return len(lines)


def module_name(project: Path, path: Path) -> str:
    parts = list(path.relative_to(project).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def deferred_import(node: ast.AST, package: str) -> str | None:
    """The module a `deferred("name")` or `deferred(".name", __package__)` call names (the package's deferred.py)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "deferred"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return None
    name = node.args[0].value
    level = len(name) - len(name.lstrip("."))
    if not level:
        return name
    anchor = package.split(".")[: len(package.split(".")) - level + 1]
    return ".".join([*anchor, name[level:]] if name[level:] else anchor)


def lazy_names(node: ast.AST, module: Module, package: str) -> list[str]:
    """The submodules a package's __init__ names in `_HOME` (name -> module), whose names it loads when first read
    (PEP 562's module __getattr__: devkit/, data/)."""
    if not (module.path.name == "__init__.py" and isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
            and any(isinstance(target, ast.Name) and target.id == "_HOME" for target in node.targets)):
        return []
    return sorted({f"{package}.{value.value}" for value in node.value.values if isinstance(value, ast.Constant)})


def imported(module: Module, known: set[str]) -> set[str]:
    """The project modules `module` imports (absolute and relative imports, `from pkg import module` too)."""
    package = module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(module.source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            submodules = [f"{base}.{alias.name}" for alias in node.names]
            names = submodules if all(name in known for name in submodules) else [base, *submodules]
        elif deferred := deferred_import(node, package):  # deferred(".loop", __package__): an import, made later
            names = [deferred]
        elif lazy := lazy_names(node, module, package):  # a package __init__'s names, loaded when first read
            names = lazy
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module.name:
                found.add(name)
    return found


def layer(name: str, package: str) -> int:
    if not name.startswith(package):
        return CLI_LAYER
    inner = name[len(package) + 1:]
    if not inner:
        return 0  # the package's __init__: its name and version, importing nothing
    prefixes = sorted((prefix for prefix in LAYERS if inner == prefix or inner.startswith(prefix + ".")),
                      key=len, reverse=True)
    return LAYERS[prefixes[0]] if prefixes else LAYERS[""]


def read_project(project: Path, package: str) -> dict[str, Module]:
    paths = sorted((project / package).rglob("*.py")) + [project / name for name in CLIS if (project / name).exists()]
    modules = {}
    for path in paths:
        source = path.read_text(encoding="utf-8")
        modules[module_name(project, path)] = Module(module_name(project, path), path, source,
                                                     len(source.splitlines()), code_lines(source))
    for module in modules.values():
        module.imports = imported(module, set(modules))
        if module.path.name == "__init__.py" and module.name.rpartition(".")[2] == "plugins":
            module.imports |= {name for name in modules if name.startswith(module.name + ".")
                               and name.count(".") == module.name.count(".") + 1}  # what the folder holds
    return modules


def long_functions(module: Module) -> list[str]:
    problems = []
    for node in ast.walk(ast.parse(module.source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            arguments = node.args
            count = len(arguments.posonlyargs + arguments.args + arguments.kwonlyargs)
            count -= bool(arguments.args) and arguments.args[0].arg in ("self", "cls")
            if length > MAX_FUNCTION:
                problems.append(f"{module.name}.{node.name}: {length} lines (at most {MAX_FUNCTION})")
            if count > MAX_PARAMETERS:
                problems.append(f"{module.name}.{node.name}: {count} parameters (at most {MAX_PARAMETERS})")
    return problems


def unnamed(modules: dict[str, Module]) -> list[str]:
    """Top-level functions and classes that no other place in the bake's product code names."""
    everything = "\n".join(module.source for module in modules.values())
    problems = []
    for name, module in modules.items():
        for node in ast.parse(module.source).body:
            defines = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            if defines and not node.name.startswith("__") and len(re.findall(rf"\b{node.name}\b", everything)) < 2:
                problems.append(f"unused: {name}.{node.name} is named nowhere else in this bake's product code")
    return problems


def check(project: Path, package: str) -> tuple[dict, list[str]]:
    """The bake's figures and every broken rule."""
    modules = read_project(project, package)
    problems = []
    for module in modules.values():
        for target in sorted(module.imports):
            if layer(target, package) > layer(module.name, package):
                problems.append(f"upward import: {module.name} -> {target}")
        if module.lines > MAX_MODULE:
            problems.append(f"{module.name}: {module.lines} lines (at most {MAX_MODULE})")
        problems += long_functions(module)
    reached = set().union(*(module.imports for module in modules.values()))
    for name, module in modules.items():
        entry = module.path.name in ("__init__.py", "__main__.py") or layer(name, package) == CLI_LAYER
        if not entry and name not in reached:
            problems.append(f"unreachable: {name} is imported by nothing in this bake")
    problems += unnamed(modules)
    if modules.get("train") and modules["train"].lines > MAX_TRAIN:
        problems.append(f"train.py: {modules['train'].lines} lines (at most {MAX_TRAIN})")
    code = sum(module.code for module in modules.values())
    largest = max(modules.values(), key=lambda module: module.lines)
    figures = {"files": len(modules), "lines": sum(module.lines for module in modules.values()), "code": code,
               "largest": f"{largest.path.relative_to(project)} ({largest.lines})"}
    return figures, problems


def answer_bakes() -> list[dict[str, str]]:
    """The defaults, then one bake per non-default value of every choice but the licence (it changes no code)."""
    context = json.loads((TEMPLATE / "cookiecutter.json").read_text(encoding="utf-8"))
    choices = {key: value for key, value in context.items() if isinstance(value, list) and not key.startswith("_")}
    return [{}] + [{**NEEDS.get((key, value), {}), key: value}
                   for key, values in choices.items() if key != "license" for value in values[1:]]


def bake(answers: dict[str, str], folder: Path) -> Path:
    """The template baked with `answers` into `folder` (cookiecutter's own CLI; its hook's lines kept quiet)."""
    subprocess.run([sys.executable, "-m", "cookiecutter", "--no-input", str(TEMPLATE), "-o", str(folder),
                    *(f"{key}={value}" for key, value in answers.items())], check=True, capture_output=True)
    return next(path for path in folder.iterdir() if path.is_dir())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, help="report on this baked project only (no bakes)")
    args = parser.parse_args(argv)
    failed = False
    with tempfile.TemporaryDirectory() as scratch:
        plans = [("given", {}, args.project)] if args.project else [
            (",".join(f"{k}={v}" for k, v in answers.items()) or "defaults", answers, None)
            for answers in answer_bakes()]
        print(f"{'bake':34} {'files':>5} {'lines':>6} {'code':>5}  largest module")
        for index, (label, answers, project) in enumerate(plans):
            project = project or bake(answers, Path(scratch) / str(index))
            package = next(p.parent.name for p in sorted(project.glob("*/config.py")))
            figures, problems = check(project, package)
            budget = f"  (budget {MAX_DEFAULT_CODE})" if not answers and not args.project else ""
            print(f"{label:34} {figures['files']:>5} {figures['lines']:>6} {figures['code']:>5}  {figures['largest']}"
                  f"{budget}")
            for problem in problems:
                print(f"  {problem}")
            failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
