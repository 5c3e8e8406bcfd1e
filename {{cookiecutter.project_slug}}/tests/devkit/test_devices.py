"""The device toolkit: resolving specs, finding a module's device, moving batches, checks, guard, CLI."""

from __future__ import annotations

import collections
import dataclasses
import gc
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
from conftest import HANG_S, FakeCuda
from torch import nn

from {{ cookiecutter.package_name }}.devkit import (
    DeviceAwareMixin,
    DeviceError,
    DeviceGuard,
    available_devices,
    describe_device,
    device_identity,
    device_report,
    gpu_info,
    index_order_warning,
    module_device,
    move_to,
    on_device,
    precision,
    resolve_device,
    same_device,
    use_device,
)
from {{ cookiecutter.package_name }}.devkit.__main__ import main

CPU, META = torch.device("cpu"), torch.device("meta")
CUDA_COUNT = torch.cuda.device_count() if torch.cuda.is_available() else 0
PROJECT_ROOT = Path(__file__).resolve().parents[2]


class Block(DeviceAwareMixin, nn.Module):
    """A device-aware block with a parameterised child and a buffer of its own."""

    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


class Net(DeviceAwareMixin, nn.Module):
    """stem -> blocks.0 -> blocks.1, so that a misplaced part has a path to be named by."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(3, 4)
        self.blocks = nn.Sequential(Block(), Block())

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, 3) -> (B, 4)
        return self.blocks(torch.relu(self.stem(x)))


class Scale(nn.Module):
    """Takes a dict batch, so the guard must look inside nested inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(4))

    def forward(self, batch: dict) -> torch.Tensor:
        return batch["x"] * self.weight * batch.get("temperature", 1.0)


class Pair(NamedTuple):
    image: torch.Tensor
    name: str


@dataclasses.dataclass(frozen=True)
class Sample:
    image: torch.Tensor
    label: int
    extra: dict = dataclasses.field(default_factory=dict)


@pytest.fixture(autouse=True)
def restore_current_cuda_device():
    """resolve_device('cuda:N') sets the process-wide current device; undo it after each test."""
    previous = torch.cuda.current_device() if CUDA_COUNT else None
    yield
    if previous is not None:
        torch.cuda.set_device(previous)


# --- resolve_device ---------------------------------------------------------------------------

BAD_SPECS = [
    "gpu", "tpu", "hip", "mkldnn", "cuda:x", "cuda:01", "cuda:-1", "cuda:", "cuda:1:2", "cuda 1", "", "  ",
    "cpu:1", "cpu:00", "meta:1", "cuda:99", "xpu:99", -1, 99, True, 1.5, [0], object,
    torch.tensor(1), torch.zeros(3, 2),
    torch.device("cuda", 99), torch.device("hip"),
    *(["cuda"] if CUDA_COUNT == 0 else []),
    *(["mps"] if "mps" not in available_devices() else []),
]


@pytest.mark.parametrize("spec", BAD_SPECS, ids=lambda spec: repr(spec).splitlines()[0])
def test_bad_spec_raises_one_line_naming_it_and_the_available_devices(spec):
    with warnings.catch_warnings(), pytest.raises(DeviceError) as info:
        warnings.simplefilter("error")  # one line: torch's parser warns of kinds it deprecates ('mkldnn')
        resolve_device(spec)
    message = str(info.value)
    shown = repr(str(spec)) if isinstance(spec, torch.device) else repr(spec).splitlines()[0][:50]
    assert isinstance(info.value, ValueError)
    assert "\n" not in message
    assert shown in message
    assert message.endswith("available: " + ", ".join(available_devices()))


@pytest.mark.parametrize("spec", [True, False, 0.0, 1.5])
def test_bools_and_floats_are_refused_as_types_not_read_as_indices(spec):
    with pytest.raises(DeviceError, match=f"not {type(spec).__name__} {spec!r};"):
        resolve_device(spec)


@pytest.mark.parametrize("spec, expected", [
    ("cpu", CPU), (" CPU ", CPU), ("cpu:0", CPU), ("Meta", META), ("\tmeta\n", META),
    (CPU, CPU), (torch.device("cpu", 0), CPU),
])
def test_spec_is_normalised_whatever_its_case_spacing_or_form(spec, expected):
    assert resolve_device(spec) == expected


def test_resolved_device_equals_what_tensors_there_report(device):
    resolved = resolve_device(str(device))
    assert resolved == device
    assert torch.empty(1, device=resolved).device == resolved


def test_auto_and_none_pick_the_first_available_device():
    picked = resolve_device("auto")
    assert picked == resolve_device(None) == resolve_device(" AUTO ")
    assert picked.type == torch.device(available_devices()[0]).type


def test_auto_under_torchrun_follows_local_rank(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    expected = torch.device("cuda", 0) if CUDA_COUNT else resolve_device(available_devices()[0])
    assert resolve_device("auto") == expected


# --- module_device and DeviceAwareMixin -----------------------------------------------------

def test_module_split_across_devices_names_the_tensors():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    model[1].to(META)
    with pytest.raises(DeviceError) as info:
        module_device(model)
    message = str(info.value)
    assert "\n" not in message
    for part in ("cpu: 0.weight, 0.bias", "meta: 1.weight, 1.bias"):
        assert part in message


def test_module_device_counts_buffers_not_just_parameters():
    norm = nn.BatchNorm1d(4)
    norm.running_mean = norm.running_mean.to(META)  # the kind of stray buffer next(parameters()) misses
    with pytest.raises(DeviceError, match=r"meta: running_mean"):
        module_device(norm)


def test_module_with_only_buffers_is_where_its_buffers_are(device):
    holder = nn.Module()
    holder.register_buffer("table", torch.zeros(3, device=device))
    assert module_device(holder) == device


def test_module_without_tensors_answers_the_default_device():
    assert module_device(nn.ReLU()) == CPU
    with torch.device("meta"):
        assert module_device(nn.ReLU()) == META


def test_mixin_device_and_dtype_follow_to_half_and_cpu(device):
    net = Net().to(device)
    assert (net.device, net.dtype) == (device, torch.float32)
    net.half()
    assert (net.device, net.dtype) == (device, torch.float16)  # the long buffer does not count
    if device.type != "meta":  # meta tensors hold no data to copy back; to_empty is the way out
        assert net.cpu().device == CPU


def test_mixin_device_follows_to_empty(device):
    with torch.device("meta"):
        net = Net()
    assert net.device == META
    net.to_empty(device=device)
    assert (net.device, net.dtype) == (device, torch.float32)


def test_mixin_adds_no_parameter_and_nothing_to_the_state_dict():
    plain = nn.Sequential(nn.Linear(4, 4))
    block = Block()
    assert set(block.state_dict()) == {"linear.weight", "linear.bias", "steps"}
    assert len(list(block.parameters())) == len(list(plain.parameters()))


def test_nested_mixin_modules_each_report_their_own_device():
    net = Net()
    net.blocks[1].to(META)
    assert (net.blocks[0].device, net.blocks[1].device) == (CPU, META)
    with pytest.raises(DeviceError, match=r"meta: blocks\.1\.linear\.weight"):
        _ = net.device


def test_mixin_dtype_without_floating_tensors_is_the_default_dtype():
    holder = Block()
    del holder.linear
    assert holder.dtype == torch.get_default_dtype()


# --- move_to, on_device, use_device ------------------------------------------------------------

def test_move_to_reaches_every_tensor_in_a_nested_batch_and_leaves_the_rest(device):
    tag = object()
    batch = {
        "images": torch.ones(2, 3),
        "pairs": [Pair(torch.zeros(1), "a"), (torch.arange(3), tag)],
        "sample": Sample(torch.ones(1), 7, {"mask": torch.zeros(2)}),
        "counts": collections.defaultdict(int, n=torch.ones(1)),
        "note": "keep",
        "lr": 0.1,
    }
    moved = move_to(batch, device)
    tensors = [moved["images"], moved["pairs"][0].image, moved["pairs"][1][0],
               moved["sample"].image, moved["sample"].extra["mask"], moved["counts"]["n"]]
    assert [t.device for t in tensors] == [device] * len(tensors)
    assert type(moved["pairs"][0]) is Pair and type(moved["pairs"][1]) is tuple
    assert type(moved["sample"]) is Sample and moved["counts"].default_factory is int
    assert moved["pairs"][1][1] is tag and moved["pairs"][0].name == "a" and moved["sample"].label == 7
    assert (moved["note"], moved["lr"]) == ("keep", 0.1)
    assert batch["images"].device == CPU  # the caller's batch is not modified


def test_on_device_moves_nested_tensor_arguments_before_the_call(device):
    @on_device(device)
    def step(batch: dict, scale: torch.Tensor, *, mask: torch.Tensor, name: str) -> list:
        x, (y, count) = batch["x"], batch["pair"]
        return [x.device, y.device, scale.device, mask.device, name, count]

    batch = {"x": torch.ones(2), "pair": (torch.ones(1), 3)}
    seen = step(batch, torch.tensor(2.0), mask=torch.ones(2), name="n")
    assert seen == [device] * 4 + ["n", 3]
    assert step.__name__ == "step"


def test_on_device_reads_a_callable_device_at_call_time():
    current = {"device": CPU}

    @on_device(lambda: current["device"])
    def where(x: torch.Tensor) -> torch.device:
        return x.device

    assert where(torch.ones(1)) == CPU
    current["device"] = META
    assert where(torch.ones(1)) == META


@pytest.mark.parametrize("spec", ["cpu", "meta", "mps", "cuda"])
def test_use_device_is_a_no_op_off_cuda_and_for_bare_cuda(spec):
    before = torch.cuda.current_device() if CUDA_COUNT else None
    with use_device(spec) as inside:
        assert inside == torch.device(spec)
    assert (torch.cuda.current_device() if CUDA_COUNT else None) == before


# --- same_device, device_report ---------------------------------------------------------------

def test_same_device_names_each_culprit_and_its_device():
    with pytest.raises(DeviceError) as info:
        same_device(images=torch.ones(1), labels=torch.ones(1, device=META), model=nn.Linear(1, 1))
    assert "images on cpu, labels on meta, model on cpu" in str(info.value)


def test_same_device_returns_the_shared_device(device):
    assert same_device(x=torch.ones(1, device=device), model=nn.Linear(1, 1).to(device)) == device


def test_device_report_counts_tensors_elements_and_bytes_per_device_and_dtype():
    model = nn.Module()
    model.a = nn.Linear(4, 3)  # 15 float32 = 60 B
    model.b = nn.Linear(3, 2).half()  # 8 float16 = 16 B
    model.c = nn.Linear(2, 2).to(META)  # 6 float32 = 24 B, counted though meta holds no data
    model.register_buffer("steps", torch.zeros(2, dtype=torch.long))  # 2 int64 = 16 B
    lines = device_report(model).splitlines()
    rows = {tuple(line.split()[:3]): line.split()[3:] for line in lines[1:-1]}
    assert lines[0].split() == ["kind", "device", "dtype", "tensors", "elements", "bytes"]
    assert rows == {
        ("param", "cpu", "float32"): ["2", "15", "60", "B"],
        ("param", "cpu", "float16"): ["2", "8", "16", "B"],
        ("param", "meta", "float32"): ["2", "6", "24", "B"],
        ("buffer", "cpu", "int64"): ["1", "2", "16", "B"],
    }
    assert lines[-1].split() == ["total", "7", "31", "116", "B"]
    assert len({len(line) for line in lines}) == 1  # right-aligned numbers: every row as wide


# --- DeviceGuard --------------------------------------------------------------------------------

def test_guard_names_the_submodule_path_and_both_devices():
    net = Net()
    net.blocks[1].to(META)
    with DeviceGuard(net), pytest.raises(DeviceError) as info:
        net(torch.ones(2, 3))
    message = str(info.value)
    assert "blocks.1 (Block)" in message and "on meta" in message and "is on cpu" in message


def test_guard_is_silent_when_everything_is_on_one_device(device):
    net = Net().to(device)
    with DeviceGuard(net):
        assert net(torch.ones(2, 3, device=device)).device == device


def test_guard_notices_a_move_made_after_it_was_created():
    net = Net()
    guard = DeviceGuard(net)
    net(torch.ones(2, 3))  # fills the guard's cache with cpu
    net.to(META)
    expected = r"stem \(Linear\) holds its tensors on meta but input 0 is on cpu"
    with pytest.raises(DeviceError, match=expected):
        net(torch.ones(2, 3))
    guard.remove()


def test_guard_looks_inside_nested_and_keyword_inputs():
    scale = Scale().to(META)
    with DeviceGuard(scale), pytest.raises(DeviceError, match=r"input 'batch' is on cpu"):
        scale(batch={"x": torch.ones(4)})


def test_guard_lets_cpu_scalars_through_as_pytorch_does():
    scale = Scale().to(META)
    with DeviceGuard(scale):
        out = scale({"x": torch.ones(4, device=META), "temperature": torch.tensor(2.0)})
    assert out.device == META


@pytest.mark.parametrize("moved", ["bias", "buffer"])
def test_guard_checks_every_tensor_of_a_module_not_only_its_first(moved):
    """A Linear whose weight (its first tensor) is where the input is, but whose bias or a buffer of its own is on
    another device, is reported by name before its forward runs."""
    net = Net()
    stem = net.stem  # a Linear: weight, then bias, then the buffer added here
    stem.register_buffer("scale", torch.ones(4))
    if moved == "bias":
        stem.bias = nn.Parameter(stem.bias.detach().to(META))
    else:
        stem.scale = stem.scale.to(META)
    with DeviceGuard(net), pytest.raises(DeviceError) as info:
        net(torch.ones(2, 3))
    message = str(info.value)
    assert "stem (Linear)" in message and "meta" in message and ("bias" if moved == "bias" else "scale") in message


def test_guard_is_silent_once_removed():
    net = Net()
    net.blocks[1].to(META)
    guard = DeviceGuard(net)
    guard.remove()
    guard.remove()  # twice is harmless
    with pytest.raises(RuntimeError):  # PyTorch's own error, not the guard's DeviceError (a ValueError)
        net(torch.ones(2, 3))


# --- python -m <package>.devkit -----------------------------------------------------------------

def test_cli_lists_cpu_and_what_auto_picks():
    result = subprocess.run([sys.executable, "-m", "{{ cookiecutter.package_name }}.devkit"], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, check=False, timeout=HANG_S)
    assert result.returncode == 0, result.stderr
    cpu_rows = [line.split() for line in result.stdout.splitlines() if line.startswith("cpu ")]
    native = precision.cpu_bf16_native()
    expected = "native" if native else "emulated" if native is False else "yes"
    assert len(cpu_rows) == 1 and cpu_rows[0][-1] == expected  # bf16: runs natively, or only emulated (slowly)
    # Free memory changes between the CLI's process and this one: every other field must match exactly.
    expected = re.escape(f"auto -> {describe_device(resolve_device('auto'))}")
    expected = re.sub(r"[0-9]+\\.[0-9]+\\ (B|KiB|MiB|GiB)\\ free", r"[0-9.]+ (B|KiB|MiB|GiB) free", expected)
    assert [line for line in result.stdout.splitlines() if re.fullmatch(expected, line)]


def test_the_device_table_tells_native_from_emulated_bf16_on_the_cpu(monkeypatch, capsys):
    """An AVX2-only CPU's row says bf16 'emulated'; one with AVX512_BF16 says 'native'."""
    for flags, expected in ((frozenset({"avx2"}), "emulated"), (frozenset({"avx2", "avx512_bf16"}), "native")):
        monkeypatch.setattr(precision, "cpu_flags", lambda flags=flags: flags)
        assert main(["cpu"]) == 0
        cpu_rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("cpu ")]
        assert cpu_rows[0][-1] == expected


def test_cli_exits_2_with_one_line_for_a_bad_spec(capsys):
    assert main(["gpu"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "'gpu'" in error and "available: " in error


# --- Faked GPUs: auto:free, physical identity, UUID specs, the CLI's GPU table ----------------------

UUID1 = "GPU-00000001-1111-2222-3333-444455556661"  # what fake_cuda gives cuda:1


@pytest.mark.fake_cuda
def test_auto_free_picks_the_gpu_with_most_free_memory_and_says_why(fake_cuda):
    """auto:free with 10, 70 and 30 GiB free picks cuda:1, makes it current, and the device line says why."""
    cuda = fake_cuda(free_gib=[10, 70, 30])
    assert resolve_device("auto:free") == torch.device("cuda", 1)
    assert cuda.current == 1
    assert describe_device(torch.device("cuda", 1)).endswith(
        "; auto:free: most free memory (cuda:0 10.0 GiB, cuda:1 70.0 GiB, cuda:2 30.0 GiB free)")


@pytest.mark.fake_cuda
def test_auto_free_breaks_ties_towards_the_lower_index(fake_cuda):
    """Two equally free GPUs: the first, so that repeated runs agree."""
    fake_cuda(free_gib=[10, 40, 40])
    assert resolve_device("AUTO:FREE") == torch.device("cuda", 1)


@pytest.mark.fake_cuda
@pytest.mark.parametrize("minimum, expected", [("40GiB", 1), ("70G", 1), ("75GB", 1), ("500MiB", 1)])
def test_auto_free_with_a_minimum_takes_the_freest_gpu_that_has_it(fake_cuda, minimum, expected):
    """auto:free:40GiB is met by cuda:1's 70 GiB (75 GB = 69.8 GiB is too)."""
    fake_cuda(free_gib=[10, 70, 30])
    assert resolve_device(f"auto:free:{minimum}") == torch.device("cuda", expected)


@pytest.mark.fake_cuda
def test_auto_free_refuses_when_no_gpu_has_the_minimum_listing_what_each_has(fake_cuda):
    """auto:free:72GiB on GPUs with 10, 70, 30 GiB free: one line with every GPU's free memory, none made current."""
    cuda = fake_cuda(free_gib=[10, 70, 30])
    with pytest.raises(DeviceError) as info:
        resolve_device("auto:free:72GiB")
    assert str(info.value).startswith("auto:free: no CUDA device has 72.0 GiB free "
                                      "(cuda:0 10.0 GiB, cuda:1 70.0 GiB, cuda:2 30.0 GiB free); available: ")
    assert cuda.set_device_calls == []


@pytest.mark.fake_cuda
def test_auto_free_under_torchrun_follows_local_rank_not_free_memory(fake_cuda, monkeypatch):
    """Every rank must train on its own GPU: LOCAL_RANK=0 keeps cuda:0 though cuda:1 is freer."""
    fake_cuda(free_gib=[10, 70])
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert resolve_device("auto:free") == torch.device("cuda", 0)
    assert "LOCAL_RANK decides under torchrun" in describe_device(torch.device("cuda", 0))
    with pytest.raises(DeviceError, match="no CUDA device has 20.0 GiB free \\(cuda:0 10.0 GiB free\\)"):
        resolve_device("auto:free:20GiB")


@pytest.mark.parametrize("spec", ["auto:free:8", "auto:free:lots", "auto:free:8XB", "auto:free:", "auto:freest"])
def test_auto_free_with_a_malformed_minimum_is_refused(spec):
    """A minimum needs a number and a unit; the one-line message shows the form it takes."""
    with pytest.raises(DeviceError, match=f"unknown device '{spec}'.*auto:free:8GiB"):
        resolve_device(spec)


def test_auto_free_without_a_gpu_is_auto(no_gpus):
    """On a machine without CUDA, auto:free chooses as auto does: mps, xpu or cpu."""
    assert resolve_device("auto:free") == resolve_device("auto")


@pytest.mark.fake_cuda
@pytest.mark.parametrize("spec", [UUID1, UUID1.lower(), UUID1.upper(), "GPU-00000001", f"  {UUID1} "])
def test_a_gpu_uuid_or_its_unique_prefix_names_that_gpu(fake_cuda, spec):
    """--device GPU-<uuid>, as nvidia-smi -L prints it (any case, or a unique prefix), is that GPU."""
    cuda = fake_cuda(free_gib=[10, 70])
    assert resolve_device(spec) == torch.device("cuda", 1)
    assert cuda.current == 1


@pytest.mark.fake_cuda
@pytest.mark.parametrize("spec, problem", [("GPU-0000000", "matches several GPUs"),
                                           ("GPU-99999999", "is not the UUID of a visible GPU")])
def test_an_unknown_or_ambiguous_uuid_is_refused_in_one_line(fake_cuda, spec, problem):
    """A UUID that is no visible GPU's, or a prefix of several, says which and where to look them up."""
    fake_cuda(free_gib=[10, 70])
    with pytest.raises(DeviceError) as info:
        resolve_device(spec)
    assert str(info.value) == (f"device '{spec}' {problem} (python -m {{ cookiecutter.package_name }}.devkit lists them); "
                               "available: cuda:0, cuda:1, cpu")


@pytest.mark.fake_cuda
def test_gpu_info_names_the_physical_card_behind_cuda_1(fake_cuda, monkeypatch):
    """Name, memory, UUID and PCI bus id as nvidia-smi prints them, and its CUDA_VISIBLE_DEVICES entry."""
    fake_cuda(free_gib=[10, 70])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    info = gpu_info(1)
    assert (info.name, info.total_memory, info.free_memory) == ("NVIDIA H100 80GB HBM3", 80 * 2**30, 70 * 2**30)
    assert (info.uuid, info.pci_bus_id, info.visible_as) == (UUID1, "00000000:39:00.0", "5")
    assert describe_device(torch.device("cuda", 1)) == (
        f"cuda:1 (NVIDIA H100 80GB HBM3, 80.0 GiB, 70.0 GiB free, {UUID1}, PCI 00000000:39:00.0, "
        "CUDA_VISIBLE_DEVICES entry 5)")


@dataclasses.dataclass
class Torch24Gpu:
    """torch 2.4's CUDA device properties: no uuid and no PCI fields (they came in later releases)."""

    name: str = "NVIDIA H100 80GB HBM3"
    total_memory: int = 80 * 2**30
    free: int = 70 * 2**30
    major: int = 9
    minor: int = 0
    multi_processor_count: int = 132


@pytest.mark.fake_cuda
def test_a_torch_without_gpu_uuids_still_names_the_device_and_refuses_a_uuid_spec(monkeypatch):
    """On torch 2.4 the start line, the identity and free memory still work; a GPU-<uuid> spec is one line."""
    FakeCuda(monkeypatch, [Torch24Gpu()])
    info = gpu_info(0)
    assert (info.uuid, info.pci_bus_id, info.free_memory) == ("-", "-", 70 * 2**30)
    assert describe_device(torch.device("cuda", 0)).startswith("cuda:0 (NVIDIA H100 80GB HBM3, 80.0 GiB, 70.0 GiB")
    assert device_identity(torch.device("cuda", 0))["uuid"] == "-"
    with pytest.raises(DeviceError, match="is not the UUID of a visible GPU"):
        resolve_device("GPU-00000000")


@pytest.mark.fake_cuda
def test_device_identity_is_what_config_json_records_of_a_gpu(fake_cuda):
    """The identity is stable facts only (no free memory); None for devices that are no GPU."""
    fake_cuda(free_gib=[10, 70])
    identity = device_identity(torch.device("cuda", 1))
    assert identity == {"device": "cuda:1", "name": "NVIDIA H100 80GB HBM3", "total_memory": 80 * 2**30,
                        "uuid": UUID1, "pci_bus_id": "00000000:39:00.0", "visible_as": None}
    assert device_identity(CPU) is None and device_identity(META) is None


@pytest.mark.fake_cuda
def test_cli_shows_each_gpu_its_identity_the_mapping_and_the_order_warning(fake_cuda, monkeypatch, capsys):
    """python -m <package>.devkit: a row per GPU with free memory, UUID, PCI bus id and visible entry."""
    fake_cuda(free_gib=[10, 70])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    assert main(["auto:free"]) == 0
    lines = capsys.readouterr().out.splitlines()
    gpu_rows = [line.split() for line in lines if line.startswith("cuda:")]
    uuid0 = "GPU-00000000-1111-2222-3333-444455556660"
    assert gpu_rows[2:] == [["cuda:0", "10.0", "GiB", uuid0, "00000000:19:00.0", "2"],
                            ["cuda:1", "70.0", "GiB", UUID1, "00000000:39:00.0", "0"]]
    assert gpu_rows[0][:5] == ["cuda:0", "NVIDIA", "H100", "80GB", "HBM3"]  # the first table: name, memory...
    assert "CUDA_VISIBLE_DEVICES=2,0: cuda:N is its N-th entry" in lines
    assert [line for line in lines if line.startswith("warning:")] == [index_order_warning()]
    assert lines[-1].startswith("auto:free -> cuda:1 (NVIDIA H100 80GB HBM3, 80.0 GiB, 70.0 GiB free")
    assert lines[-1].endswith("; auto:free: most free memory (cuda:0 10.0 GiB, cuda:1 70.0 GiB free)")


@pytest.mark.fake_cuda
@pytest.mark.parametrize("free_gib, order, warned", [([10, 70], None, True), ([10, 70], "PCI_BUS_ID", False),
                                                     ([10, 70], "FASTEST_FIRST", True), ([10], None, False)])
def test_index_order_warning_only_for_several_gpus_not_in_pci_order(fake_cuda, monkeypatch, capsys,
                                                                    free_gib, order, warned):
    """One warning line exactly when cuda:N may differ from nvidia-smi's GPU N."""
    fake_cuda(free_gib=free_gib)
    if order:
        monkeypatch.setenv("CUDA_DEVICE_ORDER", order)
    assert main(["cpu"]) == 0
    out = capsys.readouterr().out
    assert out.count("warning:") == int(warned)
    assert ("may differ from nvidia-smi's GPU N" in out) == warned
    assert "CUDA_VISIBLE_DEVICES is unset: every GPU is visible" in out


# --- CUDA only ------------------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.skipif(CUDA_COUNT < 1, reason="needs a CUDA device")
def test_bare_cuda_and_dot_cuda_mean_the_current_indexed_device():
    current = torch.device("cuda", torch.cuda.current_device())
    assert resolve_device("cuda") == resolve_device(current.index) == current
    net = Net().cuda()
    assert net.device == current
    assert net.cpu().device == CPU


@pytest.mark.cuda
@pytest.mark.skipif(CUDA_COUNT < 1, reason="needs a CUDA device")
def test_pinned_batch_copied_non_blocking_arrives_intact():
    device = resolve_device("cuda")
    batch = {"images": torch.randn(8, 3, 4, 4).pin_memory(), "labels": torch.arange(8).pin_memory(),
             "ids": list("abcdefgh")}
    assert batch["images"].is_pinned()
    moved = move_to(batch, device, non_blocking=True)
    torch.cuda.current_stream(device).synchronize()  # non_blocking: the copy may still be in flight
    assert moved["images"].device == moved["labels"].device == device
    assert torch.equal(moved["images"].cpu(), batch["images"])
    assert torch.equal(moved["labels"].cpu(), batch["labels"])
    assert moved["ids"] == batch["ids"]


@pytest.mark.cuda
@pytest.mark.multi_gpu
@pytest.mark.skipif(CUDA_COUNT < 2, reason="needs two CUDA devices")
def test_training_step_on_cuda_1_allocates_nothing_on_cuda_0():
    gc.collect()
    before = torch.cuda.memory_allocated(0)  # 0 in a fresh process; other tests' garbage must not count
    device = resolve_device("cuda:1")
    assert torch.cuda.current_device() == 1
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    images, labels = move_to((torch.randn(4, 8), torch.tensor([0, 1, 0, 1])), device)
    nn.functional.cross_entropy(model(images), labels).backward()
    optimizer.step()
    torch.cuda.synchronize(device)
    assert torch.cuda.memory_allocated(0) == before
    assert torch.cuda.memory_allocated(1) > 0


@pytest.mark.cuda
@pytest.mark.multi_gpu
@pytest.mark.skipif(CUDA_COUNT < 2, reason="needs two CUDA devices")
def test_use_device_and_torchrun_auto_select_cuda_1(monkeypatch):
    torch.cuda.set_device(0)
    with use_device("cuda:1"):
        assert torch.cuda.current_device() == 1
    assert torch.cuda.current_device() == 0
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve_device("auto") == torch.device("cuda", 1)


_CONTEXTS = """
import sys, torch
import train
code = train.main(sys.argv[1:])
print("contexts:", [torch._C._cuda_hasPrimaryContext(i) for i in range(torch.cuda.device_count())])
sys.exit(code)
"""


@pytest.mark.cuda
@pytest.mark.multi_gpu
@pytest.mark.slow
@pytest.mark.skipif(CUDA_COUNT < 2, reason="needs two CUDA devices")
def test_a_training_run_on_cuda_1_opens_no_context_on_cuda_0(tiny_data, tmp_path):
    """What nvidia-smi users check: after train.py --device cuda:1, the process holds no context on GPU 0.

    A CUDA context costs a few hundred MiB on its GPU and shows up in nvidia-smi's process list; one
    on cuda:0 means something ran there before (or besides) set_device(1).
    """
    args = ["--data", str(tiny_data), "--device", "cuda:1", "--epochs", "1", "--batch-size", "8",
            "--image-size", "32", "--out", str(tmp_path / "run"), "--parallel", "none", "--precision", "fp32"]
    result = subprocess.run([sys.executable, "-c", _CONTEXTS, *args], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, check=False, timeout=HANG_S)
    assert result.returncode == 0, result.stderr
    contexts = eval(result.stdout.splitlines()[-1].removeprefix("contexts: "))
    assert contexts[0] is False and contexts[1] is True


@pytest.mark.cuda
@pytest.mark.multi_gpu
@pytest.mark.skipif(CUDA_COUNT < 2, reason="needs two CUDA devices")
def test_auto_free_opens_a_context_only_on_the_gpu_it_picks():
    """auto:free reads free memory through NVML, so choosing touches no GPU it does not pick."""
    script = ("import torch; from {{ cookiecutter.package_name }}.devkit import resolve_device; "
              "device = resolve_device('auto:free'); torch.empty(1, device=device); "
              "print(device.index, [torch._C._cuda_hasPrimaryContext(i) for i in range(torch.cuda.device_count())])")
    result = subprocess.run([sys.executable, "-c", script], cwd=PROJECT_ROOT, capture_output=True, text=True,
                            check=False, timeout=HANG_S)
    assert result.returncode == 0, result.stderr
    index, contexts = result.stdout.split(" ", 1)
    assert [i for i, has in enumerate(eval(contexts)) if has] == [int(index)]


# --- torch.accelerator (torch 2.6+) decides; older torch is probed backend by backend -------------------

@pytest.fixture
def fake_xpu_machine(monkeypatch):
    """torch.accelerator reporting two Intel XPUs (torch.xpu's own probes still say none)."""
    if not hasattr(torch, "accelerator") or not hasattr(torch, "xpu"):
        pytest.skip("needs torch.accelerator and torch.xpu (torch 2.6+)")
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *args, **kwargs: torch.device("xpu"))
    monkeypatch.setattr(torch.accelerator, "device_count", lambda: 2)
    current = []
    monkeypatch.setattr(torch.xpu, "set_device", current.append)
    monkeypatch.setattr(torch.xpu, "current_device", lambda: 0)
    return current


def test_the_accelerator_torch_reports_is_the_one_resolved(fake_xpu_machine):
    """torch.accelerator says two XPUs: they are listed, auto takes xpu:0, an int means an XPU index."""
    assert available_devices() == ["xpu:0", "xpu:1", "cpu"]
    assert resolve_device("auto") == torch.device("xpu", 0)
    assert resolve_device(1) == torch.device("xpu", 1)
    assert fake_xpu_machine == [0, 1]  # each made current, as for CUDA


@pytest.mark.fake_cuda
def test_without_torch_accelerator_each_backend_is_probed(fake_cuda, monkeypatch):
    """On torch before 2.6 (no torch.accelerator), torch.cuda's own answers decide, as they always did."""
    fake_cuda(free_gib=[10, 70])
    monkeypatch.delattr(torch, "accelerator", raising=False)
    assert available_devices() == ["cuda:0", "cuda:1", "cpu"]
    assert resolve_device("auto") == torch.device("cuda", 0) and resolve_device(1) == torch.device("cuda", 1)


def test_without_torch_accelerator_and_without_gpus_auto_is_the_cpu_or_mps(no_gpus, monkeypatch):
    """The fallback probing finds no CUDA device: auto is what the remaining backends offer."""
    monkeypatch.delattr(torch, "accelerator", raising=False)
    assert "cuda:0" not in available_devices()
    assert resolve_device("auto").type in ("cpu", "mps", "xpu")

