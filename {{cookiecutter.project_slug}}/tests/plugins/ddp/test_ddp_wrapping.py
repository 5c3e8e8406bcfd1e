"""DistributedDataParallel in one process: the wrapper, unwrapping it, the sums and shards of a process group,
accumulation with no_sync, leaving the group, and when --parallel ddp can run at all."""

import gc
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from conftest import cpu_data_parallel
from ddp_helpers import TORCHRUN_VARS, torchrun_env
from torch import nn

from {{ cookiecutter.package_name }}.data.folders import load_splits
from {{ cookiecutter.package_name }}.data.loaders import build_loader
from {{ cookiecutter.package_name }}.devkit.checkpoint import load_model_state, model_state, strip_wrapper_prefixes, unwrap
from {{ cookiecutter.package_name }}.model import Classifier
from {{ cookiecutter.package_name }}.plugins.ddp import PLUGIN
from {{ cookiecutter.package_name }}.plugins.ddp.processes import DistributedProcesses, backend, weights_digest
from {{ cookiecutter.package_name }}.task import WeightedCrossEntropy
from {{ cookiecutter.package_name }}.training.hardware import Hardware
from {{ cookiecutter.package_name }}.training.loop import StepRecipe, train_one_epoch
from {{ cookiecutter.package_name }}.training.wrapping import ParallelError, resolve_parallel, wrap_model

CPU = torch.device("cpu")


def _model(seed: int = 0) -> Classifier:
    """The project's Classifier around a small conv + batch-norm backbone (wrappers don't care about size)."""
    torch.manual_seed(seed)
    backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten())  # (B, 8)
    return Classifier(backbone, 8, 4)


@pytest.fixture
def not_under_torchrun(monkeypatch):
    """A process that torchrun did not start, whatever launched the test suite."""
    for name in TORCHRUN_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def one_rank(monkeypatch):
    """The plugin's processes of a one-rank job, joined as train.py joins (a real gloo group); left afterwards."""
    torchrun_env(monkeypatch)
    processes = DistributedProcesses(CPU)
    yield processes
    processes.close()


def test_unwrap_strips_ddp_inside_and_outside_compile(one_rank, any_gpu_count):
    """The plugin's DDP, and DDP inside torch.compile: unwrap always reaches the plain model, keys lose `module.`."""
    model = _model()
    for wrapped in (one_rank.wrap(model, CPU), torch.compile(one_rank.wrap(model, CPU))):
        assert isinstance(unwrap(wrapped), Classifier) and unwrap(wrapped) is model
        assert any(key.startswith(("module.", "_orig_mod.")) for key in wrapped.state_dict())
        assert list(strip_wrapper_prefixes(wrapped.state_dict())) == list(model.state_dict())


WRAPPERS = {
    "plain": lambda m: m,
    "dp": cpu_data_parallel,
    "ddp": nn.parallel.DistributedDataParallel,
    "compile": torch.compile,
}


@pytest.mark.parametrize("source", WRAPPERS)
def test_a_ddp_checkpoint_loads_into_any_wrapper_and_any_checkpoint_into_ddp(source, one_rank, any_gpu_count):
    """Saved through unwrap, the weights of a DDP model load into every wrapper, and any wrapper's into DDP."""
    trained = WRAPPERS[source](_model(seed=1))
    state = model_state(unwrap(trained))
    assert not any(key.startswith(("module.", "_orig_mod.")) for key in state)
    images = torch.randn(2, 3, 32, 32)
    expected = unwrap(trained).eval()(images)
    for target in WRAPPERS if source == "ddp" else ["ddp"]:
        fresh = WRAPPERS[target](_model(seed=2))
        load_model_state(unwrap(fresh), state, f"{source} checkpoint")
        assert weights_digest(fresh) == weights_digest(trained)
        torch.testing.assert_close(unwrap(fresh).eval()(images), expected)


def test_a_ddp_default_that_cannot_apply_falls_back_to_one_device_with_a_note(capsys, not_under_torchrun, no_gpus):
    """A project generated with ddp still trains on a laptop without torchrun: the default becomes none, said once."""
    chosen, note = resolve_parallel(None, "ddp", CPU, [PLUGIN])
    assert chosen == "none"
    assert note.startswith("parallel: ") and "torchrun" in note and "running on one device" in note
    assert "\n" not in note and capsys.readouterr().out == ""  # library code reports; the CLI prints


def test_an_explicit_ddp_that_cannot_run_is_refused_not_downgraded(not_under_torchrun, no_gpus):
    """--parallel ddp outside torchrun raises ParallelError naming torchrun; without the plugin it is unknown."""
    with pytest.raises(ParallelError, match="torchrun"):
        resolve_parallel("ddp", "none", CPU, [PLUGIN])
    with pytest.raises(ParallelError, match="unknown mode"):
        resolve_parallel("ddp", "none", CPU)


def test_under_torchrun_with_several_processes_the_default_is_ddp(monkeypatch, no_gpus):
    """Started by torchrun with 2 processes and no --parallel: the mode that joins them, whatever the default."""
    torchrun_env(monkeypatch, world_size=2)
    assert resolve_parallel(None, "none", CPU, [PLUGIN]) == ("ddp", None)


def test_in_a_process_group_sums_are_all_reduced_and_data_is_sharded(one_rank):
    """With a real (one-rank) gloo group: all_reduce runs, the sampler is distributed, the val shard is whole."""
    sums = torch.tensor([3.5, 7.0, 9.0], dtype=torch.float64)
    assert one_rank.total(sums).tolist() == [3.5, 7.0, 9.0]
    assert one_rank.max([0, 3]) == [0, 3] and one_rank.gather("x") == ["x"]
    assert isinstance(one_rank.train_sampler(list(range(10)), seed=0), torch.utils.data.DistributedSampler)
    assert list(one_rank.eval_indices(list(range(10)))) == list(range(10))
    assert (one_rank.rank, one_rank.world_size, one_rank.is_main()) == (0, 1, True)


def thread_ids() -> set[str]:
    """This process's threads (Linux). Not by name: gloo's workers are pt_gloo_runloop from torch 2.11, unnamed
    on 2.6-2.8 and pt_main_thread on 2.4, so the test counts the threads that joining the group started."""
    return {task.name for task in Path("/proc/self/task").iterdir()}


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads are counted through Linux's /proc")
def test_leaving_the_group_ends_its_worker_threads_though_a_reference_cycle_holds_the_ddp_model(monkeypatch):
    """Left alive into interpreter shutdown, a gloo worker freeing the last collective's tensors kills the
    rank with SIGABRT after a successful run; the processes' close() ends them while Python still runs."""
    model = _model()
    model(torch.ones(2, 3, 16, 16))  # torch's own CPU thread pools start now, before the count
    before = thread_ids()
    torchrun_env(monkeypatch)
    processes = DistributedProcesses(CPU)
    gc.disable()  # an automatic collection at the wrong moment would hide the cycle
    try:
        run = {"model": processes.wrap(model, CPU)}
        run["run"] = run  # a run's objects refer to each other
        assert "weights identical on every rank" in processes.finish(run["model"])  # an all_gather_object
        del run
        assert thread_ids() - before
        processes.close()
        assert not thread_ids() - before
    finally:
        gc.enable()
        if dist.is_initialized():
            processes.close()


@pytest.mark.parametrize("kind, name", [("cuda", "nccl"), ("xpu", "xccl"), ("cpu", "gloo")])
def test_ddp_ranks_talk_through_their_devices_collective_library(kind, name):
    """nccl between CUDA GPUs, xccl between Intel XPUs, gloo between CPU processes."""
    assert backend(torch.device(kind)) == name


def test_gradient_accumulation_under_ddp_all_reduces_once_per_optimizer_step(one_rank, tiny_data):
    """--accum-steps 3 under DDP: the micro-batches before a group's last skip the all-reduce (no_sync), so an
    epoch of 6 batches all-reduces twice, once per optimizer step, and the plain run's weights come out alike."""
    all_reduces = []

    def counting_allreduce(state, bucket):  # DDP's own all-reduce, counted
        all_reduces.append(bucket.index())
        return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda fut: fut.value()[0])

    train_set, _ = load_splits(tiny_data, 32)
    loader = build_loader(torch.utils.data.Subset(train_set, range(24)), 4, CPU, train=True)  # 6 batches
    results = []
    for processes in (None, one_rank):
        model = _model()
        net = wrap_model(model, "ddp" if processes else "none", CPU, processes=processes)
        if processes:
            net.register_comm_hook(None, counting_allreduce)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader.sampler.set_epoch(1)
        train_one_epoch(net, WeightedCrossEntropy(torch.ones(4)), optimizer, loader,
                        Hardware.create(CPU, processes=processes), recipe=StepRecipe(accum_steps=3), progress=False)
        results.append(weights_digest(model))
    assert len([index for index in all_reduces if index == 0]) == 2, all_reduces  # bucket 0 once per step
    assert results[0] == results[1]
