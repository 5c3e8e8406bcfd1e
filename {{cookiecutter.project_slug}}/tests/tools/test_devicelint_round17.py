"""Round 17 of the device lint: what held-out 15's false alarms and misses showed (after that set was scored).

A flag compared with True or False is the flag, files that use `async` as a name are checked, a legacy CUDA type bound
to a name nothing reads is not reported."""

from __future__ import annotations

from pathlib import Path

from lint_trees import tree_codes

import devicelint  # tools/devicelint.py: pytest puts tools/ on sys.path (pyproject.toml)

CHECKED_FLAG_COMPARED = """
    import torch

    class Solver:
        def __init__(self, model):
            self.model = model
            self.is_cuda = torch.cuda.is_available()
            if self.is_cuda == True:
                self.model.cuda()
            if self.is_cuda is True:
                self.model.cuda()
            if self.is_cuda != False:
                self.model.cuda()
            if self.is_cuda == False:
                return
            self.model.cuda()

    Solver(torch.nn.Linear(2, 2))
"""


def test_a_checked_flag_compared_with_true_or_false_guards_as_the_flag(tmp_path: Path) -> None:
    """`if self.is_cuda == True:` of `self.is_cuda = torch.cuda.is_available()` guards like `if self.is_cuda:`,
    and `if self.is_cuda == False: return` guards what follows (self-attention-music-tagging)."""
    assert tree_codes(tmp_path, {"solver.py": CHECKED_FLAG_COMPARED}) == []


WISHED_FLAG_COMPARED = """
    import argparse
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--cuda", default=True)
    args = parser.parse_args()
    model = torch.nn.Linear(2, 2)
    if args.cuda == True:
        model.cuda()
    if args.cuda == False:
        pass
    else:
        model.cuda()
    use_cuda = torch.cuda.is_available()
    if use_cuda == False:
        model.cuda()
    if use_cuda is not True:
        model.cuda()
"""


def test_a_wished_flag_compared_with_true_guards_nothing_and_a_negated_check_is_no_guard(tmp_path: Path) -> None:
    """`args.cuda == True` of `--cuda default=True` still asks, not checks; `use_cuda == False` and `use_cuda is not
    True` are `not use_cuda` (round 16 read the second as a guard)."""
    assert tree_codes(tmp_path, {"train.py": WISHED_FLAG_COMPARED}) == [
        ("train.py", 10, "DEV001"), ("train.py", 14, "DEV001"), ("train.py", 17, "DEV001"), ("train.py", 19, "DEV001")]


ASYNC_AS_NAME = """
    import torch

    def evaluate(model, loader):
        for inputs, targets in loader:
            targets = targets.cuda(async=True)
            outputs = model(inputs)
        return outputs

    evaluate(torch.nn.Linear(2, 2), [])
"""


def test_a_file_using_async_as_a_keyword_argument_is_checked(tmp_path: Path) -> None:
    """`.cuda(async=True)` (Python 3.6 and before): the file is read with `async` renamed and checked, not DEV000."""
    assert tree_codes(tmp_path, {"test.py": ASYNC_AS_NAME}) == [("test.py", 6, "DEV001")]


STILL_BROKEN = """
    import torch

    def evaluate(model, loader):
        targets = loader.cuda(async=True)
        print "done"
"""


def test_a_file_with_another_syntax_error_is_still_dev000(tmp_path: Path) -> None:
    """Renaming `async` does not hide a second error: the file is reported unchecked, at its own error."""
    codes = tree_codes(tmp_path, {"old.py": STILL_BROKEN})
    assert [c for _, _, c in codes] == ["DEV000"]
    assert devicelint.lint_source("async def f():\n    await g()\n") == []


UNREAD_TYPES = """
    import torch

    def check_model(model):
        float_dtype = torch.cuda.FloatTensor
        long_dtype = torch.cuda.LongTensor
        return model

    def main(model):
        float_dtype = torch.cuda.FloatTensor
        long_dtype = torch.cuda.LongTensor
        model.type(float_dtype)

    check_model(None)
    main(None)
"""


def test_a_legacy_type_bound_to_a_name_nothing_reads_is_not_reported(tmp_path: Path) -> None:
    """sg2im: `long_dtype = torch.cuda.LongTensor` never read places nothing; `float_dtype` cast to still is."""
    assert tree_codes(tmp_path, {"train.py": UNREAD_TYPES}) == [("train.py", 10, "DEV010")]


PER_GPU_SPAWN = """
    import torch
    from torch import multiprocessing

    def _index(cam):
        return cam.cuda()

    def _work(rank, model, args):
        with torch.cuda.device(rank):
            model.cuda()
            _index(torch.zeros(2))

    def run(args):
        model = torch.nn.Linear(2, 2)
        n_gpus = torch.cuda.device_count()
        multiprocessing.spawn(_work, nprocs=n_gpus, args=(model, args), join=True)

    run(None)
"""


def test_a_worker_spawned_once_per_visible_gpu_runs_only_where_cuda_is(tmp_path: Path) -> None:
    """irn's `multiprocessing.spawn(_work, nprocs=n_gpus)` of `n_gpus = torch.cuda.device_count()`: no process
    starts without a GPU, so `_work` and `_index`, which only it reaches, are CUDA-only."""
    assert tree_codes(tmp_path, {"make_cam.py": PER_GPU_SPAWN}) == []


PER_GPU_PROCESSES = """
    import torch
    import torch.multiprocessing as mp

    def work(rank):
        torch.cuda.set_device(rank)

    for rank in range(torch.cuda.device_count()):
        mp.Process(target=work, args=(rank,)).start()
"""


def test_processes_started_in_a_loop_over_the_gpu_count_run_only_where_cuda_is(tmp_path: Path) -> None:
    """`for rank in range(torch.cuda.device_count()): Process(target=work)`: one process per GPU, none without."""
    assert tree_codes(tmp_path, {"launch.py": PER_GPU_PROCESSES}) == []


NOT_PER_GPU = """
    import torch
    from torch import multiprocessing

    def _work(rank, args):
        torch.zeros(2).cuda()

    def _other(rank, args):
        torch.zeros(2).cuda()

    def run(args, n_gpus):
        multiprocessing.spawn(_work, nprocs=args.num_workers, args=(args,), join=True)
        multiprocessing.spawn(_other, nprocs=n_gpus, args=(args,), join=True)
        count = torch.cuda.device_count()
        count = max(count, 1)
        multiprocessing.spawn(_other, nprocs=count, args=(args,), join=True)

    run(None, 2)
"""


def test_a_worker_count_not_from_device_count_is_no_guard(tmp_path: Path) -> None:
    """`nprocs=args.num_workers`, a parameter, or a name rebound to `max(count, 1)`: workers start without a GPU."""
    assert tree_codes(tmp_path, {"steps.py": NOT_PER_GPU}) == [("steps.py", 6, "DEV001"), ("steps.py", 9, "DEV001")]


SAVED_BY_BINDING = """
    import torch

    def build_model(args):
        kwargs = {"width": 2}
        model = torch.nn.Linear(2, 2)
        return model, kwargs

    class Solver:
        def __init__(self):
            self.model = torch.nn.Linear(2, 2)

        def save(self, path):
            model = self.model.state_dict()
            torch.save({"model": model}, path)
            torch.save(model, path + ".sd")

    def main(args):
        model, model_kwargs = build_model(args)
        checkpoint = {"model_kwargs": model_kwargs, "state": model.state_dict()}
        torch.save(checkpoint, "out.pt")
        Solver().save("solver.pt")

    main(None)
"""


def test_a_saved_name_is_judged_by_its_binding_not_its_spelling(tmp_path: Path) -> None:
    """`model = self.model.state_dict()` is a state, not a module (self-attention-music-tagging), and
    `model_kwargs` of `model, model_kwargs = build_model()` is the helper's `kwargs`, not a module (sg2im)."""
    assert tree_codes(tmp_path, {"train.py": SAVED_BY_BINDING}) == []


SAVED_MODULES = """
    import torch

    def build_model(args):
        return torch.nn.Linear(2, 2), {"width": 2}

    def build_pair(args):
        kwargs = {"width": 2}
        net = torch.nn.Linear(2, 2)
        return kwargs, net

    def main(args):
        model, model_kwargs = build_model(args)
        torch.save(model, "a.pt")
        kwargs, model_net = build_pair(args)
        torch.save({"net": model_net}, "b.pt")
        model_sd = model.state_dict()
        if args:
            model_sd = model
        torch.save({"model": model_sd, "kwargs": kwargs}, "c.pt")

    main(None)
"""


def test_a_saved_name_bound_to_a_module_somewhere_is_still_dev006(tmp_path: Path) -> None:
    """A place of the tuple that returns a module (or a call), or a name also bound to a module: still reported."""
    assert tree_codes(tmp_path, {"train.py": SAVED_MODULES}) == [("train.py", 14, "DEV006"), ("train.py", 16, "DEV006")]


WRAPPER_IN_A_TUPLE = {
    "model.py": """
        import torch
        from torch import nn

        def generate_model(opt):
            model = nn.Linear(2, 2)
            if not opt.no_cuda:
                model = model.cuda()
                model = nn.DataParallel(model, device_ids=None)
                return model, model.parameters()
            return model, model.parameters()

        def plain_model(opt):
            model = nn.Linear(2, 2)
            wrapped = nn.DataParallel(model)
            return model, wrapped.parameters()
    """,
    "main.py": """
        import torch
        from model import generate_model, plain_model

        def main(opt):
            model, parameters = generate_model(opt)
            torch.save({"state_dict": model.state_dict()}, "a.pth")
            net, params = plain_model(opt)
            torch.save({"state_dict": net.state_dict()}, "b.pth")

        if __name__ == "__main__":
            main(None)
    """,
}


def test_a_wrapper_returned_in_a_helpers_tuple_is_saved_wrapped(tmp_path: Path) -> None:
    """Real-time-GesRec: `model, parameters = generate_model(opt)`, whose return holds the DataParallel model at
    that place, then `model.state_dict()` saved: DEV009; `plain_model`'s first place is the bare module."""
    codes = tree_codes(tmp_path, WRAPPER_IN_A_TUPLE)
    assert [c for c in codes if c[2] == "DEV009"] == [("main.py", 7, "DEV009")]
