"""The package's shape: no import cycles, and the checkpoint layout has one home."""

import ast
from pathlib import Path

import {{ cookiecutter.package_name }} as package

PACKAGE_DIR = Path(package.__file__).resolve().parent
STANDALONE = ("checkpoint", "devices")  # copied into other projects on their own


def package_imports(module: str) -> set[str]:
    """The package modules `module` imports, at the top or inside functions."""
    tree = ast.parse((PACKAGE_DIR / f"{module}.py").read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == package.__name__:
            found.update(alias.name for alias in node.names)
    return found & {path.stem for path in PACKAGE_DIR.glob("*.py")}


def import_graph() -> dict[str, set[str]]:
    """Every package module and the package modules it imports."""
    return {path.stem: package_imports(path.stem) for path in PACKAGE_DIR.glob("*.py") if path.stem != "__init__"}


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


def test_the_package_has_no_import_cycle():
    """Modules import in one direction only; a shared piece lives in a third module."""
    assert find_cycle(import_graph()) is None, " -> ".join(find_cycle(import_graph()))


def test_the_cycle_finder_finds_a_cycle():
    """The check above can fail: a two-module loop is reported."""
    assert find_cycle({"outputs": {"plots"}, "plots": {"outputs"}}) in (["outputs", "plots", "outputs"],
                                                                       ["plots", "outputs", "plots"])


def test_copyable_modules_import_nothing_from_the_package():
    """checkpoint.py and devices.py stand alone when copied into another project."""
    graph = import_graph()
    assert {module: graph[module] for module in STANDALONE} == {module: set() for module in STANDALONE}


def test_model_code_does_not_know_about_checkpoints():
    """Turning a checkpoint into a model is run_checkpoint.py's job, not model.py's."""
    assert not {"checkpoint", "run_checkpoint"} & import_graph()["model"]


def test_only_run_checkpoint_and_the_clis_read_training_checkpoints():
    """No other module opens a checkpoint: the layout has one home."""
    readers = {module for module, imports in import_graph().items() if "run_checkpoint" in imports}
    assert readers <= {"run_checkpoint"}
