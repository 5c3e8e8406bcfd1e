"""Round 16 of the device lint: what held-out 14's false alarms and misses showed (after that set was scored).

Legacy CUDA tensor types made through an alias of the `torch.cuda` module (CodeBERT's `self.tt = torch.cuda`) are
DEV010 like the written-out type."""

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


BEAM = """
    import torch

    class Beam:
        def __init__(self, size):
            self.tt = torch.cuda
            self.scores = self.tt.FloatTensor(size).zero_()
            self.next_ys = [self.tt.LongTensor(size).fill_(0)]

        def advance(self):
            return self.tt.LongTensor(self.next_ys[-1])

    beam = Beam(3)
    beam.advance()
"""


def test_a_legacy_type_through_an_attribute_alias_of_torch_cuda_is_dev010(tmp_path: Path) -> None:
    """`self.tt = torch.cuda` then `self.tt.FloatTensor(size)`: a CUDA tensor, as if written out (CodeBERT)."""
    assert tree_codes(tmp_path, {"beam.py": BEAM}) == [("beam.py", 7, "DEV010"), ("beam.py", 8, "DEV010"),
                                                       ("beam.py", 11, "DEV010")]


NAME_ALIASES = """
    import torch
    from torch import cuda as tc
    import torch.cuda as cu

    tt = torch.cuda
    a = tt.FloatTensor(2)
    b = tc.LongTensor(2)
    c = cu.ByteTensor(2)
"""


def test_a_legacy_type_through_a_name_or_import_alias_of_torch_cuda_is_dev010(tmp_path: Path) -> None:
    """`tt = torch.cuda`, `from torch import cuda as tc`, `import torch.cuda as cu`: each alias names the module."""
    assert tree_codes(tmp_path, {"make.py": NAME_ALIASES}) == [("make.py", 7, "DEV010"), ("make.py", 8, "DEV010"),
                                                               ("make.py", 9, "DEV010")]


NOT_CUDA_ALIASES = """
    import torch

    class Beam:
        def __init__(self, size):
            self.tt = torch
            self.scores = self.tt.FloatTensor(size)
            if torch.cuda.is_available():
                tt = torch.cuda
                self.ys = tt.LongTensor(size)
            self.ok = isinstance(self.scores, tt.FloatTensor)

    Beam(3)
"""


def test_an_alias_of_torch_itself_or_a_guarded_or_type_test_use_is_not_dev010(tmp_path: Path) -> None:
    """`self.tt = torch` makes CPU tensors; a guarded use or a type test through a CUDA alias makes none off CUDA."""
    assert tree_codes(tmp_path, {"beam.py": NOT_CUDA_ALIASES}) == []


LOCAL_FLAG = """
    import torch

    def train_stage(path):
        load_model = False
        model = torch.nn.Linear(2, 2)
        if load_model is True:
            model.load_state_dict(torch.load(path))
        if load_model == True:
            model.load_state_dict(torch.load(path))
        if load_model:
            model.load_state_dict(torch.load(path))
        return model

    def other_stage(path):
        load_model = False
        if load_model is True:
            torch.load(path)

    resume = None
    if resume is not None:
        torch.load(resume)
    train_stage("a.pth")
    other_stage("b.pth")
"""


def test_a_name_bound_once_to_a_falsy_constant_in_its_function_makes_its_tests_constant_false(tmp_path: Path) -> None:
    """`load_model = False` then `if load_model is True:` in each of several functions (LapIRN): never runs."""
    assert tree_codes(tmp_path, {"train.py": LOCAL_FLAG}) == []


REBOUND_FLAGS = """
    import argparse
    import torch

    def rebound(path, fast):
        load_model = False
        if fast:
            load_model = True
        if load_model is True:
            torch.load(path)

    def parameter(path, load_model=False):
        if load_model:
            torch.load(path)

    def reads_global(path):
        if resume:
            torch.load(path)

    def sets_global():
        global resume
        resume = True

    resume = False
    parser = argparse.ArgumentParser()
    parser.add_argument("--load", action="store_true")
    load = False
    load = parser.parse_args().load
    if load:
        torch.load("c.pth")
    rebound("a.pth", True)
    parameter("b.pth", load_model=True)
    sets_global()
    reads_global("d.pth")
"""


def test_a_rebound_name_a_parameter_a_global_set_elsewhere_or_an_option_is_not_constant(tmp_path: Path) -> None:
    """A second store, a parameter, a global a function rebinds, a name rebound from the command line: all run."""
    found = [(line, code) for _, line, code in tree_codes(tmp_path, {"train.py": REBOUND_FLAGS})]
    assert [line for line, code in found if code == "DEV004"] == [10, 14, 18, 30]


NESTED_STORE = """
    import torch

    flag = True

    def outer(path):
        def inner():
            flag = False
            return flag
        inner()
        if flag:
            torch.load(path)

    outer("a.pth")
"""


def test_a_nested_functions_own_binding_does_not_switch_off_the_enclosing_read(tmp_path: Path) -> None:
    """`flag = False` inside a nested function is that function's local: the outer `if flag:` reads the global."""
    assert [code for _, _, code in tree_codes(tmp_path, {"train.py": NESTED_STORE})].count("DEV004") == 1
