"""The device kit copied into projects that are not this template, following the kit's own README.

Three small stand-ins shaped like the projects the kit was adopted in (a CIFAR trainer whose `main.py` wraps its
net in DataParallel, a template whose `-d/--device` flag lists GPU indices, and a script that ran at module level
with a `save_checkpoint` of its own, a boolean `--cuda` flag and old bare-state-dict checkpoints), written here as
their owners would after reading `devkit/README.md`: `cp -r devkit`, the device resolved once, `run_main`
around `main()`, `save_checkpoint`, `data_parallel`. Then, as in that README: the device lint on the project
is clean, `--device cuda:1` on a machine without it is one line and exit 2, a checkpoint of GPU tensors holds
CPU tensors only, and DataParallel is built around the resolved device.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import DEFAULT_PACKAGE, subprocess_env

CIFAR_MAIN = '''
"""Train a small net on random CIFAR-sized batches (a stand-in for kuangliu/pytorch-cifar's main.py)."""
import argparse
import sys

import torch
from torch import nn

from devkit import data_parallel, resolve_device
from devkit.checkpoint import load_checkpoint, model_state, save_checkpoint
from devkit.edge import run_main


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="auto")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    device = resolve_device(args.device)
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10)).to(device)
    if device.type == "cuda" and torch.cuda.device_count() > 1:
        net = data_parallel(net, device)
    if args.resume:
        net.load_state_dict(load_checkpoint("checkpoint/ckpt.pth", map_location=device)["net"])
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    images, labels = torch.randn(8, 3, 32, 32, device=device), torch.randint(0, 10, (8,), device=device)
    nn.functional.cross_entropy(net(images), labels).backward()
    optimizer.step()
    save_checkpoint("checkpoint/ckpt.pth", {"net": model_state(net), "optimizer": optimizer.state_dict(),
                                            "acc": 0.1, "epoch": 1})
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
'''

TEMPLATE_TRAIN = '''
"""A stand-in for victoresque/pytorch-template's train.py: -d/--device lists GPU indices."""
import argparse
import sys

import torch
from torch import nn

from devkit import data_parallel, resolve_device
from devkit.checkpoint import model_state, save_checkpoint
from devkit.edge import run_main


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-d", "--device", default=None, help="indices of GPUs to enable (default: all)")
    args = parser.parse_args()
    first = args.device.split(",")[0] if args.device else "auto"
    device = resolve_device(first if not first.isdigit() else f"cuda:{first}")
    model = nn.Linear(4, 2).to(device)
    if device.type == "cuda" and torch.cuda.device_count() > 1:
        model = data_parallel(model, device)
    state = {"arch": "Linear", "epoch": 1, "state_dict": model_state(model)}
    save_checkpoint("saved/checkpoint-epoch1.pth", state)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
'''

GLOBALS_TRAIN = '''
"""A stand-in for a script that ran at module level (helpers read its globals), had its own save_checkpoint and a
boolean --cuda flag, and kept old checkpoints that are bare state dicts; ported as devkit/README.md says."""
import argparse
import sys

import torch
from torch import nn

from devkit import resolve_device
from devkit.checkpoint import load_checkpoint, load_model_state, model_state
from devkit.checkpoint import save_checkpoint as save_portable  # the repo's own save_checkpoint keeps its name
from devkit.edge import run_main

net = optimizer = device = None  # set in main(); train() and save_checkpoint() read them


def save_checkpoint(path):
    """The repo's own helper, now writing through the kit: still a bare state dict, as old readers expect."""
    save_portable(path, model_state(net))


def train():
    images, labels = torch.randn(8, 3, 8, 8, device=device), torch.randint(0, 10, (8,), device=device)
    optimizer.zero_grad()
    nn.functional.cross_entropy(net(images), labels).backward()
    optimizer.step()


def main() -> int:
    global net, optimizer, device  # the body moved from module level: the helpers still read these names
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, mps ...")
    parser.add_argument("--cuda", dest="device", action="store_const", const="cuda", help="the old flag: --device cuda")
    parser.add_argument("--resume", default=None, help="a checkpoint: the kit's or an old bare state dict")
    parser.add_argument("--save", default="checkpoint/ckpt.pth")
    args = parser.parse_args()
    device = resolve_device(args.device)
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 10)).to(device)
    if args.resume:
        load_model_state(net, load_checkpoint(args.resume, map_location=device))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    train()
    save_checkpoint(args.save)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
'''

PROJECTS = {"cifar": ("main.py", CIFAR_MAIN), "template": ("train.py", TEMPLATE_TRAIN),
            "globals": ("train.py", GLOBALS_TRAIN)}


@pytest.fixture(scope="module")
def adopted(bakery, tmp_path_factory) -> dict[str, Path]:
    """Each stand-in with the kit and the lint copied in as devkit/README.md says."""
    kit = bakery.project() / DEFAULT_PACKAGE / "devkit"
    lint = bakery.project() / "tools" / "devicelint.py"
    made = {}
    for name, (script, source) in PROJECTS.items():
        project = tmp_path_factory.mktemp(name)
        shutil.copytree(kit, project / "devkit", ignore=shutil.ignore_patterns("__pycache__"))
        (project / "tools").mkdir()
        shutil.copy(lint, project / "tools" / "devicelint.py")
        (project / script).write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
        made[name] = project
    return made


def python(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=project, capture_output=True, text=True, timeout=300,
                          env=subprocess_env(**env))


@pytest.mark.parametrize("name", PROJECTS)
def test_the_lint_is_clean_on_a_project_that_copied_the_kit(adopted, name):
    """`cp -r devkit/` and the lint on the project: exit 0, with no setting (the kit's files say they name
    devices on purpose)."""
    result = python(adopted[name], "tools/devicelint.py", ".")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name, flags", [("cifar", ["--device", "cuda:1"]), ("template", ["--device", "1"]),
                                         ("globals", ["--device", "cuda:1"]), ("globals", ["--cuda"])])
def test_a_device_the_machine_lacks_is_one_line_and_exit_2(adopted, name, flags):
    """--device cuda:1 (or -d 1, or the old boolean --cuda) with no GPU visible: one line naming the device asked
    for, exit 2, no traceback."""
    script = PROJECTS[name][0]
    result = python(adopted[name], script, *flags, CUDA_VISIBLE_DEVICES="")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert ("cuda:1" if "cuda:1" in flags or "1" in flags else "cuda") in lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("name", PROJECTS)
def test_the_adopted_project_trains_and_saves_a_checkpoint_of_cpu_tensors(adopted, name):
    """The adopted script runs on this machine; its checkpoint loads with weights_only on the CPU."""
    import torch

    project = adopted[name]
    result = python(project, PROJECTS[name][0], "--device", "cpu")
    assert result.returncode == 0, result.stderr
    saved = next(project.rglob("*.pth"))
    state = torch.load(saved, map_location="cpu", weights_only=True)
    tensors = [value for value in state.get("net", state.get("state_dict", state)).values()]
    assert tensors and all(tensor.device.type == "cpu" for tensor in tensors)


GPU_STATE = """
import sys
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from devkit import checkpoint

if not torch.backends.cuda.is_built():
    sys.exit(77)  # a CPU-only torch build cannot make a tensor on cuda:1, fake or not
torch.Tensor.uniform_ = lambda self, *a, **k: self  # fake tensors hold no values to fill
FakeTensorMode.avoid_device_init = property(lambda self: True)
seen = []
checkpoint.torch.save = lambda obj, handle: seen.append(obj)
with FakeTensorMode(allow_non_fake_inputs=True):
    state = {"model": {"w": torch.ones(2, device="cuda:1")}, "optimizer": {"m": torch.zeros(2, device="cuda:1")}}
    checkpoint.save_checkpoint("gpu.pth", state)
print(sorted({t.device.type for t in (seen[0]["model"]["w"], seen[0]["optimizer"]["m"])}))
"""


def test_a_checkpoint_saved_from_gpu_tensors_holds_cpu_tensors_only(adopted):
    """State on cuda:1 (fake tensors: no GPU here) reaches torch.save as CPU tensors through the copied kit."""
    result = python(adopted["cifar"], "-c", GPU_STATE)
    if result.returncode == 77:
        pytest.skip("this torch build has no CUDA support")
    assert result.returncode == 0 and result.stdout.strip() == "['cpu']", result.stdout + result.stderr


DATA_PARALLEL = """
import torch
from torch import nn
import devkit
from devkit import placement

torch.cuda.device_count = lambda: 2
made = {}
placement.nn.DataParallel = lambda module, device_ids, output_device: made.update(ids=device_ids, out=output_device)
devkit.data_parallel(nn.Linear(2, 2), torch.device("cuda:1"))
print(made)
"""


def test_dataparallel_is_built_around_the_resolved_device(adopted):
    """data_parallel(model, cuda:1) on two GPUs: device_ids [1, 0], outputs gathered on cuda:1."""
    result = python(adopted["template"], "-c", DATA_PARALLEL)
    assert result.returncode == 0 and result.stdout.strip() == "{'ids': [1, 0], 'out': 1}", result.stderr


def test_an_old_bare_state_dict_resumes_and_the_new_checkpoint_is_one_too(adopted, tmp_path):
    """A checkpoint of the module-global script's old kind (`torch.save(net.state_dict())` of a DataParallel net:
    a bare state dict with `module.` keys) is read by the kit's load_checkpoint; the ported script's own
    save_checkpoint, writing through the kit's, leaves a bare state dict again, which old readers load."""
    import torch
    from torch import nn

    old_net = nn.DataParallel(nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 10)))
    torch.save(old_net.state_dict(), tmp_path / "old.pth")
    saved = tmp_path / "new.pth"
    result = python(adopted["globals"], "train.py", "--device", "cpu", "--resume", str(tmp_path / "old.pth"),
                    "--save", str(saved))
    assert result.returncode == 0, result.stderr
    state = torch.load(saved, map_location="cpu", weights_only=True)
    assert sorted(state) == ["1.bias", "1.weight"]  # no `module.`, no wrapping dict: what old readers expect
    nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 10)).load_state_dict(state)
