"""The device lint reads a program as a whole: its own checkpoints, its flags across files, one project at a time.

Issue 57's causes of false alarms on unseen code: a program reloading what it saved itself through a helper, a
method of the same class or another file; an availability flag set in the entry script and read elsewhere; an
unused parameter's default; DEV003 on a file whose save wrote no tensors; several projects in one folder."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import devicelint  # tools/devicelint.py: pytest puts tools/ on sys.path (pyproject.toml)

CHECKED = sorted(code for code, rule in devicelint.RULES.items() if rule.default)


def tree_codes(root: Path, files: dict[str, str], lint: Path | None = None) -> list[tuple[str, int, str]]:
    """(file, line, code) for a small program written under `root`, linted as the lint's users run it."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    found = devicelint.lint_paths([str(lint or root)], select=CHECKED)
    return [(Path(f.path).relative_to(root).as_posix(), f.line, f.code) for f in found]


# A trainer that saves the best model through a method and reloads it for the test split after training.
TRAINER = {
    ".git/HEAD": "ref: refs/heads/main\n",
    "trainer.py": """
        import os
        import torch

        class Trainer:
            def __init__(self, model, out, device):
                self.model = model.to(device)
                self.best_path = os.path.join(out, "best.pt")

            def _save_best(self):
                torch.save(self.model.state_dict(), self.best_path)

            def fit(self, epochs):
                for _ in range(epochs):
                    self._save_best()

            def test(self, load=False):
                if load:
                    self.model.load_state_dict(torch.load(self.best_path))
                return self.model
        """,
    "train.py": """
        import argparse
        import torch
        from trainer import Trainer

        parser = argparse.ArgumentParser()
        parser.add_argument("--out", default="runs")
        args = parser.parse_args()
        device = "cuda" if torch.cuda.is_available() else "cpu"
        trainer = Trainer(torch.nn.Linear(2, 2), args.out, device)
        trainer.fit(3)
        trainer.test(load=True)
        """,
}


def test_a_checkpoint_the_program_saved_in_the_same_process_is_not_reported(tmp_path: Path) -> None:
    """`fit()` saves through a method, `test(load=True)` reloads it in the same run: no map_location needed,
    nothing from elsewhere is unpickled."""
    assert tree_codes(tmp_path, TRAINER) == []


def test_another_process_loading_the_programs_checkpoint_is_still_reported(tmp_path: Path) -> None:
    """An evaluation script that only loads (no training before it in its process) may meet a GPU checkpoint."""
    files = {**TRAINER, "evaluate.py": """
        import argparse
        import torch
        from trainer import Trainer

        parser = argparse.ArgumentParser()
        parser.add_argument("--out", default="runs")
        args = parser.parse_args()
        Trainer(torch.nn.Linear(2, 2), args.out, "cpu").test(load=True)
        """}
    assert tree_codes(tmp_path, files) == [("trainer.py", 19, "DEV003"), ("trainer.py", 19, "DEV004")]


def test_a_save_helper_in_another_file_pairs_with_the_load_by_its_parameter(tmp_path: Path) -> None:
    """`checkpoints.write(model, path)` then `checkpoints.read(path)` with the same path: a same-process round trip,
    though neither helper's name says save or load."""
    files = {
        ".git/HEAD": "ref: refs/heads/main\n",
        "checkpoints.py": """
            import torch

            def write(model, path):
                torch.save(model.state_dict(), path)

            def read(path):
                return torch.load(path)
            """,
        "train.py": """
            import argparse
            import torch
            import checkpoints

            parser = argparse.ArgumentParser()
            parser.add_argument("--ckpt", default="model.pt")
            args = parser.parse_args()
            device = "cuda" if torch.cuda.is_available() else "cpu"
            model = torch.nn.Linear(2, 2).to(device)
            checkpoints.write(model, args.ckpt)
            model.load_state_dict(checkpoints.read(args.ckpt))
            """,
    }
    assert tree_codes(tmp_path, files) == []
    files["predict.py"] = """
        import argparse
        import checkpoints

        parser = argparse.ArgumentParser()
        parser.add_argument("--ckpt", default="model.pt")
        state = checkpoints.read(parser.parse_args().ckpt)
        """
    assert ("checkpoints.py", 8, "DEV004") in tree_codes(tmp_path, files)


def test_the_best_copy_of_a_checkpoint_saved_three_calls_deep_pairs(tmp_path: Path) -> None:
    """`fit()` -> `train_one()` -> `save_checkpoint()` saves last.pth and copies it to model_best.pth, which `test()`
    reloads after `fit()` in the same `main()`."""
    files = {
        ".git/HEAD": "ref: refs/heads/main\n",
        "utils.py": """
            import os
            import shutil
            import torch

            def save_checkpoint(state, is_best, folder):
                last = os.path.join(folder, "last.pth")
                torch.save(state, last)
                if is_best:
                    shutil.copyfile(last, os.path.join(folder, "model_best.pth"))
            """,
        "train.py": """
            import argparse
            import os
            import torch
            from utils import save_checkpoint

            def train_one(model, args):
                save_checkpoint({"state_dict": model.state_dict()}, True, args.save_dir)

            def fit(model, args):
                for _ in range(2):
                    train_one(model, args)

            def test(model, opt):
                model.load_state_dict(torch.load(os.path.join(opt.save_dir, "model_best.pth"))["state_dict"])

            def main():
                parser = argparse.ArgumentParser()
                parser.add_argument("--save_dir", default="runs")
                args = parser.parse_args()
                model = torch.nn.Linear(2, 2).to("cuda" if torch.cuda.is_available() else "cpu")
                fit(model, args)
                test(model, args)

            main()
            """,
    }
    assert tree_codes(tmp_path, files) == []


def test_a_save_in_the_other_branch_of_an_if_does_not_pair(tmp_path: Path) -> None:
    """`if args.restart: model.save(path) else: model.load(path)`: the load runs when the save did not."""
    files = {
        ".git/HEAD": "ref: refs/heads/main\n",
        "net.py": """
            import torch
            class Net(torch.nn.Module):
                def save(self, path):
                    torch.save(self.state_dict(), path)
                def load(self, path):
                    self.load_state_dict(torch.load(path))
            """,
        "train.py": """
            import argparse
            import torch
            from net import Net

            parser = argparse.ArgumentParser()
            parser.add_argument("--weights", default="runs/net.pt")
            parser.add_argument("--restart", action="store_true")
            args = parser.parse_args()
            model = Net()
            model.to("cuda" if torch.cuda.is_available() else "cpu")
            if args.restart:
                model.save(args.weights)
            else:
                model.load(args.weights)
            """,
    }
    assert ("net.py", 7, "DEV004") in tree_codes(tmp_path, files)


def test_dev003_reads_what_the_paired_save_wrote(tmp_path: Path) -> None:
    """A load whose save (another file, another process) wrote no tensors (the config, stats, the CPU RNG state)
    needs no map_location; unpickling a user's path is still DEV004. A save of model state still asks."""
    files = {
        ".git/HEAD": "ref: refs/heads/main\n",
        "train.py": """
            import argparse
            import random
            import torch

            parser = argparse.ArgumentParser()
            parser.add_argument("--out", default="runs")
            args = parser.parse_args()
            device = "cuda" if torch.cuda.is_available() else "cpu"
            model = torch.nn.Linear(2, 2).to(device)
            torch.save({"args": vars(args), "epoch": 3, "rng": torch.get_rng_state(),
                        "py_rng": random.getstate()}, args.out + "/state.pt")
            torch.save(model.state_dict(), args.out + "/model.pt")
            """,
        "resume.py": """
            import argparse
            import torch

            parser = argparse.ArgumentParser()
            parser.add_argument("--out", default="runs")
            args = parser.parse_args()
            state = torch.load(args.out + "/state.pt", weights_only=True)
            weights = torch.load(args.out + "/model.pt", weights_only=True)
            """,
    }
    assert tree_codes(tmp_path, files) == [("resume.py", 9, "DEV003")]


def test_an_availability_flag_set_in_the_entry_script_guards_other_files(tmp_path: Path) -> None:
    """`args.use_gpu = args.use_gpu and torch.cuda.is_available()` in run.py, `if self.args.use_gpu:` in the
    experiment class of another file: the flag is off on a machine without CUDA."""
    files = {
        ".git/HEAD": "ref: refs/heads/main\n",
        "exp.py": """
            import torch

            class Exp:
                def __init__(self, args):
                    self.args = args
                    self.model = torch.nn.Linear(2, 2)
                    if self.args.use_gpu:
                        self.model = self.model.cuda()
            """,
        "run.py": """
            import argparse
            import torch
            from exp import Exp

            parser = argparse.ArgumentParser()
            parser.add_argument("--use_gpu", type=bool, default=True)
            args = parser.parse_args()
            args.use_gpu = True if torch.cuda.is_available() and args.use_gpu else False
            Exp(args)
            """,
    }
    assert tree_codes(tmp_path, files) == []


def test_a_checked_flag_passed_on_and_held_on_self_guards(tmp_path: Path) -> None:
    """`use_cuda = torch.cuda.is_available()`, `Net(cuda=use_cuda)`, `self.cuda = cuda`, `if self.cuda:`: every
    caller passes a flag an availability check set, so the guard is real."""
    files = {
        ".git/HEAD": "ref: refs/heads/main\n",
        "model.py": """
            import torch

            class Trainer:
                def __init__(self, cuda=True):
                    self.cuda = cuda
                    self.model = torch.nn.Linear(2, 2)
                    if self.cuda:
                        self.model.cuda()
            """,
        "train.py": """
            import torch
            from model import Trainer

            use_cuda = torch.cuda.is_available()
            trainer = Trainer(cuda=use_cuda)
            """,
    }
    assert tree_codes(tmp_path, files) == []


def test_a_flag_a_file_sets_to_true_itself_is_no_guard_whatever_another_file_checks(tmp_path: Path) -> None:
    """demo.py's own `use_cuda = True` guards nothing, though camera.py passes a checked flag to a `use_cuda`
    parameter elsewhere: a name one file binds only to True is not the other's."""
    files = {
        ".git/HEAD": "ref: refs/heads/main\n",
        "utils.py": "def detect(model, image, use_cuda=1):\n    return model(image)\n",
        "camera.py": """
            import torch
            from utils import detect

            CUDA = torch.cuda.is_available()
            detect(None, None, CUDA)
            """,
        "demo.py": """
            import torch

            use_cuda = True
            model = torch.nn.Linear(2, 2)
            if use_cuda:
                model.cuda()
            """,
    }
    assert tree_codes(tmp_path, files) == [("demo.py", 7, "DEV001")]


def test_an_unused_parameters_device_default_is_not_reported() -> None:
    """`device="cuda:0"` that the function never reads places nothing; a read one is still a hidden default."""
    unused = "class Head:\n    def __init__(self, dim, device='cuda:0'):\n        self.dim = dim\n"
    used = unused.replace("self.dim = dim", "self.w = torch.zeros(dim, device=device)")
    assert [f.code for f in devicelint.lint_source(unused, "heads.py")] == []
    assert [f.code for f in devicelint.lint_source(used, "heads.py")] == ["DEV002"]


# Two repositories side by side in one folder: one defines `metric`, the other imports it from a package.
SIDE_BY_SIDE = {
    "metrics-repo/setup.py": "from setuptools import setup\nsetup(name='mymetrics')\n",
    "metrics-repo/mymetrics/__init__.py": "def metric(x, y):\n    return (x - y).abs().mean()\n",
    "classifier/.git/HEAD": "ref: refs/heads/main\n",
    "classifier/train.py": """
        import torch
        from torchmetrics import metric

        model = torch.nn.Linear(2, 2).cuda()
        batch = torch.zeros(2, 2).cuda()
        print(metric(model(batch), batch))
        """,
}


def test_a_folder_of_several_projects_is_linted_project_by_project(tmp_path: Path) -> None:
    """The classifier's `metric` comes from a third-party package, not from the metrics repository beside it:
    its two unguarded .cuda() calls are found, as when it is linted alone."""
    alone = tree_codes(tmp_path, {k: v for k, v in SIDE_BY_SIDE.items() if k.startswith("classifier/")},
                       lint=tmp_path / "classifier")
    assert alone == [("classifier/train.py", 5, "DEV001"), ("classifier/train.py", 6, "DEV001")]
    assert tree_codes(tmp_path, SIDE_BY_SIDE) == alone


def test_a_clean_run_says_how_many_files_it_checked(tmp_path: Path) -> None:
    """Users can tell the lint ran: one summary line on stdout, exit status 0."""
    (tmp_path / "a.py").write_text("model.to(device)\n")
    (tmp_path / "b.py").write_text("x = 1\n")
    done = subprocess.run([sys.executable, devicelint.__file__, str(tmp_path)], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "devicelint: 2 files checked, 0 findings\n", "")
