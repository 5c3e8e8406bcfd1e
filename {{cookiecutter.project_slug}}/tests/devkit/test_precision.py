"""Precision: autocast dtypes, a float32 loss, the GradScaler only where it belongs, half inference, NHWC."""

import json
import re

import pytest
import torch

import predict
import train
from {{ cookiecutter.package_name }}.config import TrainConfig
from {{ cookiecutter.package_name }}.data.folders import load_splits
from {{ cookiecutter.package_name }}.data.loaders import build_loader
from {{ cookiecutter.package_name }}.devkit import precision
from {{ cookiecutter.package_name }}.devkit.checkpoint import model_state, save_checkpoint
from {{ cookiecutter.package_name }}.devkit.precision import PrecisionError, PrecisionPolicy, half_copy, make_policy, resolve_precision
from {{ cookiecutter.package_name }}.model import Classifier, build_model
from {{ cookiecutter.package_name }}.task import WeightedCrossEntropy
from {{ cookiecutter.package_name }}.training.hardware import Hardware
from {{ cookiecutter.package_name }}.training.loop import train_one_epoch

CPU = torch.device("cpu")
META = torch.device("meta")  # autocast has no meta backend: a device where fp16/bf16 cannot run
AUTOCAST_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
CUDA = torch.cuda.is_available()
HALF_TOLERANCE = 0.05  # max |p_fp16 - p_fp32| of any class probability; top-1 must agree


def _model(seed: int = 0) -> torch.nn.Module:
    """The project's classifier, randomly initialised."""
    torch.manual_seed(seed)
    return build_model("{{ cookiecutter.backbone }}", 4, pretrained=False, device=CPU)


def _small_model(seed: int = 0) -> Classifier:
    """The project's Classifier around a small conv + batch-norm backbone: half-precision CPU steps stay fast."""
    torch.manual_seed(seed)
    backbone = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                   torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())  # (B, 8)
    return Classifier(backbone, 8, 4)


def _batch(tiny_data, n: int = 8):
    """n real validation images (B, 3, 32, 32) and their targets (B,)."""
    _, val_set = load_splits(tiny_data, image_size=32)
    return next(iter(build_loader(val_set, n, CPU, train=False)))


@pytest.mark.parametrize("name", AUTOCAST_DTYPES)
def test_logits_take_the_autocast_dtype_and_the_loss_stays_float32(name, tiny_data):
    """Under each policy the logits come out in its dtype; the loss is always computed in float32."""
    model = _model().eval()
    images, targets = _batch(tiny_data)
    with torch.no_grad(), make_policy(name, CPU).autocast():
        logits = model(images)  # (B, 4)
    assert logits.dtype == AUTOCAST_DTYPES[name]
    loss = WeightedCrossEntropy(torch.ones(4))(logits, targets)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)


SCALER_CASES = [("cpu", name, False) for name in AUTOCAST_DTYPES] + [
    pytest.param("cuda:0", name, name == "fp16",
                 marks=[pytest.mark.cuda, pytest.mark.skipif(not CUDA, reason="needs CUDA")])
    for name in ("fp32", "fp16")
]


@pytest.mark.parametrize(("spec", "name", "scaled"), SCALER_CASES)
def test_a_grad_scaler_is_enabled_only_for_fp16_on_cuda(spec, name, scaled):
    """bf16 keeps fp32's range and CPU fp16 has no scaler: only CUDA fp16 scales the loss."""
    scaler = make_policy(name, torch.device(spec)).grad_scaler()
    assert scaler.is_enabled() is scaled


@pytest.mark.parametrize("name", ["bf16", "fp16"])
def test_each_half_precision_takes_a_finite_training_step_on_cpu(name, tiny_data):
    """A real epoch of 8 images under bf16/fp16 autocast gives a finite loss and moves float32 weights."""
    model = _small_model()
    train_set, _ = load_splits(tiny_data, image_size=32)
    before = model.head.weight.detach().clone()
    stats = train_one_epoch(model, WeightedCrossEntropy(torch.ones(4)), torch.optim.AdamW(model.parameters()),
                            build_loader(torch.utils.data.Subset(train_set, range(8)), 8, CPU, train=True),
                            Hardware.create(CPU, name), progress=False)
    assert torch.isfinite(torch.tensor(stats.loss))
    assert model.head.weight.dtype == torch.float32 and not torch.equal(before, model.head.weight)


def test_a_default_precision_that_cannot_run_falls_back_to_fp32_with_one_note(capsys):
    """A project generated with bf16, run where bf16 cannot run, trains in fp32 with a note for the CLI to print."""
    name, note = resolve_precision(None, "bf16", META)
    assert name == "fp32"
    assert note.startswith("precision: bf16") and note.endswith("running in fp32") and "\n" not in note
    assert capsys.readouterr().out == ""  # library code reports; the CLI prints


def test_an_explicit_precision_that_cannot_run_is_refused(cpu_with_bf16):
    """--precision bf16 where it cannot run is a PrecisionError (exit 2), never a silent fp32 run."""
    with pytest.raises(PrecisionError, match="bf16"):
        resolve_precision("bf16", "fp32", META)
    assert resolve_precision("bf16", "fp32", CPU) == ("bf16", None)  # a CPU with AVX512_BF16 runs it natively
    # without AVX512_FP16 or AMX-FP16, fp16 is emulated: the default falls back to fp32 (with a note)
    assert resolve_precision(None, "fp16", CPU)[0] == "fp32"


@pytest.fixture
def cpu_with_bf16(monkeypatch):
    """A CPU whose /proc/cpuinfo flags include AVX512_BF16 (x86 with native bf16)."""
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_bf16"}))


@pytest.fixture
def cpu_without_bf16(monkeypatch):
    """An AVX2-only CPU (like an EPYC Rome): torch emulates bf16 there, about 9x slower than fp32."""
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx", "avx2", "fma"}))


def test_a_default_bf16_the_cpu_only_emulates_falls_back_to_fp32_with_a_note(cpu_without_bf16):
    """A project generated with bf16 on an AVX2-only CPU trains in fp32, and the note says why."""
    name, note = resolve_precision(None, "bf16", CPU)
    assert name == "fp32"
    assert note == ("precision: bf16 is emulated on this CPU (no AVX512_BF16 or AMX), about 9x slower than fp32; "
                    "running in fp32")


def test_an_explicit_bf16_the_cpu_only_emulates_runs_with_a_note_of_the_cost(cpu_without_bf16):
    """--precision bf16 on an AVX2-only CPU is honoured, with one line naming the cost and the native choice."""
    name, note = resolve_precision("bf16", "fp32", CPU)
    assert name == "bf16"
    assert "emulated" in note and "9x slower" in note and note.endswith("--precision fp32 runs natively")


def test_a_default_bf16_on_a_cpu_with_native_bf16_stays(cpu_with_bf16):
    """AVX512_BF16 or AMX: bf16 runs natively, no note."""
    assert resolve_precision(None, "bf16", CPU) == ("bf16", None)


MPS = torch.device("mps")


@pytest.fixture
def mac(monkeypatch):
    """A Mac whose torch and macOS releases the test sets (mac(torch=(2, 7), macos=(14, 1))); MPS autocast works."""
    def install(torch_release: tuple[int, int], macos: tuple[int, int] | None = (15, 0)) -> None:
        monkeypatch.setattr(precision, "torch_release", lambda: torch_release)
        monkeypatch.setattr(precision, "macos_release", lambda: macos)
        monkeypatch.setattr(precision, "_autocast_works", lambda device, dtype: True)
    return install


@pytest.mark.parametrize(("release", "needs"), [((2, 4), "2.8+"), ((2, 7), "2.8+")])
def test_fp16_on_mps_needs_autocast_and_the_gradscaler_there(mac, release, needs):
    """fp16 autocast on MPS arrived in torch 2.5, its GradScaler in 2.8: before that, one line naming the release."""
    mac(release)
    with pytest.raises(PrecisionError, match=rf"\Afp16 training .* on mps needs torch {re.escape(needs)}"):
        make_policy("fp16", MPS)


def test_fp16_on_mps_from_torch_2_8_trains_with_a_scaler(mac):
    mac((2, 8))
    assert make_policy("fp16", MPS).uses_scaler


def test_bf16_on_mps_needs_torch_2_6(mac):
    mac((2, 5))
    with pytest.raises(PrecisionError, match=r"\Abf16 autocast on mps needs torch 2\.6\+"):
        make_policy("bf16", MPS)


def test_bf16_on_mps_needs_macos_14(mac):
    """torch 2.6+ on macOS 13: bf16 is refused naming macOS; on macOS 14 it runs."""
    mac((2, 9), macos=(13, 6))
    with pytest.raises(PrecisionError, match=r"\Abf16 on mps needs macOS 14\+, this Mac runs 13\.6"):
        make_policy("bf16", MPS)
    mac((2, 9), macos=(14, 0))
    assert make_policy("bf16", MPS).dtype == torch.bfloat16


def test_a_default_half_precision_mps_cannot_run_falls_back_with_a_note(mac):
    """The template's default fp16 on an older torch: bf16 where that runs, with a note; nothing refused."""
    mac((2, 6))
    assert resolve_precision(None, "fp16", MPS) == ("bf16", "precision: fp16 training (autocast from 2.5, its "
                                                           "GradScaler from 2.8) on mps needs torch 2.8+, this is "
                                                           f"{torch.__version__}; running in bf16")
    mac((2, 5))
    assert resolve_precision(None, "fp16", MPS)[0] == "fp32"


@pytest.mark.parametrize(("kind", "scaled"), [("cuda", True), ("xpu", True), ("cpu", False), ("mps", True)])
def test_fp16_scales_the_loss_on_the_gpus_that_train_it(kind, scaled):
    """CUDA, Intel XPU and MPS fp16 train with a GradScaler; the CPU's fp16 autocast needs none."""
    assert PrecisionPolicy("fp16", torch.device(kind)).uses_scaler is scaled


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA or torch.cuda.is_bf16_supported(), reason="needs a CUDA GPU without bf16")
def test_bf16_on_a_gpu_without_it_is_exit_2(tiny_data, tmp_path, capsys):
    """On a pre-Ampere GPU, an explicit --precision bf16 stops with one line and writes nothing."""
    code = train.main(["--data", str(tiny_data), "--device", "cuda", "--precision", "bf16",
                       "--out", str(tmp_path / "r")])
    assert code == 2 and "bf16" in capsys.readouterr().err and not (tmp_path / "r").exists()


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_fp16_on_cuda_trains_with_a_scaler_whose_state_is_checkpointed(tiny_data, tmp_path):
    """An fp16 CUDA run steps through the GradScaler and saves its scale with the checkpoint."""
    out = tmp_path / "run"
    assert train.main(["--data", str(tiny_data), "--device", "cuda:0", "--precision", "fp16", "--parallel", "none",
                       "--image-size", "32", "--batch-size", "8", "--epochs", "1", "--out", str(out)]) == 0
    state = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    assert state["config"]["precision"] == "fp16" and state["scaler"]["scale"] > 0


def test_half_copy_leaves_the_float32_model_alone():
    """half_copy returns a float16 model; the original keeps its float32 weights."""
    model = _model()
    half = half_copy(model)
    assert half.dtype == torch.float16 and model.dtype == torch.float32
    assert half.head.weight.data_ptr() != model.head.weight.data_ptr()


def test_predict_half_agrees_with_fp32_within_the_stated_tolerance(tiny_data, tmp_path, capsys):
    """predict.py --half gives the same labels and probabilities within 0.05 of the fp32 run."""
    model = _model(seed=3)
    with torch.no_grad():
        model.head.weight.mul_(10)  # confident, trained-like logits rather than a near-uniform tie
    checkpoint = save_checkpoint(tmp_path / "model.pt", {
        "model": model_state(model), "config": TrainConfig(pretrained=False).to_dict(),  # the real settings
        "class_names": ["circle", "square", "triangle", "cross"], "image_size": 32})
    images = [str(path) for path in sorted((tiny_data / "val").rglob("*.png"))]
    rows = {}
    for flags in ([], ["--half"]):
        assert predict.main([str(checkpoint), *images, "--device", "cpu", "--json", *flags]) == 0
        rows[bool(flags)] = json.loads(capsys.readouterr().out)
    assert len(rows[True]) == len(images)
    for full, half in zip(rows[False], rows[True]):
        assert half["label"] == full["label"] and abs(half["probability"] - full["probability"]) < HALF_TOLERANCE


def test_channels_last_takes_a_training_step_and_keeps_its_layout(tiny_data):
    """--channels-last: NHWC weights and inputs train (finite loss, weights move) and stay NHWC."""
    model = _model().to(memory_format=torch.channels_last)
    conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    train_set, _ = load_splits(tiny_data, image_size=32)
    before = conv.weight.detach().clone()
    stats = train_one_epoch(model, WeightedCrossEntropy(torch.ones(4)), torch.optim.SGD(model.parameters(), lr=0.1),
                            build_loader(torch.utils.data.Subset(train_set, range(8)), 8, CPU, train=True),
                            Hardware.create(CPU, "fp32", channels_last=True), progress=False)
    assert torch.isfinite(torch.tensor(stats.loss)) and not torch.equal(before, conv.weight)
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
