"""Round 16 of the device lint: what held-out 14's false alarms and misses showed (after that set was scored).

Legacy CUDA tensor types made through an alias of the `torch.cuda` module (CodeBERT's `self.tt = torch.cuda`) are
DEV010 like the written-out type."""

from __future__ import annotations

from pathlib import Path

from lint_trees import tree_codes

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


WRAPPED_IN_TRAIN = """
    import copy
    import torch
    from torch import nn

    class Model:
        def __init__(self):
            self.model = nn.Linear(2, 2)
            self.head = nn.Linear(2, 2)

        def train(self):
            if torch.cuda.device_count() > 1:
                self.model = nn.DataParallel(self.model, dim=0)
            best = copy.deepcopy(self.model)
            self.model = best

        def save_model(self, path):
            torch.save(self.model.state_dict(), path)
            torch.save(self.head.state_dict(), path + ".head")
            torch.save(self.model.module.state_dict(), path + ".plain")

        def save_plain(self, path):
            if isinstance(self.model, nn.DataParallel):
                state = self.model.module.state_dict()
            else:
                state = self.model.state_dict()
            torch.save(state, path)

    model = Model()
    model.train()
    model.save_model("m.pt")
    model.save_plain("p.pt")
"""


def test_a_wrapper_set_on_an_attribute_in_one_method_is_wrapped_when_another_saves_it(tmp_path: Path) -> None:
    """`self.model = nn.DataParallel(self.model)` in train(), `self.model.state_dict()` saved in save_model()
    (DeepPurpose): module. keys; another attribute, one unwrapped with `.module`, or the `else` of an isinstance
    test (pytorch-3dunet) is not reported."""
    assert tree_codes(tmp_path, {"model.py": WRAPPED_IN_TRAIN}) == [("model.py", 18, "DEV009")]


TRAINER = {
    "common/base.py": """
        import torch
        from torch.nn import DataParallel

        class Base:
            def save_model(self, state, epoch):
                torch.save(state, f"snapshot_{epoch}.pth")

        class Trainer(Base):
            def _make_model(self):
                model = DataParallel(torch.nn.Linear(2, 2))
                self.model = model
                self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

        class Tester(Base):
            def _make_model(self):
                model = DataParallel(torch.nn.Linear(2, 2))
                model = model.module
                self.model = model
    """,
    "main/train.py": """
        import torch
        from common.base import Trainer, Tester

        def main():
            trainer = Trainer()
            trainer._make_model()
            trainer.save_model({"network": trainer.model.state_dict(),
                                "optimizer": trainer.optimizer.state_dict()}, 0)
            tester = Tester()
            tester._make_model()
            torch.save(tester.model.state_dict(), "t.pth")

        main()
    """,
}


def test_an_object_whose_class_sets_a_wrapper_on_an_attribute_saves_it_wrapped(tmp_path: Path) -> None:
    """`trainer = Trainer()` whose `_make_model` sets `self.model` to a DataParallel (InterHand2.6M): saving
    `trainer.model.state_dict()` in another file is DEV009; a class that unwraps with `.module` first is not."""
    found = tree_codes(tmp_path, TRAINER)
    assert [f for f in found if f[2] == "DEV009"] == [("main/train.py", 8, "DEV009")]


SAME_NAMED_CLASSES = {
    "summarize/model.py": """
        import torch

        class Beam:
            def __init__(self, size):
                self.scores = torch.cuda.FloatTensor(size)

        class Seq2Seq:
            def predict(self):
                return Beam(3)

        Seq2Seq().predict()
    """,
    "unixcoder.py": """
        import torch

        class UniXcoder:
            def generate(self):
                return Beam(2)

        class Beam:
            def __init__(self, size):
                self.scores = torch.FloatTensor(size)
    """,
}


def test_a_class_stays_reached_when_an_unreached_class_elsewhere_reads_its_own_namesake(tmp_path: Path) -> None:
    """Two files define `Beam`; the one nothing reaches (`UniXcoder.generate`) reads its own: the other file's
    `Beam(3)` still reaches that file's Beam (its reads were taken off twice, hiding CodeBERT's beam searches)."""
    assert tree_codes(tmp_path, SAME_NAMED_CLASSES) == [("summarize/model.py", 6, "DEV010")]


LITE = {
    "train.py": """
        import torch
        from pytorch_lightning.lite import LightningLite
        import lightning as L

        class Lite(LightningLite):
            def run(self, path):
                ckpt = self.load(path)
                return ckpt

        class Base(L.Fabric):
            pass

        class Runner(Base):
            def run(self, path):
                return self.load(path)

        class Own(LightningLite):
            def load(self, path):
                return torch.load(path, map_location="cpu", weights_only=True)

            def run(self, path):
                return self.load(path)

        class Plain:
            def load(self, path):
                return open(path).read()

            def run(self, path):
                return self.load(path)

        Lite().run("a.pth")
        Runner().run("b.pth")
        Own().run("c.pth")
        Plain().run("d.txt")
    """,
}


def test_a_load_inherited_from_lightning_lite_or_fabric_unpickles(tmp_path: Path) -> None:
    """`self.load(path)` in a LightningLite (or `L.Fabric`, through a checked base) subclass is torch.load without
    weights_only (co-tracker's resume); a class's own load(), or an unrelated class's, is judged as written."""
    assert tree_codes(tmp_path, LITE) == [("train.py", 8, "DEV004"), ("train.py", 16, "DEV004")]


EITHER_BRANCH = """
    import torch

    use_cuda = torch.cuda.is_available()
    net = torch.nn.Linear(2, 2)
    state = {"net": net.state_dict() if use_cuda else net, "acc": 0.5}
    torch.save(state, "a.t7")
    kept = {"net": net.state_dict() if use_cuda else net.cpu().state_dict(), "acc": 0.5}
    torch.save(kept, "b.t7")
"""


def test_a_module_in_either_branch_of_a_conditional_in_a_saved_dict_is_dev006(tmp_path: Path) -> None:
    """`{'net': net.state_dict() if use_cuda else net}` pickles the whole module without CUDA
    (Facial-Expression-Recognition), reported at that entry; both branches states: not reported."""
    assert tree_codes(tmp_path, {"train.py": EITHER_BRANCH}) == [("train.py", 6, "DEV006")]
