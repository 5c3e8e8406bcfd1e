"""The CUDA-only code paths, proven on any machine: torch.cuda is faked, tensors on cuda:N are fake tensors.

`fake_cuda` (conftest.py) makes torch.cuda answer as a machine with GPUs: device counts, the current
device, properties, free memory. FakeTensorMode (`fake_tensors`, conftest.py too) creates tensors on
cuda:1 that carry device, shape and dtype but no data, so the model, head and loss can be built there
and run forward without a GPU (timm's families too: tests/test_timm_backbones.py).
Only the backend is faked; every function of the project under test runs for real.
"""

from __future__ import annotations

import pytest
import torch
from conftest import fake_forward  # and the fixtures fake_cuda, fake_tensors
from torch import nn
from torch.utils.data import TensorDataset

from {{ cookiecutter.package_name }}.data import build_loader
from {{ cookiecutter.package_name }}.devkit import DeviceError, available_devices, module_device, precision, resolve_device, use_device
from {{ cookiecutter.package_name }}.model import Classifier, build_model
from {{ cookiecutter.package_name }}.task import WeightedCrossEntropy
from {{ cookiecutter.package_name }}.training import wrapping

pytestmark = pytest.mark.fake_cuda

CUDA1 = torch.device("cuda", 1)
TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def not_under_torchrun(monkeypatch):
    """A process that torchrun did not start, whatever launched the test suite."""
    for name in TORCHRUN_VARS:
        monkeypatch.delenv(name, raising=False)


def _small_backbone() -> nn.Module:
    """A conv + batch-norm feature extractor, (B, 3, H, W) -> (B, 8), built on the current default device."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten())


# --- resolve_device: cuda:N validation and the current device ----------------------------------------

def test_cuda_1_resolves_and_becomes_the_current_device_before_any_cuda_work(fake_cuda):
    """'cuda:1' on two GPUs is cuda:1, and torch.cuda.set_device(1) has been called."""
    cuda = fake_cuda(free_gib=[10, 70])
    assert resolve_device("cuda:1") == CUDA1
    assert cuda.set_device_calls == [1] and cuda.current == 1


@pytest.mark.parametrize("spec", ["cuda:2", "cuda:7", 2, torch.device("cuda", 2)])
def test_cuda_index_beyond_the_device_count_is_refused_without_touching_the_current_device(fake_cuda, spec):
    """cuda:2 with two GPUs names the count and the available devices; nothing was made current."""
    cuda = fake_cuda(free_gib=[10, 70])
    with pytest.raises(DeviceError, match=r"only 2 cuda device\(s\); available: cuda:0, cuda:1, cpu\Z"):
        resolve_device(spec)
    assert cuda.set_device_calls == []


@pytest.mark.parametrize("spec", [1, torch.device("cuda", 1), " CUDA:1 "])
def test_every_form_of_index_1_means_cuda_1(fake_cuda, spec):
    """An int, a torch.device and a spaced upper-case string all name cuda:1."""
    fake_cuda(free_gib=[10, 70])
    assert resolve_device(spec) == CUDA1


def test_bare_cuda_is_the_current_device_made_explicit(fake_cuda):
    """'cuda' means torch's current device, returned with its index so tensors compare equal."""
    cuda = fake_cuda(free_gib=[10, 70])
    cuda.current = 1
    assert resolve_device("cuda") == CUDA1


def test_auto_prefers_cuda_and_lists_every_gpu_first(fake_cuda):
    """auto picks CUDA over cpu; available_devices lists each GPU before the cpu."""
    fake_cuda(free_gib=[10, 70])
    assert available_devices() == ["cuda:0", "cuda:1", "cpu"]
    assert resolve_device("auto") == torch.device("cuda", 0)


def test_auto_under_torchrun_takes_local_rank_and_makes_it_current(fake_cuda, monkeypatch):
    """LOCAL_RANK=1 means cuda:1, set as the current device so that NCCL and cuDNN start there."""
    cuda = fake_cuda(free_gib=[10, 70])
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve_device("auto") == CUDA1
    assert cuda.current == 1


def test_local_rank_beyond_the_gpus_is_refused(fake_cuda, monkeypatch):
    """LOCAL_RANK=2 on a two-GPU machine is a launcher mistake, named as such."""
    fake_cuda(free_gib=[10, 70])
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(DeviceError, match="cuda:2.*only 2 cuda device"):
        resolve_device("auto")


def test_use_device_makes_cuda_1_current_inside_the_block_only(fake_cuda):
    """use_device('cuda:1') switches the current device and switches it back afterwards."""
    cuda = fake_cuda(free_gib=[10, 70])
    with use_device("cuda:1"):
        assert cuda.current == 1
    assert cuda.current == 0


# --- The model, head and loss built on cuda:1 ----------------------------------------------------------

def test_model_built_on_cuda_1_has_every_parameter_and_buffer_there(any_gpu_count, fake_tensors, monkeypatch):
    """build_model(device=cuda:1) allocates every tensor, the head included, on cuda:1."""
    # Fake tensors hold no values, so initialising them means nothing; trunc_normal_ (ConvNeXt) even
    # asks one for a value, which a fake tensor cannot give.
    monkeypatch.setattr(nn.init, "trunc_normal_", lambda tensor, *args, **kwargs: tensor)
    model = build_model("{{ cookiecutter.backbone }}", 3, pretrained=False, device=CUDA1)
    assert {tensor.device for tensor in [*model.parameters(), *model.buffers()]} == {CUDA1}
    assert model.device == CUDA1


def test_head_is_created_beside_a_backbone_on_cuda_1(any_gpu_count, fake_tensors):
    """Classifier makes its head on the backbone's device, even when built outside any device context."""
    with CUDA1:
        backbone = _small_backbone()
    model = Classifier(backbone, 8, 4)
    assert model.head.weight.device == model.head.bias.device == CUDA1
    assert module_device(model) == CUDA1


@fake_forward
def test_forward_on_cuda_1_gives_logits_and_a_loss_there(any_gpu_count, fake_tensors):
    """A batch on cuda:1 goes through the model and the class-weighted loss without leaving cuda:1."""
    with CUDA1:
        model = Classifier(_small_backbone(), 8, 4)
    loss_fn = WeightedCrossEntropy(torch.tensor([1.0, 2.0, 0.5, 1.0])).to(CUDA1)
    images = torch.randn(2, 3, 16, 16, device=CUDA1)  # (B, C, H, W)
    targets = torch.tensor([0, 3], device=CUDA1)
    logits = model(images)
    loss = loss_fn(logits, targets)
    assert logits.device == loss.device == loss_fn.class_weights.device == CUDA1
    assert logits.shape == (2, 4) and loss.dtype == torch.float32


@fake_forward
def test_fp16_forward_on_cuda_1_computes_logits_in_half_and_the_loss_in_float(fake_cuda, fake_tensors):
    """Under the fp16 policy's autocast, the head's matmul runs in float16; the loss is upcast to float32."""
    fake_cuda(free_gib=[10, 70])
    with CUDA1:
        model = Classifier(_small_backbone(), 8, 4)
    loss_fn = WeightedCrossEntropy(torch.ones(4)).to(CUDA1)
    policy = precision.make_policy("fp16", CUDA1)
    with policy.autocast():
        logits = model(torch.randn(2, 3, 16, 16, device=CUDA1))
        loss = loss_fn(logits, torch.tensor([1, 2], device=CUDA1))
    assert logits.dtype == torch.float16 and loss.dtype == torch.float32


# --- Loader pinning -----------------------------------------------------------------------------------

@pytest.mark.parametrize("train", [True, False])
def test_loaders_for_a_cuda_device_pin_host_memory(train):
    """A loader feeding cuda:1 pins its batches, so that .to(device, non_blocking=True) overlaps compute."""
    dataset = TensorDataset(torch.zeros(4, 3, 8, 8), torch.zeros(4, dtype=torch.long))
    assert build_loader(dataset, 2, CUDA1, train=train).pin_memory is True


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_loaders_for_other_devices_do_not_pin(device):
    """Pinning is wasted work (and a warning) when nothing is copied to a GPU."""
    dataset = TensorDataset(torch.zeros(4, 3, 8, 8), torch.zeros(4, dtype=torch.long))
    assert build_loader(dataset, 2, torch.device(device), train=True).pin_memory is False


@pytest.mark.parametrize("kind, pinned", [("cuda", True), ("xpu", True), ("mps", False), ("cpu", False)])
def test_loaders_pin_for_the_gpus_only(kind, pinned):
    """CUDA and XPU batches come from pinned memory (for the current accelerator); MPS shares host memory."""
    dataset = TensorDataset(torch.zeros(4, 3, 8, 8), torch.zeros(4, dtype=torch.long))
    assert build_loader(dataset, 2, torch.device(kind), train=False).pin_memory is pinned
    assert build_loader(dataset, 2, torch.device(kind), train=False).pin_memory_device == ""  # deprecated


# --- Precision: the fp16 scaler and autocast's dtype per device --------------------------------------

def test_fp16_on_cuda_uses_an_enabled_grad_scaler(fake_cuda):
    """fp16 gradients underflow without loss scaling: on CUDA the policy's GradScaler is on."""
    fake_cuda(free_gib=[10, 70])
    policy = precision.make_policy("fp16", CUDA1)
    assert policy.uses_scaler
    assert policy.grad_scaler().is_enabled()


@pytest.mark.parametrize("name", ["fp32", "bf16"])
def test_other_precisions_on_cuda_leave_the_scaler_off(fake_cuda, name):
    """fp32 and bf16 (fp32's exponent range) need no loss scaling, even on CUDA."""
    fake_cuda(free_gib=[10, 70])
    policy = precision.make_policy(name, CUDA1)
    assert not policy.uses_scaler and not policy.grad_scaler().is_enabled()


@pytest.mark.parametrize("name, dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_autocast_runs_on_the_policy_device_type_in_its_dtype(fake_cuda, name, dtype):
    """A cuda:1 policy turns on CUDA autocast in its own dtype, and leaves CPU autocast off."""
    fake_cuda(free_gib=[10, 70])
    with precision.make_policy(name, CUDA1).autocast():
        assert torch.is_autocast_enabled("cuda")
        assert torch.get_autocast_dtype("cuda") == dtype
        assert not torch.is_autocast_enabled("cpu")


def test_fp32_policy_on_cuda_turns_no_autocast_on(fake_cuda):
    """fp32 computes in full precision: no autocast on any device type."""
    fake_cuda(free_gib=[10, 70])
    with precision.make_policy("fp32", CUDA1).autocast():
        assert not torch.is_autocast_enabled("cuda") and not torch.is_autocast_enabled("cpu")


def test_bf16_on_a_gpu_without_it_is_refused(fake_cuda, monkeypatch):
    """A pre-Ampere GPU cannot run bf16: PrecisionError says so and offers fp16 instead."""
    fake_cuda(free_gib=[10, 70])
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    with pytest.raises(precision.PrecisionError,
                       match=r"\Abf16 is not supported on cuda:1 \(NVIDIA H100 80GB HBM3\); use fp16 or fp32\Z"):
        precision.make_policy("bf16", CUDA1)


# --- DataParallel -------------------------------------------------------------------------------------

def test_dataparallel_on_cuda_1_puts_cuda_1_first(fake_cuda, not_under_torchrun):
    """device_ids[0] holds the master weights and gathers outputs: it is the run's device, not GPU 0."""
    fake_cuda(free_gib=[10, 70, 30])
    wrapped = wrapping.wrap_model(nn.Linear(4, 2), "dp", CUDA1)
    assert isinstance(wrapped, nn.DataParallel)
    assert wrapped.device_ids == [1, 0, 2]
    assert wrapped.output_device == 1 and wrapped.src_device_obj == CUDA1


def test_dataparallel_needs_two_gpus(fake_cuda, not_under_torchrun):
    """dp on a one-GPU machine is refused with the count; with two it can run."""
    fake_cuda(free_gib=[10])
    assert wrapping.why_not("dp", torch.device("cuda", 0)) == "dp needs 2+ CUDA devices, found 1"
    fake_cuda(free_gib=[10, 70])
    assert wrapping.why_not("dp", CUDA1) is None
