"""Round 15 of the device lint: what held-out 13's false alarms and misses showed (after that set was scored).

An accelerator flag set False where an availability test fails is, past that test, on only where the accelerator
is: a guard (bindsnet's example scripts); an option's default is the one its own script's parser gives, not another
script's `set_defaults` for an option of the same name; a helper's parameter a caller passes a DataParallel wrapper
stays wrapped through `model = model.eval()` (dfdc_deepfake_challenge's `evaluate_val`)."""

from __future__ import annotations

from pathlib import Path

from lint_trees import tree_codes

CLEARED_IN_ELSE = """
    import argparse
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", dest="gpu", action="store_true")
    parser.set_defaults(gpu=True)
    args = parser.parse_args()
    gpu = args.gpu
    network = torch.nn.Linear(2, 2)
    if gpu:
        network.cuda()
    if gpu and torch.cuda.is_available():
        torch.cuda.manual_seed_all(0)
    else:
        torch.manual_seed(0)
        if gpu:
            gpu = False
    if gpu:
        network.to("cuda")
    for x in [torch.zeros(2)]:
        if gpu:
            x = x.cuda()
    """


def test_a_flag_cleared_where_the_availability_test_fails_guards_after_that_point(tmp_path: Path) -> None:
    """bindsnet's `eth_mnist.py`: `gpu` is True by default, but the `else` of `if gpu and
    torch.cuda.is_available()` sets it False, so every later `if gpu:` runs only where CUDA is. The `.cuda()`
    read before that `if` (line 12) is still a wish."""
    assert tree_codes(tmp_path, {"train.py": CLEARED_IN_ELSE}) == [("train.py", 12, "DEV001")]


CLEARED_UNDER_NOT = """
    import torch

    class Options:
        cuda = True

    opt = Options()
    use_gpu = True
    if not torch.cuda.is_available():
        use_gpu = False
        opt.cuda = False
    model = torch.nn.Linear(2, 2)
    if use_gpu:
        model = model.cuda()
    if opt.cuda:
        model.to("cuda")


    def later(net):
        use_gpu = True
        if use_gpu:
            net.cuda()


    later(model)
    """


def test_a_name_or_attribute_cleared_under_not_available_is_a_checked_flag(tmp_path: Path) -> None:
    """`if not torch.cuda.is_available(): use_gpu = False` (the failing side is the body) clears a name and an
    attribute alike; another function's own `use_gpu = True` is not that name and stays a wish (line 22)."""
    assert tree_codes(tmp_path, {"run.py": CLEARED_UNDER_NOT}) == [("run.py", 22, "DEV001")]


NEVER_CLEARED = """
    import torch

    gpu = True
    if gpu and torch.cuda.is_available():
        torch.cuda.manual_seed_all(0)
    else:
        torch.manual_seed(0)
        verbose = False
    model = torch.nn.Linear(2, 2)
    if gpu:
        model.cuda()
    """


def test_a_true_flag_never_cleared_is_still_a_wish(tmp_path: Path) -> None:
    """The same test with nothing cleared in its `else` (only another name set False) guards nothing after it;
    with the flag cleared there, the same `.cuda()` is guarded."""
    assert tree_codes(tmp_path / "a", {"run.py": NEVER_CLEARED}) == [("run.py", 12, "DEV001")]
    cleared = NEVER_CLEARED.replace("verbose = False", "gpu = False")
    assert tree_codes(tmp_path / "b", {"run.py": cleared}) == []


SCRIPT_WITH_DEFAULT = """
    import argparse
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", dest="gpu", action="store_true")
    parser.set_defaults(plot=False, gpu={default})
    args = parser.parse_args()
    if args.gpu:
        torch.set_default_tensor_type("torch.cuda.FloatTensor")
    """


def test_an_option_default_is_its_own_scripts_not_another_scripts(tmp_path: Path) -> None:
    """bindsnet's `random_network_baseline.py`: its parser sets `gpu=False` (so `--gpu` is an explicit request);
    other scripts' `set_defaults(gpu=True)` are their own options' defaults, not a call passing `gpu=True`. The
    script whose own default is True is still reported."""
    files = {
        "baseline.py": SCRIPT_WITH_DEFAULT.format(default="False"),
        "train.py": SCRIPT_WITH_DEFAULT.format(default="True"),
    }
    assert tree_codes(tmp_path, files) == [("train.py", 10, "DEV010")]


WRAPPED_INTO_HELPER = """
    import torch
    from torch.nn import DataParallel


    def evaluate_val(args, model, path):
        model = model.eval()
        torch.save({"state_dict": model.state_dict()}, path)


    def main(args):
        model = torch.nn.Linear(2, 2).cuda()
        model = DataParallel(model).cuda()
        evaluate_val(args, model, args.path)


    if __name__ == "__main__":
        if torch.cuda.is_available():
            main(None)
    """


def test_a_wrapped_model_stays_wrapped_through_a_helpers_rebinding(tmp_path: Path) -> None:
    """dfdc's `evaluate_val`: the caller passes a DataParallel wrapper and the helper rebinds it to
    `model.eval()` (still the wrapper) before saving its state_dict: DEV009. `model = model.module` unwraps."""
    source = WRAPPED_INTO_HELPER
    assert tree_codes(tmp_path / "a", {"train.py": source}) == [("train.py", 8, "DEV009")]
    unwrapped = source.replace("model = model.eval()", "model = model.module")
    assert tree_codes(tmp_path / "b", {"train.py": unwrapped}) == []
