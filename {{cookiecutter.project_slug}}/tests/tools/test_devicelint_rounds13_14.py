"""Rounds 13 and 14 of the device lint: reachability and flags as held-out 11 showed them, then what held-out 12's
misses and false alarms showed (round 14, after that set was scored).

A `test_*` function is a test runner's entry point only in a file the runner collects; a module a registry loads by
a computed name (`importlib.import_module("models." + name)`) has its classes used though nothing names them; an
accelerator flag read from a config mapping (`cfg["use_cuda"]`) is a wish, not an availability check. Round 14: a
DataParallel subclass wraps like DataParallel; a file that mixes tabs and spaces in its indentation is read as Python
2 read it and checked; a branch under a constant-false test never runs."""

from __future__ import annotations

import textwrap
from pathlib import Path

from lint_trees import CHECKED, tree_codes

import devicelint  # tools/devicelint.py: pytest puts tools/ on sys.path (pyproject.toml)

TRAIN_WITH_DEAD_TEST = """
    import torch

    def test_partial_epoch(model, x):
        return model(x.cuda())

    def train_epoch(model, x):
        return model(x)

    if __name__ == "__main__":
        train_epoch(torch.nn.Linear(2, 2), torch.zeros(1, 2))
    """


def test_a_test_named_function_nothing_calls_in_a_script_is_unreached(tmp_path: Path) -> None:
    """graph-generation's `train.py` `test_vae_partial_epoch`: pytest does not collect `train.py`, so a `test*`
    function there runs only where something calls it; nothing does."""
    assert tree_codes(tmp_path, {"train.py": TRAIN_WITH_DEAD_TEST}) == []


def test_a_test_function_in_a_collected_file_is_still_an_entry_point(tmp_path: Path) -> None:
    """The same function in `test_train.py` (pytest collects it) or in a file that imports unittest is run by a
    test runner: its `.cuda()` is reported."""
    assert tree_codes(tmp_path / "a", {"test_train.py": TRAIN_WITH_DEAD_TEST}) == [("test_train.py", 5, "DEV001")]
    unittest_file = "import unittest\n" + textwrap.dedent(TRAIN_WITH_DEAD_TEST)
    assert tree_codes(tmp_path / "b", {"checks.py": unittest_file}) == [("checks.py", 6, "DEV001")]


REGISTRY = {
    "models/__init__.py": """
        import importlib

        def find_model(name):
            module_name = "models." + name + "_model"
            lib = importlib.import_module(module_name)
            for key, cls in lib.__dict__.items():
                if key.lower() == name.lower() + "model":
                    return cls
        """,
    "models/pix2pix_model.py": """
        import torch

        class Pix2PixModel:
            def loss(self, x):
                return x.type(torch.cuda.FloatTensor).mean()
        """,
    "train.py": """
        from models import find_model

        model = find_model("pix2pix")()
        print(model.loss(1))
        """,
}


def test_a_class_a_registry_imports_by_a_computed_name_is_reached(tmp_path: Path) -> None:
    """colorization-pytorch's `create_model`: `importlib.import_module("models." + name + "_model")` and a search of
    the module's `__dict__` reach `Pix2PixModel`, whose name appears nowhere; its CUDA tensor casts are reported
    (they were pruned as unreached code, 26 misses)."""
    assert tree_codes(tmp_path, REGISTRY) == [("models/pix2pix_model.py", 6, "DEV010")]


def test_a_module_outside_the_registrys_package_is_still_pruned(tmp_path: Path) -> None:
    """The registry's prefix names the package it loads from: an unused class in another folder stays unreached."""
    files = dict(REGISTRY, **{"tools/old_model.py": REGISTRY["models/pix2pix_model.py"]})
    assert tree_codes(tmp_path, files) == [("models/pix2pix_model.py", 6, "DEV010")]


CONFIG_FLAG = {
    "training.py": """
        import torch
        import yaml

        class Manager:
            def __init__(self, model, config):
                train_config = config["training"]
                self.use_cuda = train_config["use_cuda"]
                self.model = model
                if self.use_cuda:
                    self.model.cuda()

        if __name__ == "__main__":
            Manager(torch.nn.Linear(2, 2), yaml.safe_load(open("configs/sign.yaml")))
        """,
    "batch.py": """
        class Batch:
            def __init__(self, x, use_cuda=False):
                self.x = x
                if use_cuda:
                    self.x = x.cuda()
        """,
    "loop.py": """
        from batch import Batch

        def run(manager, x):
            return Batch(x, use_cuda=manager.use_cuda)
        """,
}


def test_a_flag_read_from_a_config_mapping_guards_nothing(tmp_path: Path) -> None:
    """slt's `self.use_cuda = train_config["use_cuda"]` (`use_cuda: true` in the shipped YAML) and the `Batch` that
    is passed it: nothing checks availability, so the `.cuda()` calls under `if use_cuda:` run on a CPU machine."""
    assert tree_codes(tmp_path, CONFIG_FLAG) == [("batch.py", 6, "DEV001"), ("training.py", 11, "DEV001")]


def test_a_config_flag_some_availability_check_sets_is_a_guard(tmp_path: Path) -> None:
    """Where a file assigns an availability check to the flag (`config["use_cuda"] = ... is_available()` read back
    into `self.use_cuda`), it is a guard again."""
    files = dict(CONFIG_FLAG)
    files["training.py"] = files["training.py"].replace(
        'train_config["use_cuda"]\n',
        'train_config["use_cuda"]\n                self.use_cuda = self.use_cuda and torch.cuda.is_available()\n')
    assert tree_codes(tmp_path, files) == []


UNCALLED = """
    import torch

    def translate(model, x):
        return model(x.cuda())
    """


def test_a_setup_py_that_installs_nothing_makes_no_package(tmp_path: Path) -> None:
    """hgraph2graph's `setup(name=..., author=...)` names no packages or modules: the repository stays an
    application, whose functions nothing calls are unreached. With `packages=` its users could call them."""
    assert tree_codes(tmp_path / "a", {"setup.py": "from setuptools import setup\nsetup(name='x', author='y')\n",
                                       "hgnn.py": UNCALLED}) == []
    assert tree_codes(tmp_path / "b", {"setup.py": "from setuptools import setup, find_packages\n"
                                                   "setup(name='x', packages=find_packages())\n",
                                       "hgnn.py": UNCALLED}) == [("hgnn.py", 5, "DEV001")]


# Round 14 (held-out 12)

def test_a_subclass_of_dataparallel_wraps_like_it(tmp_path: Path) -> None:
    """CompressAI's `class CustomDataParallel(nn.DataParallel)` (to reach the module's methods), made when several
    GPUs are there, then `net.state_dict()` saved: its keys carry `module.` like DataParallel's. A subclass of a
    subclass counts too; an unrelated class does not."""
    train = textwrap.dedent("""
        import torch
        from torch import nn

        class CustomDataParallel(nn.DataParallel):
            def __getattr__(self, key):
                return getattr(self.module, key)

        class Deeper(CustomDataParallel):
            pass

        class Plain(nn.Module):
            pass

        def main(net, out):
            if torch.cuda.device_count() > 1:
                net = WRAPPER(net)
            torch.save({"state_dict": net.state_dict()}, out)

        main(nn.Linear(2, 2), "checkpoint.pth.tar")
        """)
    for wrapper in ("CustomDataParallel", "Deeper"):
        root = tmp_path / wrapper
        assert tree_codes(root, {"train.py": train.replace("WRAPPER", wrapper)}) == [("train.py", 18, "DEV009")]
    assert tree_codes(tmp_path / "plain", {"train.py": train.replace("WRAPPER", "Plain")}) == []


def test_a_file_mixing_tabs_and_spaces_is_checked(tmp_path: Path) -> None:
    """PSMNet's finetune.py indents with tabs in some blocks and spaces in others: Python 3 refuses it (TabError),
    so the lint reported DEV000 and checked nothing. Read with tabs as 8 columns (Python 2), its load is checked."""
    source = "import sys\nimport torch\n\nif len(sys.argv) > 1:\n        state = 1\n\tstate = torch.load(sys.argv[1])\n"
    assert tree_codes(tmp_path, {"finetune.py": source}) == [("finetune.py", 6, "DEV003"), ("finetune.py", 6, "DEV004")]


def test_a_file_that_does_not_parse_for_another_reason_is_still_reported(tmp_path: Path) -> None:
    """Python 2 print statements are no indentation matter: still DEV000, nothing checked."""
    (tmp_path / "old.py").write_text("import torch\nprint 'x'\ntorch.load(open('a'))\n")
    found = devicelint.lint_paths([str(tmp_path / "old.py")], select=["DEV000", *CHECKED])
    assert [(f.line, f.code) for f in found] == [(2, "DEV000")]


def test_a_branch_under_a_constant_false_test_never_runs(tmp_path: Path) -> None:
    """CompressAI's `if False:  # torch.cuda.is_available():` keeps the CUDA choice it no longer makes: nothing in
    that branch runs, so nothing there is reported; its `else` is checked as usual."""
    source = textwrap.dedent("""
        import torch

        def main():
            if False:  # torch.cuda.is_available():
                device = torch.device("cuda:{}".format(torch.cuda.current_device()))
            else:
                device = torch.device("cpu")
                torch.cuda.synchronize()
            return device

        main()
        """)
    assert tree_codes(tmp_path, {"codec.py": source}) == [("codec.py", 9, "DEV012")]
