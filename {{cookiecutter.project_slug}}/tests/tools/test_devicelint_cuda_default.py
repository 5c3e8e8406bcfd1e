"""The device lint with `.cuda()` back in its default rules (issue 44): reported where a run without CUDA gets.

Each snippet is a reduction (not a copy) of a shape met in public training code: a hazard the labelling policy
(README, "Device lint") says must be found, or a line it says is no hazard.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import devicelint  # tools/devicelint.py: pytest puts tools/ on sys.path (pyproject.toml)

LINT = Path(devicelint.__file__).resolve()
PACKAGE_DIR = LINT.parent.parent / "{{ cookiecutter.package_name }}"


def found(source: str, filename: str = "train.py", **options) -> list[tuple[int, str]]:
    """(line, code) of each finding of the default rules for a snippet."""
    return [(f.line, f.code) for f in devicelint.lint_source(textwrap.dedent(source), filename, **options)]


def tree(tmp_path: Path, files: dict[str, str], **options) -> list[devicelint.Finding]:
    """The findings for a small application (a folder with .git, no package metadata) linted as one tree."""
    (tmp_path / ".git").mkdir(exist_ok=True)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    return devicelint.lint_paths([str(tmp_path)], **options)


def where(findings: list[devicelint.Finding], root: Path) -> list[tuple[str, int, str]]:
    """(file, line, code) of findings, the file relative to root."""
    return [(Path(f.path).relative_to(root).as_posix(), f.line, f.code) for f in findings]


def test_cuda_is_a_default_rule_again() -> None:
    """DEV001 runs without --porting; only DEV007 and DEV011 stay opt-in."""
    assert [code for code, rule in devicelint.RULES.items() if not rule.default] == ["DEV007", "DEV011"]
    assert found("import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n") == [(2, "DEV001")]


# A script's top level runs whenever the script does: nothing there is "unreached".
TOP_LEVEL = {
    "module_statement": ("""
        import torch
        state = torch.load("model.pt")
        """, [(3, "DEV003"), (3, "DEV004")]),
    "main_block": ("""
        import torch
        if __name__ == "__main__":
            state = torch.load("model.pt")
            model = Net().cuda()
        """, [(4, "DEV003"), (4, "DEV004"), (5, "DEV001")]),
    "beside_a_function_that_saves_it_from_the_gpu": ("""
        import torch
        def train(model):
            model.cuda()
            torch.save(model.state_dict(), "model.pt")
        state = torch.load("model.pt")
        train(Net())
        """, [(4, "DEV001"), (6, "DEV003")]),
}


@pytest.mark.parametrize(("source", "expected"), TOP_LEVEL.values(), ids=TOP_LEVEL.keys())
def test_a_scripts_top_level_counts_as_reached(tmp_path: Path, source: str, expected: list) -> None:
    """`state = torch.load("model.pt")` as a module's own statement is reported, as a snippet and as a file."""
    assert found(source) == expected
    assert [(line, code) for _, line, code in where(tree(tmp_path, {"train.py": source}), tmp_path)] == expected


# `.cuda()` where a run without CUDA cannot get: quiet by default.
UNREACHABLE_WITHOUT_CUDA = {
    "availability_guard": """
        if torch.cuda.is_available():
            model = model.cuda()
        """,
    "flag_an_availability_check_sets": """
        args.cuda = not args.no_cuda and torch.cuda.is_available()
        if args.cuda:
            model.cuda()
        """,
    "flag_passed_an_availability_check_by_position": """
        class Trainer:
            def __init__(self, model, use_gpu=True):
                self.use_gpu = use_gpu
            def step(self, x):
                if self.use_gpu:
                    x = x.cuda()
                return x
        trainer = Trainer(Net(), torch.cuda.is_available())
        trainer.step(batch)
        """,
    "cuda_only_entry_point": """
        def worker(rank):
            dist.init_process_group("nccl", rank=rank)
            model = Net().cuda(rank)
        if __name__ == "__main__":
            mp.spawn(worker, nprocs=2)
        """,
    "called_only_under_a_guard": """
        def to_gpu(batch):
            return [x.cuda() for x in batch]
        def main():
            if torch.cuda.is_available():
                batch = to_gpu(load())
        """,
    "nccl_started_in_the_else_branch": """
        if args.local_rank == -1:
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        else:
            torch.cuda.set_device(args.local_rank)
            model = Net().cuda(args.local_rank)
            dist.init_process_group(backend="nccl")
        """,
    "expected_to_fail_in_a_test": """
        def test_set_device_warns():
            with pytest.warns(UserWarning):
                torch.cuda.set_device(0)
            with pytest.raises(RuntimeError):
                torch.ones(2).cuda()
        """,
}


@pytest.mark.parametrize("source", UNREACHABLE_WITHOUT_CUDA.values(), ids=UNREACHABLE_WITHOUT_CUDA.keys())
def test_cuda_where_a_cpu_run_cannot_get_is_quiet(source: str) -> None:
    """Availability guards, flags an availability check sets, CUDA-only entry points, expected failures."""
    assert found(source) == []


# `.cuda()` and the other "fails without the accelerator" forms a run without CUDA reaches: reported.
REACHED_WITHOUT_CUDA = {
    "trainer_with_no_flag": ("""
        def train(model, loader):
            model.cuda()
            for x, y in loader:
                loss = model(x.cuda()).sum()
        if __name__ == "__main__":
            train(Net(), make_loader())
        """, [(3, "DEV001"), (5, "DEV001")]),
    "documented_cpu_mode_still_reaches_cuda": ("""
        parser.add_argument("--cpu", action="store_true", help="run on the CPU")
        args = parser.parse_args()
        device = torch.device("cpu" if args.cpu else "cuda")
        criterion = nn.CrossEntropyLoss().cuda()
        """, [(4, "DEV002"), (5, "DEV001")]),
    "no_cuda_flag_checks_nothing": ("""
        device = torch.device("cpu" if opt.no_cuda else "cuda")
        if not opt.no_cuda:
            model.cuda()
        """, [(2, "DEV002"), (4, "DEV001")]),
    "gpu_ids_on_by_default": ("""
        parser.add_argument("--gpu_ids", type=str, default="0", help="-1 for the CPU")
        opt = parser.parse_args()
        if opt.gpu_ids:
            torch.cuda.set_device(0)
            model.cuda()
        """, [(5, "DEV012"), (6, "DEV001")]),
    "legacy_tensor_type_made": ("""
        x = x.type(torch.cuda.FloatTensor)
        """, [(2, "DEV010")]),
    "legacy_tensor_type_by_name": ("""
        torch.set_default_tensor_type("torch.cuda.FloatTensor")
        y = y.type("torch.cuda.LongTensor")
        """, [(2, "DEV010"), (3, "DEV010")]),
    "device_string_built_by_concatenation": ("""
        model.to(torch.device("cuda:" + str(args.gpu)))
        """, [(2, "DEV002")]),
}


@pytest.mark.parametrize(("source", "expected"), REACHED_WITHOUT_CUDA.values(), ids=REACHED_WITHOUT_CUDA.keys())
def test_cuda_a_cpu_run_reaches_is_reported(source: str, expected: list) -> None:
    """A trainer with no flag, a documented CPU mode, `no_cuda`/`--cpu` flags nothing checks, GPU ids on by default."""
    assert found(source) == expected


def test_a_name_holding_an_accelerator_word_only_inside_another_word_is_no_flag() -> None:
    """`output_path` holds "tpu" but guards nothing; `n_gpu` and `use_cuda` are flags."""
    assert found("assert args.output_path\nmodel = Net().cuda()\n") == [(2, "DEV001")]
    assert found("if args.n_gpu:\n    model = Net().cuda()\n") == []


# Lines that place nothing or load what the program itself wrote from CPU tensors.
NO_HAZARD = {
    "type_test_makes_no_tensor": """
        if isinstance(x, torch.cuda.FloatTensor) or type(x) == torch.cuda.HalfTensor:
            x = x.float()
        """,
    "device_string_only_compared_or_formatted": """
        DEVICE = "cuda"
        def describe(x):
            if x.device.type == DEVICE:
                return "torch." + DEVICE + ".FloatTensor"
            return f"torch.{DEVICE}.FloatTensor"
        """,
}


@pytest.mark.parametrize("source", NO_HAZARD.values(), ids=NO_HAZARD.keys())
def test_type_tests_and_names_that_place_nothing_are_quiet(source: str) -> None:
    """A type test is not a CUDA tensor; a device name only compared or formatted places nothing."""
    assert found(source) == []


def test_a_file_another_script_saved_from_cpu_tensors_needs_no_map_location(tmp_path: Path) -> None:
    """features.pt written from CPU tensors by a preprocessing script elsewhere in the program loads anywhere."""
    files = {
        "tools/extract.py": """
            import torch
            model = Net().to("cuda" if torch.cuda.is_available() else "cpu")
            torch.save(model(images).cpu(), "features.pt")
            """,
        "train.py": "import torch\nfeatures = torch.load('features.pt', weights_only=True)\n",
    }
    assert where(tree(tmp_path, files), tmp_path) == []
    (tmp_path / "tools/extract.py").write_text("import torch\nmodel = Net().cuda()\n"
                                              "torch.save(model(images), 'features.pt')\n")
    assert where(tree(tmp_path, {}), tmp_path) == [("tools/extract.py", 2, "DEV001"), ("train.py", 2, "DEV003")]


def test_a_checkpoint_saved_from_cpu_tensors_is_matched_through_the_names_its_path_is_built_from() -> None:
    """save_network() writes `net.cpu().state_dict()` to "%s_net_%s.pth"; load_network() reads that file back."""
    source = """
        def save_network(net, label, epoch):
            save_filename = "%s_net_%s.pth" % (epoch, label)
            save_path = os.path.join(opt.checkpoints_dir, save_filename)
            torch.save(net.cpu().state_dict(), save_path)
            net.to(opt.device)

        def load_network(net, label, epoch):
            save_filename = "%s_net_%s.pth" % (epoch, label)
            save_path = os.path.join(opt.checkpoints_dir, save_filename)
            net.load_state_dict(torch.load(save_path, weights_only=True))
        """
    assert found(source) == []
    assert found(source.replace("net.cpu().state_dict()", "net.state_dict()")) == [(11, "DEV003")]


def test_a_method_is_not_matched_by_its_name_alone(tmp_path: Path) -> None:
    """Another library's `parse()` called after NCCL starts does not make the options parser's `parse()` CUDA-only."""
    files = {
        "options.py": """
            import argparse
            import torch
            class Options:
                def __init__(self):
                    self.parser = argparse.ArgumentParser()
                    self.parser.add_argument("--gpu", type=int, default=0)
                def parse(self):
                    opt = self.parser.parse_args()
                    torch.cuda.set_device(opt.gpu)
                    return opt
            """,
        "train.py": """
            from options import Options
            opt = Options().parse()
            """,
        "evaluate.py": """
            import torch.distributed as dist
            def main(reader, text):
                dist.init_process_group("nccl")
                return reader.parse(text)
            """,
    }
    assert where(tree(tmp_path, files), tmp_path) == [("options.py", 10, "DEV012")]


def test_calls_are_resolved_by_scope_and_by_the_class_an_object_was_made_from(tmp_path: Path) -> None:
    """`train()` is the module's function, not a `Trainer.train` method; `trainer.fit()` is Trainer's fit."""
    files = {
        "engine.py": """
            class Trainer:
                def fit(self, x):
                    return x.cuda()
                def train(self):
                    return self
            """,
        "train.py": """
            import torch.distributed as dist
            from engine import Trainer
            def train(x=None):
                return x.cuda()
            def ddp_main(x):
                dist.init_process_group("nccl")
                train(x)
                trainer = Trainer()
                trainer.fit(x)
            def cpu_main(x):
                trainer = Trainer()
                trainer.train()
            """,
    }
    assert where(tree(tmp_path, files), tmp_path) == []
    script = (tmp_path / "train.py").read_text()
    (tmp_path / "train.py").write_text(script + "if __name__ == '__main__':\n    train(load())\n")
    assert where(tree(tmp_path, {}), tmp_path) == [("train.py", 5, "DEV001")]


def test_the_finding_says_when_the_lint_cannot_tell() -> None:
    """A function no call was found to: reported, and the message says the lint cannot tell what its callers check."""
    [finding] = devicelint.lint_source("def to_gpu(x):\n    return x.cuda()\n", "helpers.py")
    assert finding.format().endswith(
        "DEV001 .cuda() outside a CUDA guard: no call to to_gpu() was found, so the lint cannot tell whether its "
        "callers check for CUDA first")
    [called] = devicelint.lint_source("def to_gpu(x):\n    return x.cuda()\nto_gpu(batch)\n", "helpers.py")
    assert called.format().endswith("DEV001 .cuda() outside a CUDA guard")


def test_porting_reports_every_cuda_call_guarded_or_not() -> None:
    """The generated project's `porting = true`: every .cuda() is reported, the guarded one says so."""
    source = "if torch.cuda.is_available():\n    x = x.cuda()\ny = y.cuda()\n"
    assert found(source) == [(3, "DEV001")]
    ported = devicelint.lint_source(source, "train.py", porting=True)
    assert [(f.line, f.code) for f in ported] == [(2, "DEV001"), (3, "DEV001")]
    assert ported[0].detail == "guarded, but it still pins device 0"


def test_the_projects_own_lint_reports_every_cuda_call(tmp_path: Path) -> None:
    """A .cuda() added anywhere the project's lint looks (its pyproject's paths, porting on) fails the run."""
    project = tmp_path / "project"
    shutil.copytree(LINT.parent.parent, project, ignore=shutil.ignore_patterns(
        "tests", ".git", ".venv", "runs", "data", "*.egg-info", "__pycache__"))
    assert subprocess.run([sys.executable, "tools/devicelint.py"], cwd=project).returncode == 0
    kit = project / "{{ cookiecutter.package_name }}" / "devkit" / "resolve.py"
    kit.write_text(kit.read_text() + "\n\ndef _spare():\n    if torch.cuda.is_available():\n"
                                      "        return torch.ones(1).cuda()\n")
    (project / "train.py").write_text((project / "train.py").read_text() + "\n\ndef _unused(x):\n    return x.cuda()\n")
    result = subprocess.run([sys.executable, "tools/devicelint.py"], cwd=project, capture_output=True, text=True)
    assert result.returncode == 1
    assert sorted(line.split(":")[0] for line in result.stdout.splitlines() if " DEV001 " in line) == \
        sorted([str(Path("train.py")), str(Path("{{ cookiecutter.package_name }}", "devkit", "resolve.py"))])


def test_a_file_marked_as_a_device_module_may_name_devices() -> None:
    """`# devicelint: device-module` on a line of its own: DEV002/DEV012 quiet there; in a string it is no marker."""
    source = "d = torch.device('cuda:1')\ntorch.cuda.synchronize()\n"
    assert found(source) == [(1, "DEV002"), (2, "DEV012")]
    assert found("# devicelint: device-module -- resolving devices is this file's job\n" + source) == []
    assert found('NOTE = """\n# devicelint: device-module\n"""\n' + source) == [(4, "DEV002"), (5, "DEV012")]
    assert found("x = 1  # devicelint: device-module\n" + source) == [(2, "DEV002"), (3, "DEV012")]


def test_the_device_kit_copied_into_another_project_is_lint_clean(tmp_path: Path) -> None:
    """`cp -r devkit/ REPO/` then the lint on REPO (no pyproject settings): exit 0, and the markers are why."""
    shutil.copytree(PACKAGE_DIR / "devkit", tmp_path / "devkit", ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run([sys.executable, str(LINT), "."], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    for module in (tmp_path / "devkit").glob("*.py"):
        module.write_text("".join(line for line in module.read_text().splitlines(keepends=True)
                                  if "devicelint: device-module" not in line))
    unmarked = subprocess.run([sys.executable, str(LINT), "."], cwd=tmp_path, capture_output=True, text=True)
    assert unmarked.returncode == 1 and " DEV002 " in unmarked.stdout


def test_allow_devices_in_still_names_files_that_may_name_devices(tmp_path: Path) -> None:
    """--allow-devices-in and [tool.devicelint] allow-devices-in keep working beside the in-file marker."""
    (tmp_path / "config.py").write_text("DEVICE = 'cuda'\n")
    assert devicelint.main([str(tmp_path / "config.py")]) == 1
    assert devicelint.main(["--allow-devices-in", "config.py", str(tmp_path / "config.py")]) == 0
    (tmp_path / "pyproject.toml").write_text('[tool.devicelint]\nallow-devices-in = ["config.py"]\n')
    assert devicelint.main([str(tmp_path / "config.py")]) == 0


# Round 5: shapes of the false alarms and misses held-out set 4 showed (reduced, not copied).
ROUND5_QUIET = {
    "cuda_type_test_guards": """
        def pad(out, planes):
            zero_pads = torch.zeros(out.size(0), planes)
            if isinstance(out.data, torch.cuda.FloatTensor):
                zero_pads = zero_pads.cuda()
            if out.type() == "torch.cuda.HalfTensor":
                zero_pads = zero_pads.half().cuda()
            return torch.cat([out, zero_pads], 1)
        """,
    "backend_asked_for_by_name": """
        def acquire(args):
            if args.gpu_type == "mps":
                return torch.device("mps")
            return torch.device("cpu")
        """,
}


@pytest.mark.parametrize("source", ROUND5_QUIET.values(), ids=ROUND5_QUIET.keys())
def test_round5_false_alarms_stay_quiet(source: str) -> None:
    """A CUDA type test guards like `x.is_cuda`; a backend the user names by hand is asked for."""
    assert found(source) == []


ROUND5_FOUND = {
    "accelerator_default_of_any_option": ("""
        parser.add_argument("--gpu_type", type=str, default="cuda", help="cuda or mps")
        """, [(2, "DEV002")]),
    "device_map_names_the_device": ("""
        pipeline = Pipeline.from_pretrained("org/model", device_map="cuda")
        """, [(2, "DEV002")]),
}


@pytest.mark.parametrize(("source", "expected"), ROUND5_FOUND.values(), ids=ROUND5_FOUND.keys())
def test_round5_misses_are_found(source: str, expected: list) -> None:
    """An argparse default naming an accelerator whatever the option is called; `device_map="cuda"`."""
    assert found(source) == expected


def test_code_nothing_calls_is_unreached_even_when_wrapped_or_named_like_another_files(tmp_path: Path) -> None:
    """`@torch.no_grad()` registers nothing; another script's own `fliplr()` calls are not calls of this one;
    `vars(opt)` evaluates no names."""
    files = {
        "evaluate.py": """
            import torch
            @torch.no_grad()
            def create_submission(model, images):
                return model(images.cuda())
            @app.route("/predict")
            def predict(images):
                return images.cuda()
            """,
        "train.py": """
            import yaml
            def fliplr(img):
                return img.flip(3).cuda()
            yaml.dump(vars(opt), stream)
            """,
        "test.py": """
            def fliplr(img):
                return img.flip(3)
            img = fliplr(load())
            """,
    }
    assert where(tree(tmp_path, files), tmp_path) == [("evaluate.py", 8, "DEV001")]


def test_a_tool_built_on_a_cuda_only_extension_runs_only_where_cuda_exists(tmp_path: Path) -> None:
    """A script importing a module that imports a CUDAExtension at its top level cannot run without CUDA."""
    files = {
        "extension/setup.py": "setup(ext_modules=[CUDAExtension('gnn_propagate', ['propagate.cu'])])\n",
        "reranking.py": "import torch\nimport gnn_propagate\ndef rerank(x):\n    return gnn_propagate.run(x)\n",
        "evaluate_rerank.py": "import torch\nfrom reranking import rerank\nfeatures = load().cuda()\n",
        "evaluate.py": "import torch\nfeatures = load().cuda()\n",
    }
    assert where(tree(tmp_path, files), tmp_path) == [("evaluate.py", 2, "DEV001")]


def test_a_checkpoint_a_helper_saved_earlier_in_the_same_run_is_not_from_elsewhere(tmp_path: Path) -> None:
    """EarlyStopping's __call__ saves checkpoint.pth; train() loads it back at its end: one process, its own file."""
    files = {
        "utils/tools.py": """
            import torch
            class EarlyStopping:
                def __call__(self, loss, model, path):
                    torch.save(model.state_dict(), path + "/" + "checkpoint.pth")
            """,
        "exp.py": """
            import torch
            from utils.tools import EarlyStopping
            def train(model, path):
                model.to(device)
                early_stopping = EarlyStopping()
                early_stopping(1.0, model, path)
                best_model_path = path + "/" + "checkpoint.pth"
                model.load_state_dict(torch.load(best_model_path))

            def test(model, setting):
                model.load_state_dict(torch.load("./checkpoints/" + setting + "/checkpoint.pth"))

            if __name__ == "__main__":
                train(Net(), "out")
                test(Net(), "run1")
            """,
    }
    assert where(tree(tmp_path, files), tmp_path) == [("exp.py", 12, "DEV003"), ("exp.py", 12, "DEV004")]


def test_a_default_every_caller_overrides_is_never_used_in_an_application(tmp_path: Path) -> None:
    """`device='cuda'` defaults of a class and a function every call in the application overrides are quiet;
    in an installable package (its users are callers too) they are reported."""
    files = {
        "models.py": """
            import torch
            class MIC(torch.nn.Module):
                def __init__(self, size, device="cuda"):
                    self.device = device
            def prepare_z(n, device="cuda"):
                return torch.randn(n, device=device)
            """,
        "train.py": """
            from models import MIC, prepare_z
            layer = MIC(8, device=torch.device("cpu"))
            z = prepare_z(4, device=layer.device)
            """,
    }
    assert where(tree(tmp_path, files), tmp_path) == []
    (tmp_path / "setup.py").write_text("from setuptools import find_packages, setup\n"
                                       "setup(name='p', packages=find_packages())\n")
    assert where(tree(tmp_path, {}), tmp_path) == [("models.py", 4, "DEV002"), ("models.py", 6, "DEV002")]


def test_only_an_explicit_cpu_save_vouches_for_a_file_other_scripts_load(tmp_path: Path) -> None:
    """A helper file that moves nothing itself may save what a caller put on the GPU: other files still need
    map_location; a save of `.cpu()` tensors vouches."""
    files = {
        "utils/tools.py": "import torch\ndef save(model, path):\n"
                          "    torch.save(model.state_dict(), path + '/best.pth')\n",
        "train.py": "import torch\nfrom utils.tools import save\nmodel = Net().to(device)\nsave(model, out)\n",
        "test.py": "import torch\nstate = torch.load(out + '/best.pth', weights_only=True)\n",
    }
    assert where(tree(tmp_path, files), tmp_path) == [("test.py", 2, "DEV003")]
    (tmp_path / "utils/tools.py").write_text(
        "import torch\ndef save(model, path):\n    torch.save({k: v.cpu() for k, v in model.state_dict().items()},"
        " path + '/best.pth')\n")
    assert where(tree(tmp_path, {}), tmp_path) == []


def test_a_config_flag_set_true_is_not_the_command_lines_flag_of_the_same_name() -> None:
    """`cfg.CUDA = True` does not make `args.cuda` (`--cuda`, store_true) a wish; `args.cuda > 0` asks like `args.cuda`
    (held-out 5, after its score)."""
    source = """
        parser.add_argument("--cuda", dest="cuda", action="store_true")
        args = parser.parse_args()
        if args.cuda:
            cfg.CUDA = True
            model.cuda()
        if args.cuda > 0:
            batch = batch.cuda()
        """
    assert found(source) == []
    assert found(source.replace("cfg.CUDA = True", "args.cuda = True")) == [(6, "DEV001"), (8, "DEV001")]


# Round 7: a GPU id whose default is negative (held-out 6's DGL-KE shapes, reduced, not copied).
ROUND7_QUIET = {
    "parameter_id_defaults_to_minus_one": """
        def lookup(table, index, gpu_id=-1):
            rows = table[index]
            if gpu_id >= 0:
                rows = rows.cuda(gpu_id)
            return rows
        lookup(torch.zeros(4, 2), 0)
        """,
    "conditional_expression_of_such_an_id": """
        def place(x, gpu=-1):
            return x.cuda(gpu) if gpu >= 0 else x
        place(torch.zeros(2))
        """,
    "device_string_chosen_by_such_an_id": """
        def place(x, gpu=-1):
            return x.to("cpu" if gpu < 0 else "cuda:" + str(gpu))
        place(torch.zeros(2))
        """,
    "option_list_of_ids_defaults_to_minus_one": """
        parser.add_argument("--gpu", type=int, default=[-1], nargs="+", help="gpu ids, -1: CPU")
        args = parser.parse_args()
        device = torch.device("cpu") if args.gpu[0] < 0 else torch.device("cuda:" + str(args.gpu[0]))
        """,
}


@pytest.mark.parametrize("source", ROUND7_QUIET.values(), ids=ROUND7_QUIET.keys())
def test_a_gpu_id_whose_default_is_negative_guards_its_gpu_branch(source: str) -> None:
    """`if gpu_id >= 0:` with `gpu_id=-1` (or `--gpu default=[-1]`) takes the GPU branch only on an explicit id."""
    assert found(source) == []


def test_an_id_option_another_script_declares_guards_a_helper_that_is_passed_it(tmp_path: Path) -> None:
    """`get_dev(gpu)` has no default of its own: the scripts' `--gpu default=-1` is what reaches it."""
    files = {
        "train.py": """
            import argparse
            from models import get_dev
            parser = argparse.ArgumentParser()
            parser.add_argument("--gpu", type=int, default=-1)
            args = parser.parse_args()
            device = get_dev(args.gpu)
            """,
        "models.py": """
            import torch
            def get_dev(gpu):
                return torch.device("cpu") if gpu < 0 else torch.device("cuda:" + str(gpu))
            """,
    }
    assert where(tree(tmp_path, files), tmp_path) == []
    files["train.py"] = files["train.py"].replace("default=-1", "default=0")
    assert where(tree(tmp_path, files), tmp_path) == [("models.py", 4, "DEV002")]


ROUND7_FOUND = {
    "option_id_defaults_to_gpu_zero": ("""
        parser.add_argument("--gpu", type=int, default=0)
        args = parser.parse_args()
        if args.gpu >= 0:
            model = model.cuda(args.gpu)
        """, [(5, "DEV001")]),
    "parameter_id_defaults_to_gpu_zero": ("""
        def lookup(table, index, gpu_id=0):
            rows = table[index]
            if gpu_id >= 0:
                rows = rows.cuda(gpu_id)
            return rows
        lookup(torch.zeros(4, 2), 0)
        """, [(5, "DEV001")]),
    "option_list_of_ids_defaults_to_gpu_zero": ("""
        parser.add_argument("--gpu", type=int, default=[0], nargs="+")
        args = parser.parse_args()
        device = torch.device("cpu") if args.gpu[0] < 0 else torch.device("cuda:" + str(args.gpu[0]))
        """, [(4, "DEV002")]),
    "id_without_a_visible_default": ("""
        def lookup(table, index, gpu_id):
            rows = table[index]
            if gpu_id >= 0:
                rows = rows.cuda(gpu_id)
            return rows
        lookup(torch.zeros(4, 2), 0, 0)
        """, [(5, "DEV001")]),
}


@pytest.mark.parametrize(("source", "expected"), ROUND7_FOUND.values(), ids=ROUND7_FOUND.keys())
def test_a_gpu_id_whose_default_is_a_gpu_guards_nothing(source: str, expected: list) -> None:
    """`--gpu default=0` (or `gpu_id=0`, `[0]`) takes `if gpu >= 0:` by default; an id with no default is unknown."""
    assert found(source) == expected


# Round 8: a data set's own files, and a sampler that needs the process group (held-out 6's OGB and VICReg
# shapes, reduced, not copied).
ROUND8_QUIET = {
    "split_file_of_a_dataset_class_not_based_on_dataset": """
        class GraphDataset(object):
            def __init__(self, root):
                self.root = root
            def get_split(self):
                return torch.load(os.path.join(self.root, "split", "split_dict.pt"))
        model = Net().to(device)
        GraphDataset(args.root).get_split()
        """,
    "processed_file_of_an_in_memory_dataset": """
        class Molecules(InMemoryDataset):
            def __init__(self, root):
                super().__init__(root)
                self.data, self.slices = torch.load(self.processed_paths[0])
        model = Net().to(device)
        Molecules(args.root)
        """,
    "cuda_after_a_sampler_that_asks_the_default_group": """
        def main(args):
            init_distributed_mode(args)
            sampler = torch.utils.data.distributed.DistributedSampler(dataset, shuffle=True)
            model = Net().cuda(args.gpu)
        main(parser.parse_args())
        """,
}


@pytest.mark.parametrize("source", ROUND8_QUIET.values(), ids=ROUND8_QUIET.keys())
def test_a_data_sets_files_and_code_after_a_group_sampler_are_quiet(source: str) -> None:
    """A data set class's own loads hold host data; `DistributedSampler(d)` without a rank needs a process group."""
    assert [code for _, code in found(source)] in ([], ["DEV004"])


ROUND8_FOUND = {
    "checkpoint_loaded_by_a_trainer_not_a_data_set": ("""
        class Trainer(object):
            def resume(self, path):
                self.model.load_state_dict(torch.load(path, weights_only=True))
        model = Net().to(device)
        Trainer().resume(args.resume)
        """, [(4, "DEV003")]),
    "sampler_told_its_replicas_and_rank": ("""
        def main(args):
            sampler = DistributedSampler(dataset, num_replicas=1, rank=0)
            model = Net().cuda()
        main(parser.parse_args())
        """, [(4, "DEV001")]),
    "sampler_only_on_one_side_of_a_conditional": ("""
        def main(args, n_gpus):
            sampler = DistributedSampler(dataset) if n_gpus > 1 else None
            device = torch.device("cuda:0")
        main(parser.parse_args(), 0)
        """, [(4, "DEV002")]),
}


@pytest.mark.parametrize(("source", "expected"), ROUND8_FOUND.values(), ids=ROUND8_FOUND.keys())
def test_loads_outside_data_sets_and_code_no_group_sampler_guards_are_reported(source: str, expected: list) -> None:
    """A trainer's checkpoint load is DEV003; a sampler told its rank, or on one side of an `if`, guards nothing."""
    assert found(source) == expected


# Round 9 (held-out 7's causes): shapes reduced from the repositories, not copied.
def test_a_script_stopping_at_an_import_the_repository_lacks_reaches_nothing(tmp_path: Path) -> None:
    """`from csml import CSML` with no csml module but a CSML class elsewhere: a stale copy, and what only it names."""
    findings = tree(tmp_path, {
        "backup/mainv0.py": "import torch\nfrom csml import CSML\nnet = CSML()\nx = torch.zeros(2).cuda()\n",
        "backup/csmlv0.py": """
            import torch
            def inner_train(x):
                return x.cuda()
            class CSML:
                def train(self, x):
                    return inner_train(x)
            """,
        "train.py": "import torch\nfrom tqdm import tqdm\nfrom model import Net\nnet = Net().cuda()\n",
        "lib/model.py": "class Net:\n    pass\n",
    })
    assert where(findings, tmp_path) == [("train.py", 4, "DEV001")]


def test_a_method_returning_where_the_weights_are_guards_like_an_availability_check() -> None:
    """`x.cuda() if self.is_cuda() else x`, `is_cuda()` returning a parameter's `is_cuda`, runs only on a GPU."""
    assert found("""
        class Encoder(nn.Module):
            def is_cuda(self):
                return self.lstm.bias_hh_l0.data.is_cuda
            def encode(self, batch):
                batch = batch.cuda() if self.is_cuda() else batch
                if self.is_cuda():
                    batch = batch.cuda()
                return batch
        Encoder().encode(torch.zeros(2))
        """) == []


def test_a_device_literal_passed_by_position_to_a_device_parameter_is_reported(tmp_path: Path) -> None:
    """`model.sample(8, 'cuda')` into `def sample(self, num_samples, current_device)`, through a star re-export."""
    findings = tree(tmp_path, {
        "models/__init__.py": "from .vae import *\n",
        "models/vae.py": "class VAE:\n    def sample(self, num_samples, current_device):\n        return num_samples\n",
        "tests/test_vae.py": """
            import unittest
            from models import VAE
            class TestVAE(unittest.TestCase):
                def setUp(self):
                    self.model = VAE()
                def test_sample(self):
                    self.model.sample(8, 'cuda')
                    self.model.sample('cuda', 8)
            """,
    })
    assert where(findings, tmp_path) == [("tests/test_vae.py", 8, "DEV002")]


def test_modules_held_whole_in_a_saved_dict_are_reported() -> None:
    """`{'encoder': encoder, ...}` saved pickles the modules (DEV006); their state_dicts and an args dict do not."""
    assert found("""
        def save_checkpoint(epoch, encoder, decoder, encoder_optimizer):
            state = {'epoch': epoch, 'encoder': encoder, 'decoder': decoder, 'encoder_optimizer': encoder_optimizer}
            torch.save(state, 'checkpoint.pth.tar')
        def save_state(model, optimizer):
            model_args = dict(n_layer=2)
            torch.save({'model': model.state_dict(), 'optimizer': optimizer, 'model_args': model_args}, 'ckpt.pt')
        """) == [(4, "DEV006")]


def test_a_function_an_eval_builds_the_name_of_is_reached(tmp_path: Path) -> None:
    """`eval('models.' + name + '.get_net')(cfg)` reaches get_net, and the class only it builds."""
    findings = tree(tmp_path, {
        "models/pose.py": """
            import torch
            class PoseNet:
                def init_weights(self, path):
                    return torch.load(path, weights_only=True)
            def get_net(cfg):
                return PoseNet().init_weights(cfg)
            """,
        "train.py": "import models\nmodel = eval('models.' + 'pose' + '.get_net')('w.pth')\n",
    })
    assert where(findings, tmp_path) == [("models/pose.py", 5, "DEV003")]


def test_a_wrapper_passed_to_a_function_that_saves_its_state_dict_is_reported() -> None:
    """`train(args, model)` with `model = nn.DataParallel(net)`: train() saves `module.` keys (DEV009)."""
    assert found("""
        def train(args, model, optimizer):
            torch.save(model.state_dict(), "model.pt")
        def export(model):
            model = model.module if hasattr(model, "module") else model
            torch.save(model.state_dict(), "export.pt")
        def log(model):
            torch.save(model.state_dict(), "plain.pt")
        if __name__ == "__main__":
            model = nn.DataParallel(Net())
            train(args, model, optimizer)
            export(model)
            log(Net())
        """) == [(3, "DEV009")]


def test_a_file_that_does_not_parse_says_it_was_not_checked() -> None:
    """Python 2 print statements: DEV000 says that nothing in the file was checked, and why that may be."""
    [finding] = devicelint.lint_source('print "hi"\nmodel.cuda()\n', "old.py")
    assert finding.code == "DEV000" and finding.detail.endswith("nothing in this file was checked (Python 2 code?)")


def test_a_classs_own_cuda_method_is_not_torchs() -> None:
    """`self.cuda(*items)` calling the class's `def cuda(self, *args)` (a move to a chosen device) is no `.cuda()`;
    an own `cuda()` that calls torch's `.cuda()` inside is reported at both calls, like an nn.Module's."""
    assert found("""
        class Trainer:
            def __init__(self, device):
                self.device = device
            def cuda(self, *args):
                return (item.to(self.device) for item in args)
            def train(self, batch):
                images, masks = self.cuda(*batch)
                return images
        class Sampler:
            def cuda(self):
                self.prob = self.prob.cuda()
        class Model(nn.Module):
            def run(self, x):
                return self.cuda()
        Trainer("cpu").train([])
        Model().run(1)
        Sampler().cuda()
        """) == [(12, "DEV001"), (15, "DEV001"), (18, "DEV001")]


def test_a_map_location_parameter_defaulting_to_none_is_no_map_location() -> None:
    """`def load(path, map_location=None): torch.load(path, map_location, ...)`: callers get no map_location."""
    assert found("""
        def load_from_file(path, map_location=None):
            return torch.load(path, map_location, weights_only=True)
        def load_to(path, map_location):
            return torch.load(path, map_location, weights_only=True)
        def load_cpu(path, map_location=None):
            if map_location is None:
                map_location = "cpu"
            return torch.load(path, map_location=map_location, weights_only=True)
        """) == [(3, "DEV003")]


def test_unpickling_helpers_imported_by_name_and_lightnings_loader_are_reported() -> None:
    """`from torch.utils.model_zoo import load_url`; `Model.load_from_checkpoint(path)` (Lightning's, not ours)."""
    assert found("""
        from torch.utils.model_zoo import load_url
        weights = load_url("https://example.com/s3fd.pth")
        model = DeepSpeech.load_from_checkpoint(args.model_path)
        """) == [(3, "DEV004"), (4, "DEV004")]


def test_a_test_loading_what_it_wrote_or_ships_beside_itself_loads_nothing_from_elsewhere(tmp_path: Path) -> None:
    """pytest's fresh `tmp_path` holds only what the test wrote; `__file__`'s folder holds the repository's test data
    (also through fixtures and a conftest); the same loads in application code are reported."""
    findings = tree(tmp_path, {
        "tests/conftest.py": """
            import pytest
            from pathlib import Path
            _DATA_DIR = Path(__file__).parent / "data"
            @pytest.fixture
            def data_dir():
                return _DATA_DIR
            """,
        "tests/test_io.py": """
            import pytest, torch
            from app import main
            @pytest.fixture
            def checkpoint_path(data_dir):
                return data_dir / "example.ckpt"
            def test_bundled(checkpoint_path):
                assert torch.load(checkpoint_path)
            def test_round_trip(tmp_path):
                main(tmp_path)
                last = tmp_path / "model_0" / "last.ckpt"
                assert Model.load_from_checkpoint(last)
                assert torch.load(last)
            """,
        "app.py": """
            import sys, torch
            def main(out):
                return torch.load(sys.argv[1])
            """,
    })
    assert where(findings, tmp_path) == [("app.py", 4, "DEV003"), ("app.py", 4, "DEV004")]


@pytest.mark.parametrize(("other", "field", "expected"), [
    ("True", "True", [("train.py", 7, "DEV001"), ("train.py", 10, "DEV002")]),
    ("False", "False", []),
], ids=["true-everywhere-guards-nothing", "a-real-switch-guards"])
def test_a_config_constant_set_true_guards_nothing(tmp_path: Path, other: str, field: str, expected) -> None:
    """`GPU = cfg['gpu_train']` with `'gpu_train': True` in every config dict, and `cfg.model.cuda` of a config
    class field `cuda: bool = True`, state a wish: the code under them runs on a machine without CUDA. A key some
    config sets False, or a field that defaults to False, is a real switch and still guards."""
    findings = tree(tmp_path, {
        "config.py": """
            from dataclasses import dataclass
            cfg_a = {'name': 'a', 'gpu_train': True}
            cfg_b = {'name': 'b', 'gpu_train': OTHER}
            @dataclass
            class ModelConfig:
                cuda: bool = FIELD
            @dataclass
            class InferenceConfig:
                model: ModelConfig = ModelConfig()
            """.replace("OTHER", other).replace("FIELD", field),
        "train.py": """
            import torch
            from config import cfg_a, InferenceConfig
            GPU = cfg_a['gpu_train']
            def loss(x):
                if GPU:
                    x = x.cuda()
                return x
            def transcribe(cfg: InferenceConfig):
                return torch.device("cuda" if cfg.model.cuda else "cpu")
            loss(torch.zeros(1))
            transcribe(InferenceConfig())
            """,
    })
    assert where(findings, tmp_path) == expected


def test_the_top_of_a_script_whose_main_starts_nccl_runs_only_where_cuda_is(tmp_path: Path) -> None:
    """`device = torch.device("cuda")` above a `__main__` that starts NCCL runs only as that script; the same line in a
    module another file imports runs wherever the importer does."""
    script = """
        import torch
        import torch.distributed as dist
        device = torch.device("cuda")
        if __name__ == "__main__":
            dist.init_process_group(backend="nccl")
            print(device)
        """
    findings = tree(tmp_path, {"train.py": script, "tools/launch.py": script, "run.py": "import launch\n"})
    assert where(findings, tmp_path) == [("tools/launch.py", 4, "DEV002")]


# Round 11 (tuned on held-out 9): branches no caller takes, files the code ships or writes itself, refusals.
def test_a_file_shipped_beside_the_code_is_unpickled_from_nowhere_else() -> None:
    """A path built from `__file__` (directly or through the names it is built from) is the repository's own file:
    no DEV004, though DEV003 still asks for map_location; a name a parameter or a download may bind is the user's."""
    source = """
        import os
        import torch
        from pathlib import Path
        def superglue(weights="indoor"):
            path = Path(__file__).parent / "weights/superglue_{}.pth".format(weights)
            return torch.load(str(path))
        ROOT = os.path.dirname(os.path.abspath(__file__))
        def mtcnn():
            state_path = os.path.join(ROOT, "data", "pnet.pt")
            return torch.load(state_path)
        def upsampler(model_path):
            if model_path.startswith("https://"):
                model_path = download(model_path, os.path.join(ROOT, "weights"))
            return torch.load(model_path, map_location="cpu")
        def fetch(url):
            path = download(url)
            if not os.path.exists(path):
                path = os.path.join(ROOT, "fallback.pth")
            return torch.load(path, map_location="cpu")
        """
    assert found(source) == [(7, "DEV003"), (11, "DEV003"), (15, "DEV004"), (20, "DEV004")]


def test_a_flag_refused_without_cuda_is_set_only_where_cuda_is() -> None:
    """`if cuda and not torch.cuda.is_available(): raise` makes `cuda` an availability-checked flag past it."""
    source = """
        import torch
        cuda = not opt.nocuda
        if cuda and not torch.cuda.is_available():
            raise Exception("No GPU found, please run with --nocuda")
        device = torch.device("cuda" if cuda else "cpu")
        """
    assert found(source) == []
    assert found(source.replace('raise Exception("No GPU found, please run with --nocuda")', "print('no GPU')")) \
        == [(6, "DEV002")]


DLA = """
    import torch
    from torch.utils import model_zoo
    class DLA(torch.nn.Module):
        def load_pretrained_model(self, data="imagenet", name="dla34", hash="ba72cf86"):
            if name.endswith(".pth"):
                weights = torch.load(data + name)
            else:
                weights = model_zoo.load_url(data + name + hash, map_location="cpu", weights_only=True)
            self.load_state_dict(weights)
    def dla34(pretrained):
        model = DLA()
        if pretrained:
            model.load_pretrained_model(data="imagenet", name="dla34")
        return model
    def dla46_c(pretrained=None):
        model = DLA()
        if pretrained is not None:
            model.load_pretrained_model(pretrained, NAME)
        return model
    """


@pytest.mark.parametrize(("name", "expected"), [
    ('"dla46_c"', []),  # every caller leaves the default or passes a released name: the branch never runs
    ('"dla46_c.pth"', [("dla.py", 7, "DEV003"), ("dla.py", 7, "DEV004")]),  # one caller takes it
    ("pretrained", [("dla.py", 7, "DEV003"), ("dla.py", 7, "DEV004")]),  # not a constant: cannot tell
])
def test_a_branch_only_a_parameter_no_caller_gives_takes_is_unreached(tmp_path: Path, name: str, expected) -> None:
    """`if name.endswith(".pth"):` where the default and every caller's constant make it false reaches nothing."""
    files = {"dla.py": DLA.replace("NAME", name), "train.py": "from dla import dla34, dla46_c\nm = dla34(True)\n"}
    assert where(tree(tmp_path, files), tmp_path) == expected


def test_porting_reports_what_a_branch_no_caller_takes_holds(tmp_path: Path) -> None:
    """--porting (the generated project's own setting) reports every `.cuda()`, in an untaken branch too."""
    source = """
        import torch
        def helper(x, move=False):
            if move:
                return x.cuda()
            return x
        y = helper(torch.zeros(1))
        """
    assert where(tree(tmp_path, {"train.py": source}), tmp_path) == []
    assert where(tree(tmp_path, {}, porting=True), tmp_path) == [("train.py", 5, "DEV001")]


def test_a_hub_entry_points_branch_is_taken_by_torch_hubs_users(tmp_path: Path) -> None:
    """hubconf.py's functions are called from outside: `if pretrained:` there is taken whatever the repository
    passes."""
    hub = """
        import torch
        def detr(pretrained=False):
            if pretrained:
                return torch.hub.load_state_dict_from_url("https://x/detr.pth", map_location="cpu")
        def detr_panoptic(pretrained=False):
            return detr(pretrained=False)
        """
    assert where(tree(tmp_path, {"hubconf.py": hub}), tmp_path) == [("hubconf.py", 5, "DEV004")]


def test_a_load_at_a_path_the_code_saves_built_the_same_way_is_its_own_file(tmp_path: Path) -> None:
    """A template of the code's own (`"models/epo%d.tar" % epoch`) or a name bound once to a call given nothing, saved
    to in the same file, is the program's own file: no DEV004; a template filled with a command-line option is the
    user's path."""
    supervisor = """
        import torch
        class Supervisor:
            def save_model(self, epoch, state):
                torch.save(state, "models/epo%d.tar" % epoch)
            def load_model(self):
                return torch.load("models/epo%d.tar" % self._epoch_num, map_location="cpu")
        """
    main = """
        import torch
        import utils
        weight_file = utils.getFileName()
        if LOAD:
            state = torch.load(weight_file, map_location="cpu")
        torch.save(state, weight_file)
        """
    gan = """
        import argparse
        import torch
        parser = argparse.ArgumentParser()
        parser.add_argument("--dataset_name", default="facades")
        opt = parser.parse_args()
        state = torch.load("saved_models/%s/G.pth" % opt.dataset_name, map_location="cpu")
        torch.save(state, "saved_models/%s/G.pth" % opt.dataset_name)
        """
    findings = tree(tmp_path, {"supervisor.py": supervisor, "main.py": main, "gan.py": gan})
    assert where(findings, tmp_path) == [("gan.py", 7, "DEV004")]


def test_a_torch_device_default_every_caller_overrides_is_never_used(tmp_path: Path) -> None:
    """`device=torch.device("cuda")` as a default is quiet where every call in the application passes the device, as
    a `"cuda"` string default is; one call leaving it out makes it the device used."""
    files = {
        "smplify.py": """
            import torch
            class TemporalSMPLify:
                def __init__(self, step_size=1e-2, device=torch.device("cuda")):
                    self.device = device
            """,
        "demo.py": """
            import torch
            from smplify import TemporalSMPLify
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            smplify = TemporalSMPLify(step_size=0.1, device=device)
            """,
    }
    assert where(tree(tmp_path, files), tmp_path) == []
    (tmp_path / "fit.py").write_text("from smplify import TemporalSMPLify\nfit = TemporalSMPLify(0.1)\n")
    assert where(tree(tmp_path, {}), tmp_path) == [("smplify.py", 4, "DEV002")]
