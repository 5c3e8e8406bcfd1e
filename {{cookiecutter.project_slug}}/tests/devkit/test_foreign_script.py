"""The device kit stands alone: its folder, copied beside someone else's training script, just works.

The script below is written the way pytorch/examples' imagenet main.py is: its own argparse, its own
model, `model.features = DataParallel(model.features)` (or the whole model wrapped), checkpoints as
`{"state_dict": ..., "optimizer": ..., "step": ...}` with no `model` key. It imports nothing of this
project but the copied folder, and runs in a folder of its own (whether or not this project is installed:
the README's `pip install -e '.[test]'` makes the package importable from anywhere).
Its `--device cpu` run hides the GPUs, as on a machine without any: DataParallel would move the CPU
model to cuda:0 with one GPU visible and refuse it with two.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import HANG_S

import {{ cookiecutter.package_name }}

PACKAGE_DIR = Path({{ cookiecutter.package_name }}.__file__).parent

FOREIGN_SCRIPT = textwrap.dedent('''
    """Someone else's training script: only the devkit/ folder comes from the template."""
    import argparse
    import sys
    from pathlib import Path

    import torch
    from torch import nn

    import devkit
    from devkit import checkpoint

    assert Path(devkit.__file__).parent == Path(__file__).resolve().parent / "devkit", "not the copied devkit"
    assert "{{ cookiecutter.package_name }}" not in sys.modules, "the copied devkit imported the template's package"

    parser = argparse.ArgumentParser(description="a tiny imagenet-style trainer")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--resume", default="")
    parser.add_argument("--out", default="checkpoint.pt")
    parser.add_argument("--wrap", choices=["features", "whole"], default="features")


    class Net(nn.Module):
        """features + classifier, like AlexNet and VGG."""

        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                          nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.classifier = nn.Linear(8, 4)

        def forward(self, x):
            return self.classifier(self.features(x))


    def main():
        args = parser.parse_args()
        device = devkit.resolve_device(args.device)
        print("device:", devkit.describe_device(device))
        torch.manual_seed(0)
        model = Net().to(device)
        if args.wrap == "features":  # what imagenet main.py does for alexnet and vgg
            model.features = nn.DataParallel(model.features)
        else:
            model = nn.DataParallel(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        start = 0
        if args.resume:
            state = checkpoint.load_checkpoint(args.resume, map_location=device)
            checkpoint.load_model_state(model, state["state_dict"], args.resume)
            optimizer.load_state_dict(state["optimizer"])
            start = state["step"]
        for step in range(start, start + args.steps):
            torch.manual_seed(1000 + step)  # the batch depends on the step only, so a resumed run redraws it
            images = torch.randn(4, 3, 8, 8, device=device)  # (B, C, H, W)
            targets = torch.randint(0, 4, (4,), device=device)
            loss = nn.functional.cross_entropy(model(images), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        checkpoint.save_checkpoint(args.out, {"state_dict": checkpoint.model_state(model), "arch": "net",
                                              "optimizer": optimizer.state_dict(), "step": start + args.steps,
                                              "args": vars(args)})


    if __name__ == "__main__":
        main()
''')


@pytest.fixture
def foreign_project(tmp_path):
    """A folder holding the foreign script and a copy of the devkit/ folder, nothing else of the package."""
    shutil.copytree(PACKAGE_DIR / "devkit", tmp_path / "devkit", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "main.py").write_text(FOREIGN_SCRIPT)
    return tmp_path


def _run(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """python main.py ARGS in `folder`, with nothing on the path but that folder and the venv."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # --device cpu on a machine without GPUs, however many this one has
    result = subprocess.run([sys.executable, "main.py", "--device", "cpu", *args], cwd=folder, env=env,
                            capture_output=True, text=True, check=False, timeout=HANG_S)
    assert result.returncode == 0, result.stderr
    return result


def _weights(path: Path) -> dict[str, torch.Tensor]:
    """A saved checkpoint's weights, read the strict way any user would."""
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


@pytest.mark.slow
def test_a_foreign_script_trains_saves_and_resumes_into_a_wrapped_model(foreign_project):
    """2 steps with model.features wrapped, resumed into a wholly wrapped model for 2 more, equals 4 steps straight."""
    first = _run(foreign_project, "--wrap", "features", "--steps", "2", "--out", "half.pt")
    assert first.stdout.startswith("device: cpu")
    _run(foreign_project, "--wrap", "whole", "--steps", "2", "--resume", "half.pt", "--out", "resumed.pt")
    _run(foreign_project, "--wrap", "features", "--steps", "4", "--out", "straight.pt")
    half, resumed = _weights(foreign_project / "half.pt"), _weights(foreign_project / "resumed.pt")
    straight = _weights(foreign_project / "straight.pt")
    assert sorted(half) == sorted(resumed) == sorted(straight)
    assert not any("module." in key for key in half)  # features.0.weight, never features.module.0.weight
    assert not all(torch.equal(half[key], straight[key]) for key in straight)  # the last 2 steps changed them
    assert all(torch.equal(resumed[key], straight[key]) for key in straight)
    assert torch.load(foreign_project / "resumed.pt", weights_only=True)["step"] == 4
