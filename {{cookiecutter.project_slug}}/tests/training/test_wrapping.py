"""Wrappers (DataParallel, torch.compile), unwrapping, and choosing a parallel mode."""

import pytest
import torch
from conftest import cpu_data_parallel
from torch import nn

import train
from {{ cookiecutter.package_name }}.data.folders import load_splits
from {{ cookiecutter.package_name }}.data.loaders import build_loader
from {{ cookiecutter.package_name }}.devkit.checkpoint import load_model_state, model_state, strip_wrapper_prefixes, unwrap
from {{ cookiecutter.package_name }}.model import Classifier
from {{ cookiecutter.package_name }}.processes import Processes
from {{ cookiecutter.package_name }}.task import WeightedCrossEntropy
from {{ cookiecutter.package_name }}.training.hardware import Hardware
from {{ cookiecutter.package_name }}.training.loop import train_one_epoch
from {{ cookiecutter.package_name }}.training.wrapping import ParallelError, check_compile, resolve_parallel, wrap_model

CPU = torch.device("cpu")
CUDA_COUNT = torch.cuda.device_count() if torch.cuda.is_available() else 0
TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _model(seed: int = 0, device: torch.device = CPU) -> Classifier:
    """The project's Classifier around a small conv + batch-norm backbone (wrappers don't care about size)."""
    torch.manual_seed(seed)
    with device:
        backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten())  # (B, 8)
        return Classifier(backbone, 8, 4)


def same_weights(model: nn.Module, other: nn.Module) -> bool:
    """Whether two models (wrappers removed) hold the same tensors under the same names, bit for bit."""
    mine, theirs = unwrap(model).state_dict(), unwrap(other).state_dict()
    return mine.keys() == theirs.keys() and all(torch.equal(mine[key], theirs[key]) for key in mine)


@pytest.fixture
def not_under_torchrun(monkeypatch):
    """A process that torchrun did not start, whatever launched the test suite."""
    for name in TORCHRUN_VARS:
        monkeypatch.delenv(name, raising=False)


def test_dataparallel_on_cpu_leaves_outputs_and_state_dict_keys_unchanged_after_unwrap(any_gpu_count):
    """DataParallel adds `module.` to every key; unwrap gives back the very model, same outputs and keys.

    On any number of visible GPUs: the CPU wrapper neither moves the model to cuda:0 nor refuses it.
    """
    model = _model().eval()
    wrapped = cpu_data_parallel(model)
    assert {parameter.device for parameter in model.parameters()} == {CPU}
    images = torch.randn(2, 3, 32, 32)
    assert all(key.startswith("module.") for key in wrapped.state_dict())
    assert unwrap(wrapped) is model
    assert list(unwrap(wrapped).state_dict()) == list(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(wrapped(images), model(images))


def test_unwrap_strips_dataparallel_and_compile_in_any_nesting(any_gpu_count):
    """Compile inside DataParallel, DataParallel inside compile: unwrap always reaches the plain model."""
    model = _model()
    for wrapped in (torch.compile(cpu_data_parallel(model)), cpu_data_parallel(torch.compile(model))):
        assert unwrap(wrapped) is model
        assert any(key.startswith(("module.", "_orig_mod.")) for key in wrapped.state_dict())
        assert list(strip_wrapper_prefixes(wrapped.state_dict())) == list(model.state_dict())


WRAPPERS = {
    "plain": lambda m: m,
    "dp": cpu_data_parallel,
    "compile": torch.compile,
}


@pytest.mark.parametrize("source", WRAPPERS)
def test_a_checkpoint_from_any_wrapper_loads_into_any_other_and_into_a_plain_model(source, any_gpu_count):
    """Saved through unwrap, the weights of a wrapped model load into every wrapper and give equal outputs."""
    trained = WRAPPERS[source](_model(seed=1))
    state = model_state(unwrap(trained))
    assert not any(key.startswith(("module.", "_orig_mod.")) for key in state)
    images = torch.randn(2, 3, 32, 32)
    expected = unwrap(trained).eval()(images)
    for target in WRAPPERS:
        fresh = WRAPPERS[target](_model(seed=2))
        load_model_state(unwrap(fresh), state, f"{source} checkpoint")
        assert same_weights(fresh, trained)
        torch.testing.assert_close(unwrap(fresh).eval()(images), expected)


def test_asking_for_dp_without_two_gpus_is_exit_2_with_one_line(tiny_data, tmp_path, capsys, not_under_torchrun,
                                                                 no_gpus):
    """An explicit --parallel dp with fewer than two CUDA devices stops before anything is written."""
    out = tmp_path / "run"
    code = train.main(["--data", str(tiny_data), "--device", "cpu", "--parallel", "dp", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "dp needs 2+ CUDA devices" in err[0] and not out.exists()


def test_a_template_default_that_cannot_apply_falls_back_to_one_device_with_a_note(capsys, not_under_torchrun,
                                                                                  no_gpus):
    """A project generated with dp still trains on a laptop: the default becomes none, said once."""
    chosen, note = resolve_parallel(None, "dp", CPU)
    assert chosen == "none"
    assert note.startswith("parallel: ") and "running on one device" in note and "\n" not in note
    assert capsys.readouterr().out == ""  # library code reports; the CLI prints


def test_an_explicit_mode_that_cannot_run_is_refused_not_downgraded(not_under_torchrun, no_gpus):
    """--parallel dp outside its conditions raises ParallelError naming the reason."""
    with pytest.raises(ParallelError, match="2\\+ CUDA"):
        resolve_parallel("dp", "none", CPU)


def test_one_process_sums_and_reads_as_it_is(not_under_torchrun):
    """One process (the core's Processes): totals are its own, it reads every sample, the model stays unwrapped."""
    sums, model = torch.tensor([3.5, 7.0, 9.0]), _model()
    assert Processes().total(sums) is sums and sums.tolist() == [3.5, 7.0, 9.0]
    assert Processes().train_sampler(list(range(10)), seed=0) is None and Processes().eval_indices(range(10)) is None
    assert wrap_model(model, "none", CPU) is model


def _one_step(net: nn.Module, model: nn.Module, tiny_data, memory_format=torch.contiguous_format) -> float:
    """One real training epoch on the tiny data through `net`; returns the loss."""
    train_set, _ = load_splits(tiny_data, image_size=32)
    loader = build_loader(torch.utils.data.Subset(train_set, range(8)), 8, CPU, train=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    hw = Hardware.create(CPU, "fp32", channels_last=memory_format == torch.channels_last)
    stats = train_one_epoch(net, WeightedCrossEntropy(torch.ones(4)), optimizer, loader, hw, progress=False)
    return stats.loss


@pytest.mark.slow
def test_compiled_model_takes_a_training_step(tiny_data):
    """--compile: torch.compile (inductor, C++ on CPU) runs forward and backward and moves the weights."""
    model = _model()
    before = _model()
    net = wrap_model(model, "none", CPU, compile=True)
    assert unwrap(net) is model and net is not model
    assert torch.isfinite(torch.tensor(_one_step(net, model, tiny_data)))
    assert not same_weights(model, before)


def test_compile_without_a_cpp_compiler_is_a_clear_refusal(monkeypatch, tiny_data, tmp_path, capsys):
    """When inductor finds no C++ compiler, --compile is exit 2 with one line saying so, nothing written."""
    inductor_config = pytest.importorskip("torch._inductor.config")
    monkeypatch.setattr(inductor_config.cpp, "cxx", ("/nonexistent/g++",))
    with pytest.raises(ParallelError, match="C\\+\\+ compiler"):
        check_compile(CPU)
    out = tmp_path / "run"
    code = train.main(["--data", str(tiny_data), "--device", "cpu", "--compile", "--parallel", "none",
                       "--image-size", "32", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--compile" in err[0] and not out.exists()


@pytest.mark.parametrize("kind", ["cuda", "xpu"])
def test_compile_on_a_gpu_without_a_c_compiler_for_triton_is_a_clear_refusal(kind, monkeypatch):
    """triton builds its launchers with $CC, gcc or clang: with none, --compile stops before the first step."""
    triton = pytest.importorskip("torch.utils._triton")
    monkeypatch.setattr(triton, "has_triton", lambda: True)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr("shutil.which", lambda name, *args, **kwargs: None)
    with pytest.raises(ParallelError, match=f"--compile on {kind} needs a C compiler for triton"):
        check_compile(torch.device(kind, 0))
    monkeypatch.setenv("CC", "/usr/bin/cc")
    check_compile(torch.device(kind, 0))  # a compiler named by CC is enough


@pytest.mark.cuda
@pytest.mark.multi_gpu
@pytest.mark.skipif(CUDA_COUNT < 2, reason="needs two CUDA devices")
def test_dataparallel_over_two_gpus_matches_the_plain_model_and_gathers_on_the_run_device():
    """dp on cuda:0 spreads a batch over both GPUs; outputs match the single-GPU model, gathered on cuda:0."""
    device = torch.device("cuda", 0)
    model = _model(device=device).eval()
    net = wrap_model(model, "dp", device)
    assert net.device_ids[0] == 0 and len(net.device_ids) == CUDA_COUNT
    images = torch.randn(8, 3, 32, 32, device=device)
    with torch.no_grad():
        torch.testing.assert_close(net(images), model(images), rtol=1e-3, atol=1e-3)
    assert net(images).device == device


def test_dp_with_compile_is_refused_with_one_line_before_anything_is_written(fake_cuda, tmp_path, capsys,
                                                                             not_under_torchrun):
    """--parallel dp --compile on a machine where dp can run (two GPUs): exit 2, one line, no run folder."""
    fake_cuda([70, 70])
    out = tmp_path / "run"
    code = train.main(["--device", "cuda:0", "--parallel", "dp", "--compile", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "--compile" in err[0] and "dp" in err[0] and not out.exists()
    with pytest.raises(ParallelError, match="thread"):
        wrap_model(_model(), "dp", torch.device("cuda:0"), compile=True)
