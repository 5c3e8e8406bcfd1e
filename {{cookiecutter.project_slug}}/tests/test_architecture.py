"""The package's shape: the device kit stands alone, the lint is a tool outside it, no import cycles."""

import ast
import subprocess
import sys
from pathlib import Path

import {{ cookiecutter.package_name }} as package

PACKAGE_DIR = Path(package.__file__).resolve().parent
PROJECT_ROOT = PACKAGE_DIR.parent
CLIS = {"train", "evaluate", "predict", "export"}  # the scripts at the project root


def module_name(path: Path) -> str:
    """'devkit.resolve' for <package>/devkit/resolve.py, 'data' for <package>/data/__init__.py."""
    parts = path.relative_to(PACKAGE_DIR).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path) -> set[str]:
    """Every module `path` imports, absolute, with package-relative imports resolved (top level and in functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inside = PACKAGE_DIR in path.parents
    name = module_name(path).split(".") if inside else []
    here = [part for part in (name if path.name == "__init__.py" else name[:-1]) if part]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = [package.__name__, *here[:len(here) - (node.level - 1)]]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found.update(f"{module}.{alias.name}" for alias in node.names)  # `from . import loop` names a module
            folder = PACKAGE_DIR.parent.joinpath(*module.split("."))
            if not all((folder / f"{alias.name}.py").is_file() or (folder / alias.name).is_dir()
                       for alias in node.names):
                found.add(module)  # a name the package itself defines: its __init__ runs (else only the submodules)
        elif deferred := deferred_name(node):  # deferred(".loop", __package__): an import made on first use
            level = len(deferred) - len(deferred.lstrip("."))
            base = [package.__name__, *here[:len(here) - (level - 1)]] if level else []
            found.add(".".join([*base, deferred[level:]]))
    return found


def deferred_name(node: ast.AST) -> str | None:
    """The module name a `deferred("name"[, __package__])` call (the package's deferred.py) is given, else None."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "deferred" and node.args
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return node.args[0].value
    return None


def import_graph() -> dict[str, set[str]]:
    """Every package module and the package modules it imports (by dotted name under the package)."""
    paths = {module_name(path): path for path in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in path.parts}
    prefix = package.__name__ + "."
    graph = {}
    for name, path in paths.items():
        modules = {imported[len(prefix):] for imported in imported_names(path) if imported.startswith(prefix)}
        graph[name] = {module for module in modules if module in paths and module != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules, or None."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for child in sorted(graph.get(node, ())):
            if state.get(child) == "open":
                return path[path.index(child):] + [child] if child in path else [node, child]
            if child not in state and (cycle := visit(child, path + [child])):
                return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [start])):
            return cycle
    return None


def outside(module: str, folder: str) -> bool:
    """Whether a package module lies outside `folder` (a subpackage such as 'devkit')."""
    return module != folder and not module.startswith(folder + ".")


def test_the_package_has_no_import_cycle():
    """Modules import in one direction only; a shared piece lives in a third module (packages' __init__ aside)."""
    graph = {name: {child for child in children if child not in {"data", "devkit", "training"}}
             for name, children in import_graph().items()}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_finder_finds_a_cycle():
    """The check above can fail: a two-module loop is reported."""
    assert find_cycle({"outputs": {"plots"}, "plots": {"outputs"}}) in (["outputs", "plots", "outputs"],
                                                                       ["plots", "outputs", "plots"])


def test_the_device_kit_imports_nothing_outside_itself():
    """devkit/ is copied whole into other projects: torch, the standard library and its own modules only."""
    for path in (PACKAGE_DIR / "devkit").glob("*.py"):
        for imported in imported_names(path):
            top = imported.split(".")[0]
            if top == package.__name__:
                assert not outside(imported[len(package.__name__) + 1:], "devkit"), f"{path.name} imports {imported}"
            else:
                assert top in sys.stdlib_module_names or top in {"torch", "__future__"}, f"{path.name} imports {top}"


def test_the_device_lint_is_a_standard_library_tool_outside_the_package():
    """tools/devicelint.py imports only the standard library, and no module of the package is a lint."""
    lint = PROJECT_ROOT / "tools" / "devicelint.py"
    tops = {name.split(".")[0] for name in imported_names(lint)}
    assert tops <= set(sys.stdlib_module_names) | {"__future__"}, tops - set(sys.stdlib_module_names)
    assert not list(PACKAGE_DIR.rglob("devicelint.py"))


def test_no_module_of_the_package_imports_a_cli():
    """train.py, evaluate.py, predict.py and export.py wire the package together; the package never imports them."""
    for path in PACKAGE_DIR.rglob("*.py"):
        assert not {name.split(".")[0] for name in imported_names(path)} & CLIS, path


def test_model_code_does_not_know_about_checkpoints():
    """Turning a checkpoint into a model is training/run_state.py's job, not model.py's."""
    assert not {"devkit.checkpoint", "training.run_state"} & import_graph()["model"]


def test_only_the_training_package_reads_training_checkpoints():
    """The checkpoint layout has one home (training/run_state.py); outside training/, only the CLIs, startup.py
    (which settles a resumed run's settings from its checkpoint) and model_folder.py (an exported folder, checked
    as a checkpoint is) read it."""
    readers = {module for module, imports in import_graph().items() if "training.run_state" in imports}
    assert all(not outside(module, "training") or module in ("startup", "model_folder") for module in readers), readers


def _compares_an_argmax(node: ast.AST) -> bool:
    """`x.argmax(...) == y` (either side): counting right predictions, a metric."""
    return isinstance(node, ast.Compare) and any(
        isinstance(side, ast.Call) and isinstance(side.func, ast.Attribute) and side.func.attr == "argmax"
        for side in (node.left, *node.comparators))


def test_only_the_task_module_counts_right_predictions():
    """The task is defined once (task.py): no other module of the package counts hits itself, so a change there
    (another notion of a right prediction) reaches training's and validation's accuracy alike."""
    counting = [f"{path.relative_to(PACKAGE_DIR)}:{node.lineno}" for path in PACKAGE_DIR.rglob("*.py")
                if path.name != "task.py" for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                if _compares_an_argmax(node)]
    assert not counting, counting


EXPORT_FORMATS = ("model_folder", "model_files", "pt2_check")  # what export.py writes; predict.py and evaluate.py read


def test_the_training_checkpoint_reader_imports_no_export_format():
    """train.py's path reads training checkpoints only: run_state.py and what it imports, directly or not, import
    none of the exported formats (they build on the checkpoint, never the reverse)."""
    graph, seen, todo = import_graph(), set(), ["training.run_state"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.get(module, ()))
    assert not seen & set(EXPORT_FORMATS), sorted(seen & set(EXPORT_FORMATS))


# What runs before the flags are checked: the CLIs' top level, the flags' parsers, the plugins' settings and flags
FLAG_STEP = """
import sys
import train, evaluate, predict, export
from {{ cookiecutter.package_name }} import settings
from {{ cookiecutter.package_name }}.data import check
from {{ cookiecutter.package_name }}.plugins import load_plugins
for parser in (settings.get_args_parser(load_plugins()), evaluate.get_args_parser(), predict.get_args_parser(),
               export.get_args_parser(), check.get_args_parser()):
    parser.format_help()
print(" ".join(name for name in ("torch", "torchvision", "matplotlib") if name in sys.modules))
"""


def test_the_flag_step_imports_no_torch():
    """Flags first, then torch (ARCHITECTURE.md): importing the commands and building every parser, with this
    project's plugins and their settings, loads neither torch nor torchvision; the run imports them later."""
    result = subprocess.run([sys.executable, "-c", FLAG_STEP], cwd=PROJECT_ROOT, capture_output=True, text=True,
                            timeout=120, check=True)
    assert result.stdout.strip() == ""


def test_deferred_modules_count_as_imports_here():
    """A module named by deferred() is an import for the rules above (layers, cycles, who reads checkpoints)."""
    graph = import_graph()
    assert "training.recipe" in graph["settings"] and "training.run_state" not in graph["settings"]
