"""The device linter across a file and its entry points (issue 33): what a script does on its way to a call.

Each snippet is a reduction (not a copy) of a pattern met in public training code: a false alarm
the labelling policy (README, "Device lint") says must stay quiet, or a hazard it says must be found.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import devicelint  # tools/devicelint.py: pytest puts tools/ on sys.path (pyproject.toml)

# The default rules (DEV001, .cuda(), is one again since issue 44; it was opt-in from issue 33 on).
CHECKED = sorted({code for code, rule in devicelint.RULES.items() if rule.default} | {"DEV001"})


def codes(source: str, **options) -> list[str]:
    """The codes reported for a snippet, in order (the default rules unless `select` is given)."""
    options = {"select": CHECKED, **options} if "porting" not in options else options
    return [f.code for f in devicelint.lint_source(textwrap.dedent(source), "train.py", **options)]


def tree_codes(tmp_path: Path, files: dict[str, str], **options) -> list[tuple[str, int, str]]:
    """(file, line, code) for a small project written to tmp_path and linted as one tree."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    found = devicelint.lint_paths([str(tmp_path)], **({"select": CHECKED, **options} if "porting" not in options
                                                      else options))
    return [(Path(f.path).relative_to(tmp_path).as_posix(), f.line, f.code) for f in found]


# Code a script reaches only after starting NCCL or checking for CUDA, wherever that happens.
CUDA_ONLY = {
    "nccl_in_a_setup_helper": """
        def setup(rank):
            dist.init_process_group("nccl", rank=rank)

        def train(model):
            model.cuda()
            torch.cuda.synchronize()

        def main():
            setup(0)
            train(Net())

        if __name__ == "__main__":
            main()
        """,
    "nccl_in_the_main_block": """
        def train(loader):
            for x in loader:
                x = x.cuda(non_blocking=True)

        if __name__ == "__main__":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            torch.distributed.init_process_group(backend="nccl")
            train(make_loader())
        """,
    "launcher_that_exits_without_cuda": """
        def init_distributed(args):
            if "RANK" in os.environ:
                args.rank = int(os.environ["RANK"])
            elif torch.cuda.is_available():
                args.rank = 0
            else:
                print("needs a GPU")
                sys.exit(1)
            dist.init_process_group(backend="nccl", rank=args.rank)

        def main(args):
            init_distributed(args)
            model = Net().cuda()
        """,
    "same_test_as_the_block_that_started_nccl": """
        def worker(args):
            if args.distributed:
                dist.init_process_group(backend=args.dist_backend)
            if args.distributed:
                model.cuda()
            else:
                raise NotImplementedError("only DDP")
            criterion = nn.CrossEntropyLoss().cuda()

        parser.add_argument("--dist-backend", default="nccl")
        """,
    "collective_makes_the_caller_cuda_only": """
        class MoCo(nn.Module):
            def _gather(self, x):
                out = [torch.ones_like(x) for _ in range(dist.get_world_size())]
                dist.all_gather(out, x)
                return torch.cat(out)

            def forward(self, x):
                k = self._gather(x)
                return k, torch.zeros(len(k), dtype=torch.long).cuda()
        """,
    "op_dispatched_after_the_caller_checked_the_device": """
        def _cuda_kernel(x):
            torch.cuda.synchronize()
            return x.cuda()

        def op(x):
            if x.device.type == "cuda":
                return _cuda_kernel(x)
            return x * 2
        """,
    "function_passed_to_a_launcher_under_a_guard": """
        def benchmark(x):
            torch.cuda.synchronize()

        if torch.cuda.is_available():
            run_all(benchmark, inputs)
        """,
    "tensorrt_engine_branch": """
        def load(w, device, engine):
            if engine:
                import tensorrt as trt
                if device.type == "cpu":
                    device = torch.device("cuda:0")
            return device
        """,
    "flag_named_for_what_it_gates": """
        pin = torch.cuda.is_available()
        def batches(loader):
            for x in loader:
                yield x.pin_memory() if pin else x
        """,
    "device_prefix_checked": """
        def place(device="cpu"):
            if device.startswith("cuda:"):
                torch.cuda.set_device(device)
        """,
    "branch_under_a_flag_switched_off": """
        classify = False
        if classify:
            classifier = torch.load("weights/resnet101.pt", map_location=device)
            classifier.cuda()
        """,
    "unreferenced_private_helper": """
        class Test(unittest.TestCase):
            def _helper(self, x):
                return op(x.cuda()).cpu()
        """,
}


@pytest.mark.parametrize("source", CUDA_ONLY.values(), ids=CUDA_ONLY.keys())
def test_code_reached_only_where_cuda_exists_is_quiet_by_default(source: str) -> None:
    """NCCL started or CUDA checked on the way (in a helper, __main__, a launcher, the caller): no finding."""
    assert codes(source) == []


@pytest.mark.parametrize("key", ["nccl_in_a_setup_helper", "nccl_in_the_main_block",
                                 "launcher_that_exits_without_cuda"])
def test_porting_reports_what_a_cuda_only_script_reaches(key: str) -> None:
    """--porting (for code becoming device-portable) reports every .cuda() a CUDA-only script makes."""
    assert "DEV001" in codes(CUDA_ONLY[key], porting=True)


REACHABLE = {
    "launcher_that_returns_without_nccl": ("""
        def init_distributed(args):
            if "RANK" not in os.environ:
                args.distributed = False
                return
            dist.init_process_group(backend="nccl")

        def main(args):
            init_distributed(args)
            model = Net().cuda()
        """, ["DEV001"]),
    "one_caller_without_nccl": ("""
        def train(model):
            model.cuda()

        def ddp_main():
            dist.init_process_group("nccl")
            train(Net())

        def single_main():
            train(Net())
        """, ["DEV001"]),
    "collective_under_num_gpus_hides_only_that_branch": ("""
        def reduce_loss(loss, num_gpus):
            loss = loss.cuda()
            if num_gpus > 1:
                dist.all_reduce(loss)
                loss = loss.cuda() / num_gpus
            return loss
        """, ["DEV001"]),
    "gpu_flag_every_caller_sets_true": ("""
        def build(model, gpu):
            if gpu:
                model = model.cuda()
            return model

        def main():
            return build(Net(), gpu=True)
        """, ["DEV001"]),
    "gpu_flag_passed_true_by_position": ("""
        class Loss(nn.Module):
            def __init__(self, classes, use_gpu):
                self.use_gpu = use_gpu

            def forward(self, target):
                if self.use_gpu:
                    target = target.cuda()
                return target

        criterion = Loss(21, True)
        """, ["DEV001"]),
    "gpu_count_asked_for_is_no_check": ("""
        def setup(gpus):
            if not (gpus >= 1 and gpus & (gpus - 1) == 0):
                raise ValueError("--gpus must be a power of two")
            device = torch.device("cuda", 0)
        """, ["DEV002"]),
    "flag_that_negates_an_opt_out": ("""
        opt.cuda = not opt.no_cuda
        device = torch.device("cuda" if opt.cuda else "cpu")
        """, ["DEV002"]),
    "nccl_started_on_one_path_only": ("""
        def main(args):
            if args.distributed:
                dist.init_process_group("nccl")
            model = Net().cuda()
        """, ["DEV001"]),
    "nccl_started_after_the_call": ("""
        if __name__ == "__main__":
            model = Net().cuda()
            if args.distributed:
                dist.init_process_group("nccl")
        """, ["DEV001"]),
}


@pytest.mark.parametrize(("source", "expected"), REACHABLE.values(), ids=REACHABLE.keys())
def test_code_a_cpu_run_reaches_is_still_reported(source: str, expected: list[str]) -> None:
    """A path without NCCL or a CUDA check still reaches the call: reported."""
    assert codes(source) == expected


def test_a_launcher_in_another_module_is_followed(tmp_path: Path) -> None:
    """`utils.init_distributed_mode(args)` that exits without CUDA makes the script's later calls CUDA-only."""
    files = {
        "utils.py": """
            import sys, torch, torch.distributed as dist
            def init_distributed_mode(args):
                if not torch.cuda.is_available():
                    sys.exit("needs a GPU")
                dist.init_process_group(backend="nccl")
            """,
        "train.py": """
            import utils
            def main(args):
                utils.init_distributed_mode(args)
                model = Net().cuda()

            if __name__ == "__main__":
                main(parse_args())
            """,
    }
    assert tree_codes(tmp_path, files) == []
    (tmp_path / "utils.py").write_text("def init_distributed_mode(args):\n    pass\n")
    assert tree_codes(tmp_path, {}) == [("train.py", 5, "DEV001")]


def test_a_launcher_is_followed_when_only_the_script_is_named(tmp_path: Path) -> None:
    """pre-commit names changed files only: the imported launcher is still read from the project."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "dist_utils.py").write_text("import torch.distributed as dist\n"
                                            "def setup():\n    dist.init_process_group('nccl')\n")
    (tmp_path / "train.py").write_text("from dist_utils import setup\nsetup()\nx = y.cuda()\n")
    assert devicelint.lint_paths([str(tmp_path / "train.py")]) == []


def test_tests_of_a_cuda_only_extension_are_quiet(tmp_path: Path) -> None:
    """A test file importing a module built by CUDAExtension tests code that only runs on CUDA."""
    files = {
        "setup.py": "setup(ext_modules=[CUDAExtension('fused_window', ['window.cu'])])\n",
        "tests/test_window.py": "import fused_window\ndef test_forward():\n    x = torch.ones(2).cuda()\n",
        "tests/test_plain.py": "def test_forward():\n    x = torch.ones(2).cuda()\n",
    }
    assert tree_codes(tmp_path, files) == [("tests/test_plain.py", 2, "DEV001")]


HIDDEN_DEFAULTS = {
    "getattr_fallback": "device = torch.device(getattr(args, 'device', 'cuda'))",
    "config_get_fallback": "model.to(cfg.get('device', 'cuda:0'))",
    "environment_fallback": "device = os.environ.get('DEVICE', 'cuda')",
    "default_device": "torch.set_default_device('cuda')",
    "public_parameter_default": "def create_loader(dataset, device=torch.device('cuda')):\n    pass",
    "argparse_default": "parser.add_argument('--device', default='cuda:0')",
}


@pytest.mark.parametrize("source", HIDDEN_DEFAULTS.values(), ids=HIDDEN_DEFAULTS.keys())
def test_hidden_device_defaults_are_reported(source: str) -> None:
    """Defaults a CPU user never sees in the call: getattr/get/getenv fallbacks, parameters, argparse."""
    assert codes(source) == ["DEV002"]


def test_hidden_defaults_are_reported_even_in_a_file_that_resolves_devices() -> None:
    """A device module may name devices, but its own hidden default still fails on a CPU machine."""
    source = """
        def resolve(spec):
            if torch.cuda.is_available():
                return torch.device("cuda")
            return torch.device("cpu")

        def init_device(args):
            return resolve(getattr(args, "device", "cuda"))
        """
    assert codes(source) == ["DEV002"]


QUIET_DEFAULTS = {
    "default_only_names_the_autocast_type": """
        def autocast_dtype(device="cuda"):
            return torch.get_autocast_dtype(device) if device != "cpu" else torch.bfloat16
        """,
    "default_only_names_the_scaler_type": """
        class Scaler:
            def __init__(self, device="cuda"):
                self.scaler = torch.amp.GradScaler(device=device)
        """,
    "private_helper_always_passed_the_device": """
        def _noise(shape, device="cuda"):
            return torch.randn(shape, device=device)

        def erase(img):
            return _noise(img.shape, device=img.device)
        """,
}


@pytest.mark.parametrize("source", QUIET_DEFAULTS.values(), ids=QUIET_DEFAULTS.keys())
def test_defaults_that_place_nothing_or_are_never_used_are_quiet(source: str) -> None:
    """A default used only as a backend name, or one no caller lets through, places nothing."""
    assert codes(source) == []


def test_a_load_wrapper_in_another_module_is_reported_at_each_call(tmp_path: Path) -> None:
    """Any function that calls torch.load with weights_only=False unpickles at each of its calls."""
    files = {
        "utils/io.py": """
            import torch
            _load = torch.load
            def torch_load(*args, **kwargs):
                kwargs.setdefault("weights_only", False)
                return _load(*args, **kwargs)
            """,
        "train.py": """
            from utils.io import torch_load
            ckpt = torch_load(args.weights, map_location="cpu")
            safe = torch_load(args.weights, map_location="cpu", weights_only=True)
            """,
    }
    assert tree_codes(tmp_path, files) == [("train.py", 3, "DEV004"), ("utils/io.py", 6, "DEV004")]


UNPICKLING = {
    "hub_download": ("state = torch.hub.load_state_dict_from_url(url, map_location='cpu')",
                     "state = torch.hub.load_state_dict_from_url(url, map_location='cpu', weights_only=True)"),
    "model_zoo_download": ("state = torch.utils.model_zoo.load_url(url)",
                           "state = torch.utils.model_zoo.load_url(url, weights_only=True)"),
    "ultralytics_torch_load": ("from ultralytics.utils.patches import torch_load\nckpt = torch_load(w)",
                               "from ultralytics.utils.patches import torch_load\n"
                               "ckpt = torch_load(w, weights_only=True)"),
}


@pytest.mark.parametrize(("source", "fixed"), UNPICKLING.values(), ids=UNPICKLING.keys())
def test_downloads_and_known_unsafe_helpers_are_dev004(source: str, fixed: str) -> None:
    """torch.hub/model_zoo downloads and ultralytics' torch_load unpickle without weights_only=True."""
    assert codes(source) == ["DEV004"]
    assert codes(fixed) == []


CUDA_RUNTIME = {
    "event": "start = torch.cuda.Event(enable_timing=True)",
    "pin_memory": "x = x.pin_memory().to(device, non_blocking=True)",
    "cuda_graph": "g = torch.cuda.CUDAGraph()",
}


@pytest.mark.parametrize("source", CUDA_RUNTIME.values(), ids=CUDA_RUNTIME.keys())
def test_cuda_only_runtime_calls_are_dev012(source: str) -> None:
    """torch.cuda.Event, CUDA graphs and Tensor.pin_memory() raise without a CUDA driver."""
    assert codes(source) == ["DEV012"]
    assert codes("if torch.cuda.is_available():\n    " + source) == []


def test_a_batch_types_own_pin_memory_is_quiet() -> None:
    """DataLoader calls a batch's pin_memory() only when it pins, which needs CUDA."""
    assert codes("class Batch:\n    def pin_memory(self):\n        self.x = self.x.pin_memory()\n"
                 "        return self\n") == []


SAME_PROCESS = {
    "jit_round_trip": """
        def test_script(module, buffer):
            torch.jit.save(module, buffer)
            return torch.jit.load(buffer)
        """,
    "reload_the_best_model_saved_above": """
        with open(args.save, "wb") as f:
            torch.save(model.state_dict(), f)
        with open(args.save, "rb") as f:
            model.load_state_dict(torch.load(f, weights_only=True))
        """,
    "checkpoint_written_by_a_saver_then_read": """
        def test_resume(tmp_path, saver):
            saver.save_checkpoint(tmp_path / "last.pt", epoch=1)
            state = torch.load(tmp_path / "last.pt")
        """,
    "own_constant_file": """
        torch.save(torch.from_numpy(table), "table.pt")
        table = torch.load("table.pt", map_location="cpu")
        """,
    "state_dict_only_compared": """
        model = nn.DataParallel(model)
        model_sd = model.state_dict()
        for loaded, stored in zip(model_sd.values(), reference.values()):
            assert loaded.equal(stored)
        """,
}


@pytest.mark.parametrize("source", SAME_PROCESS.values(), ids=SAME_PROCESS.keys())
def test_files_this_process_wrote_and_state_only_read_are_quiet(source: str) -> None:
    """A load of what this process just saved comes from nowhere else; a state dict only compared is not saved."""
    assert codes(source) == []


def test_an_option_another_script_turns_on_is_no_guard(tmp_path: Path) -> None:
    """`if args.gpu:` in a helper module: one script's `-gpu` defaults to True, so the helper is reached on CPU."""
    files = {
        "utils.py": "def get_network(args, net):\n    if args.gpu:\n"
                    "        net = net.cuda()\n    return net\n",
        "lr_finder.py": "parser.add_argument('-gpu', type=bool, default=True)\n"
                        "net = get_network(parser.parse_args(), Net())\n",
        "train.py": "parser.add_argument('-gpu', action='store_true')\nargs = parser.parse_args()\n"
                    "if args.gpu:\n    images = images.cuda()\n",
    }
    assert tree_codes(tmp_path, files) == [("utils.py", 3, "DEV001")]


def test_code_nothing_in_an_application_uses_is_quiet(tmp_path: Path) -> None:
    """An application's class or function that no file names is dead: nothing reaches its .cuda().

    In an installable package (pyproject [project], setup.py) its users are callers the lint cannot see."""
    files = {
        "utils/loss.py": """
            class RankSort(torch.autograd.Function):
                @staticmethod
                def forward(ctx, logits):
                    return torch.zeros(logits.shape).cuda()

            class ComputeLoss:
                def __init__(self):
                    super(ComputeLoss, self).__init__()
                    self.grid = torch.zeros(3).cuda()
            """,
        "train.py": "from utils.loss import ComputeLoss\nloss = ComputeLoss()\n",
        "models/common.py": "class Conv(nn.Module):\n    def forward(self, x):\n        return x.cuda()\n",
        "models/yolo.py": "from models.common import *\ndef parse(names):\n    return [eval(n) for n in names]\n",
    }
    assert tree_codes(tmp_path, files) == [("models/common.py", 3, "DEV001"), ("utils/loss.py", 10, "DEV001")]
    (tmp_path / "setup.py").write_text("from setuptools import find_packages, setup\n"
                                       "setup(name='p', packages=find_packages())\n")
    assert ("utils/loss.py", 5, "DEV001") in tree_codes(tmp_path, {})


# Issue 33, round 3: patterns from the second held-out set (reduced, not copied).
ROUND3_QUIET = {
    "gpu_asked_for_by_name": """
        def infer(args, img):
            if args.device == "gpu":
                img = img.cuda()
            if args.trt:
                args.device = "gpu"
        """,
    "torch2trt_branch": """
        def build(trt_file):
            from torch2trt import TRTModule
            model = TRTModule()
            model.load_state_dict(torch.load(trt_file, weights_only=True))
            return model(torch.ones(1, 3, 8, 8).cuda())
        """,
    "backend_other_than_gloo": "device = torch.device('cpu' if backend == 'gloo' else 'cuda')",
    "data_cache_saved_here": """
        model = Net().to(device)

        def corpus(path):
            if os.path.exists(path):
                return torch.load(path, weights_only=True)
            data = build(path)
            torch.save(data, path)
            return data
        """,
    "train_called_after_nccl_beside_module_train": """
        def train(loader, model, epoch):
            for x, y in loader:
                loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))

        def validate(model):
            model.train()

        def main(args):
            dist.init_process_group("nccl")
            train(make_loader(), Net(), 0)

        if __name__ == "__main__":
            main(parse())
        """,
}


@pytest.mark.parametrize("source", ROUND3_QUIET.values(), ids=ROUND3_QUIET.keys())
def test_round3_false_alarms_stay_quiet(source: str) -> None:
    """"gpu" asked for by name, TensorRT, a non-gloo backend, data caches, `model.train()` beside `train(...)`."""
    assert codes(source) == []


ROUND3_FOUND = {
    "torch_imported_as_th": ("import torch as th\nstate = th.load(path)\nd = th.device('cuda')\n",
                             ["DEV003", "DEV004", "DEV002"]),
    "formatted_device_string": ("self.device = 'cuda:{}'.format(local_rank)\n", ["DEV002"]),
    "same_name_different_files": ("""
        def save(model, fn):
            torch.save([model, optimizer], fn)

        def load(fn):
            with open(fn, "rb") as f:
                return torch.load(f, weights_only=True)

        fn = "corpus.data"
        torch.save(corpus, fn)
        """, ["DEV003"]),
}


@pytest.mark.parametrize(("source", "expected"), ROUND3_FOUND.values(), ids=ROUND3_FOUND.keys())
def test_round3_misses_are_found(source: str, expected: list[str]) -> None:
    """`import torch as th`, "cuda:{}".format(...), and a variable path that names another file elsewhere."""
    assert sorted(codes(source)) == sorted(expected)


def test_a_test_beside_a_cuda_only_build_script_is_quiet(tmp_path: Path) -> None:
    """DCNv2/test.py next to DCNv2/build.py (an extension with .cu objects) tests code that needs CUDA."""
    files = {
        "pyproject.toml": "[project]\nname = 'p'\n",
        "lib/dcn/build.py": "ffi = create_extension('_ext', sources=['src/dcn.c'], extra_objects=['dcn.cu.o'])\n",
        "lib/dcn/test.py": "def check_forward():\n    x = torch.ones(2).cuda()\n",
        "lib/other/test.py": "def check_forward():\n    x = torch.ones(2).cuda()\n",
    }
    assert tree_codes(tmp_path, files) == [("lib/other/test.py", 2, "DEV001")]


def test_dead_code_is_quiet_for_every_rule(tmp_path: Path) -> None:
    """An application's never-called save_checkpoint pickles nothing: no DEV006 either."""
    files = {"utils.py": "def save_checkpoint(model, path):\n    torch.save(model, path)\n",
             "train.py": "import utils\ntorch.save(model, 'final.pt')\n"}
    assert tree_codes(tmp_path, files) == [("train.py", 2, "DEV006")]
