"""DistributedDataParallel for real: train.py launched by torchrun, two processes on CPU (gloo).

Also elastic training: a rank SIGKILLed mid-epoch is restarted by `torchrun --max-restarts` and the
job ends with the weights of an uninterrupted run; two torchrun agents (two "nodes" on one machine)
train like one agent with two processes; a NaN on one rank stops every rank.
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from changes import PACKAGE, changed_copy, focal_loss, top2_and_worst_recall
from conftest import HANG_S, TIMM_FAMILIES, nested_tensors
from ddp_helpers import free_port
from run_helpers import PAUSE_ENV_VAR, assert_evaluate_equals_training, paused

import train
from {{ cookiecutter.package_name }}.plugins.ddp.processes import weights_digest
from {{ cookiecutter.package_name }}.training.run_state import model_from_state

PROJECT = Path(__file__).resolve().parents[3]
CUDA_COUNT = torch.cuda.device_count() if torch.cuda.is_available() else 0
# .lock: the run-folder lock rank 0 held (kept: deleting a lock file lets two runs lock different files)
# and what the project's tracker keeps there: its run's id (tracker.json), W&B's files, TensorBoard's event file
RUN_FILES = sorted([".lock", "best.pt", "config.json", "curves.png", "last.pt", "metrics.csv",
{%- if cookiecutter.tracker == "tensorboard" %} "EVENTS"
{%- elif cookiecutter.tracker == "mlflow" %} "tracker.json"
{%- elif cookiecutter.tracker == "wandb" %} "tracker.json", "wandb"
{%- endif %}])


def run_files(out: Path) -> list[str]:
    """The run folder's names, TensorBoard's event file (named after the host and the time) as EVENTS."""
    return sorted("EVENTS" if path.name.startswith("events.out.tfevents.") else path.name for path in out.iterdir())


TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]  # torchrun with this interpreter (works in any venv)


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # ranks share the cores; torchrun's own default, quietly
    env.pop(PAUSE_ENV_VAR, None)
    return {**env, **extra}


def torchrun(nproc: int, *args: str, script: str = "train.py", project: Path = PROJECT) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc_per_node=N train.py ARGS` (in `project`: this one, or a changed copy)."""
    command = [*TORCHRUN, "--standalone", f"--nproc_per_node={nproc}", script, *args]
    return subprocess.run(command, cwd=project, env=_env(), capture_output=True, text=True, timeout=HANG_S)


def _ddp_args(tiny_data: Path, out: Path) -> list[str]:
    # The smallest stock backbone: DDP does not care, and 18 MB checkpoints keep a run near 30 s. --no-pretrained:
    # runs compared with ddp_run start where it started, whatever hub cache each finds (issue 46).
    return ["--device", "cpu", "--parallel", "ddp", "--data", str(tiny_data), "--image-size", "32",
            "--batch-size", "4", "--epochs", "1", "--backbone", "mobilenet_v3_small", "--no-pretrained",
            "--out", str(out)]


def _same_training_state(path: Path, reference: Path) -> None:
    """Model and optimizer tensors equal bit for bit."""
    mine, theirs = (torch.load(p, map_location="cpu", weights_only=True) for p in (path, reference))
    for key in ("model", "optimizer"):
        flat, other = list(nested_tensors(mine[key])), dict(nested_tensors(theirs[key]))
        different = [name for name, tensor in flat if not torch.equal(tensor, other[name])]
        assert flat and not different, f"{key}: {len(different)} tensors differ, first {different[:3]}"
    assert (mine["epoch"], mine["step"]) == (theirs["epoch"], theirs["step"])


@pytest.fixture(scope="module")
def ddp_run(tiny_data, tmp_path_factory):
    """One two-rank, one-epoch DDP run on the CPU, shared by the tests that inspect it."""
    out = tmp_path_factory.mktemp("ddp") / "run"
    result = torchrun(2, *_ddp_args(tiny_data, out))
    assert result.returncode == 0, result.stderr[-3000:]
    return result, out


@pytest.mark.slow
def test_two_rank_ddp_on_cpu_leaves_one_set_of_files_and_a_plain_checkpoint(ddp_run):
    """Exit 0, exactly one last.pt/best.pt/metrics/config/plot (no temp files), model keys without `module.`."""
    _, out = ddp_run
    assert run_files(out) == RUN_FILES
    state = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    assert state["epoch"] == 1 and state["config"]["parallel"] == "ddp"
    assert not any(key.startswith(("module.", "_orig_mod.")) for key in state["model"])
    assert len((out / "metrics.csv").read_text().strip().splitlines()) == 2  # header + one epoch


@pytest.mark.slow
def test_both_ranks_end_with_the_weights_that_were_saved(ddp_run):
    """The ranks' parameter digests were all-gathered and equal, and equal the digest of the saved weights."""
    result, out = ddp_run
    match = re.search(r"ddp: weights identical on every rank \(sha256 ([0-9a-f]{12})\)", result.stdout)
    assert match, result.stdout
    state = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    saved = model_from_state(state, torch.device("cpu"))
    assert weights_digest(saved)[:12] == match.group(1)


@pytest.mark.slow
@pytest.mark.parametrize("backbone", TIMM_FAMILIES)
def test_two_rank_ddp_trains_a_timm_backbone_with_the_same_weights_on_every_rank(tiny_data, tmp_path, backbone):
    """A timm CNN, ViT and hybrid under two-rank DDP: exit 0, the ranks' weights identical and equal to the saved
    ones, which carry no wrapper prefix."""
    out = tmp_path / "run"
    args = [*_ddp_args(tiny_data, out), "--backbone", backbone]  # the last --backbone wins
    result = torchrun(2, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    match = re.search(r"ddp: weights identical on every rank \(sha256 ([0-9a-f]{12})\)", result.stdout)
    state = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    assert match and weights_digest(model_from_state(state, torch.device("cpu")))[:12] == match.group(1)
    assert state["config"]["backbone"] == backbone and not any(key.startswith("module.") for key in state["model"])


@pytest.mark.slow
def test_only_rank_0_prints_the_run(ddp_run):
    """The device line, the epoch line and the summary appear once, not once per rank."""
    result, _ = ddp_run
    assert result.stdout.count("device: cpu, one of 2 processes") == 1
    assert result.stdout.count("epoch 1/1") == 1 and result.stdout.count("done: ") == 1


def test_ddp_without_torchrun_is_exit_2_naming_torchrun(tiny_data, tmp_path, capsys, monkeypatch):
    """An explicit --parallel ddp in a plain `python train.py` stops with one line on how to launch it."""
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "run"
    code = train.main(["--data", str(tiny_data), "--device", "cpu", "--parallel", "ddp", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "torchrun" in err[0]
    assert not out.exists()


@pytest.mark.cuda
@pytest.mark.skipif(CUDA_COUNT < 1, reason="needs a CUDA device")
def test_ddp_with_nccl_puts_each_rank_on_its_own_gpu(tiny_data, tmp_path):
    """On GPUs, `--device auto` gives rank r cuda:r, nccl carries the gradients, and the run finishes."""
    out = tmp_path / "run"
    result = torchrun(min(CUDA_COUNT, 2), "--device", "auto", "--parallel", "ddp", "--data", str(tiny_data),
                      "--image-size", "32", "--batch-size", "4", "--epochs", "1", "--no-pretrained", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "device: cuda:0" in result.stdout and "weights identical on every rank" in result.stdout
    assert run_files(out) == RUN_FILES


@pytest.mark.slow
def test_a_rank_sigkilled_mid_epoch_is_restarted_and_the_job_ends_with_the_uninterrupted_weights(
        ddp_run, tiny_data, tmp_path):
    """torchrun --max-restarts 2 ... --resume auto: kill -9 rank 1 after step 2; exit 0, weights equal bit for bit."""
    out, log = tmp_path / "run", tmp_path / "elastic.log"
    command = paused([*TORCHRUN, "--standalone", "--nproc_per_node=2", "--max-restarts=2", "train.py",
                      *_ddp_args(tiny_data, out), "--resume", "auto", "--save-every-minutes", "1e-6"])
    with open(log, "wb") as handle:
        process = subprocess.Popen(command, cwd=PROJECT, env=_env(**{PAUSE_ENV_VAR: "step:1:2"}),
                                   stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + HANG_S
        while not (match := re.search(r"paused at step:1:2 \(rank 1, pid (\d+)\)", log.read_text())):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        killed = time.monotonic()
        os.kill(int(match.group(1)), signal.SIGKILL)
        assert process.wait(timeout=HANG_S) == 0, log.read_text()[-3000:]
    finally:
        if process.poll() is None:  # the test failed: take torchrun's workers down with it
            os.killpg(process.pid, signal.SIGKILL)
    text = log.read_text()
    print(f"elastic: restart and finish took {time.monotonic() - killed:.1f} s after the kill")
    assert "resume auto: continuing from" in text  # the restarted ranks found the mid-epoch checkpoint
    _same_training_state(out / "last.pt", ddp_run[1] / "last.pt")


@pytest.mark.slow
def test_two_agents_of_one_process_each_train_like_one_agent_with_two(ddp_run, tiny_data, tmp_path):
    """Two `torchrun --nnodes 2` agents meeting at a c10d rendezvous on 127.0.0.1 end with the same weights."""
    out, port = tmp_path / "run", free_port()
    agents = [subprocess.Popen(command, cwd=PROJECT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True) for command in _two_agents(port, "train.py", *_ddp_args(tiny_data, out))]
    outputs = [agent.communicate(timeout=HANG_S)[0] for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], "\n".join(text[-2000:] for text in outputs)
    _same_training_state(out / "last.pt", ddp_run[1] / "last.pt")


def _texts(logs: list[Path]) -> str:
    return "\n".join(log.read_text(errors="replace") for log in logs)


def _two_agents(port: int, *extra: str) -> list[list[str]]:
    """The commands of two `torchrun --nnodes 2` agents (one process each) meeting at 127.0.0.1:port."""
    return [[*TORCHRUN, "--nnodes=2", "--nproc_per_node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
             "--rdzv-id=two-nodes", f"--rdzv-conf=is_host={is_host}", *extra] for is_host in (1, 0)]


@pytest.mark.slow
def test_two_agents_restart_together_after_one_nodes_worker_is_sigkilled_and_end_bit_identical(
        ddp_run, tiny_data, tmp_path):
    """Two agents, --max-restarts 2: kill -9 the second agent's worker after step 2; both restart, meet, exit 0.

    The agents count restarts apart (the one whose worker died counts 1, the other 0), so ranks that
    joined under their agent's count never met and waited for gloo's 30-minute timeout.
    """
    out, port = tmp_path / "run", free_port()
    train_args = ["train.py", *_ddp_args(tiny_data, out), "--resume", "auto", "--save-every-minutes", "1e-6"]
    logs = [tmp_path / "agent0.log", tmp_path / "agent1.log"]
    agents = []
    for command, log in zip(_two_agents(port, "--max-restarts=2", *paused(train_args)), logs):
        with open(log, "wb") as handle:
            agents.append(subprocess.Popen(command, cwd=PROJECT, env=_env(**{PAUSE_ENV_VAR: "step:1:2@1"}),
                                           stdout=handle, stderr=subprocess.STDOUT, start_new_session=True))
    try:
        deadline = time.monotonic() + HANG_S
        while not (match := re.search(r"paused at step:1:2 \(rank 1, pid (\d+)\)", _texts(logs))):
            assert None in {agent.poll() for agent in agents} and time.monotonic() < deadline, _texts(logs)[-3000:]
            time.sleep(0.05)
        os.kill(int(match.group(1)), signal.SIGKILL)
        # the old code waited here until gloo's 30-minute timeout: fail sooner than that
        codes = [agent.wait(timeout=min(HANG_S, 900)) for agent in agents]
    finally:
        for agent in agents:
            if agent.poll() is None:  # the test failed: take the agent's workers down with it
                os.killpg(agent.pid, signal.SIGKILL)
    assert codes == [0, 0], _texts(logs)[-4000:]
    assert "resume auto: continuing from" in _texts(logs)  # rank 0 resumed the mid-epoch checkpoint
    _same_training_state(out / "last.pt", ddp_run[1] / "last.pt")


@pytest.mark.slow
def test_a_nan_on_one_rank_stops_every_rank_with_one_line_and_exit_1(tiny_data, tmp_path):
    """NaN on rank 1's last step only: both ranks print the same one-line error, nothing hangs, last.pt untouched."""
    out = tmp_path / "run"
    result = torchrun(2, "1", "3", *_ddp_args(tiny_data, out), script="tests/plugins/ddp/nan_on_one_rank.py")
    assert result.returncode == 1
    # One line from each rank (the two may share a line of the pipe); no rank died of a broken connection.
    assert result.stderr.count("error: ") == 2, result.stderr[-3000:]
    assert result.stderr.count("non-finite loss at epoch 1 step 3") == 2 and "Connection closed" not in result.stderr
    assert torch.load(out / "last.pt", map_location="cpu", weights_only=True)["epoch"] == 0


@pytest.mark.slow
def test_sigterm_to_one_rank_stops_both_at_the_same_step_with_that_step_saved(tiny_data, tmp_path):
    """Rank 1 alone paused after step 1 gets SIGTERM: both ranks stop after step 1, which last.pt holds."""
    out, log = tmp_path / "run", tmp_path / "term.log"
    command = paused([*TORCHRUN, "--standalone", "--nproc_per_node=2", "train.py", *_ddp_args(tiny_data, out)])
    with open(log, "wb") as handle:
        process = subprocess.Popen(command, cwd=PROJECT, env=_env(**{PAUSE_ENV_VAR: "step:1:1@1"}),
                                   stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + HANG_S
        while not (match := re.search(r"paused at step:1:1 \(rank 1, pid (\d+)\)", log.read_text())):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        os.kill(int(match.group(1)), signal.SIGTERM)
        process.wait(timeout=HANG_S)
    finally:
        if process.poll() is None:  # the test failed: take torchrun's workers down with it
            os.killpg(process.pid, signal.SIGKILL)
    text = log.read_text()
    assert "stopped by SIGTERM at epoch 1 step 1" in text and "error:" not in text, text[-3000:]
    assert "paused at step:1:1 (rank 0" not in text
    state = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    assert (state["epoch"], state["step"]) == (1, 1) and state["epoch_totals"]["seen"] == 8


EVALUATE_BOTH = """
import sys
import evaluate

for name in ("best.pt", "last.pt"):
    assert evaluate.main([sys.argv[1] + "/" + name, "--device", "cpu", "--workers", "1"]) == 0
"""


@pytest.mark.slow
def test_a_loss_and_metrics_of_your_own_sum_over_the_ranks_to_what_one_process_evaluates(tiny_data, tmp_path):
    """task.py changed as the README says (a focal loss, a top-2 accuracy, the worst class's recall): two ranks,
    each validating its shard, record in metrics.csv what evaluate.py, one process over the whole split, prints."""
    copy = changed_copy(tmp_path, f"{PACKAGE}/task.py", lambda text: top2_and_worst_recall(focal_loss(text)))
    out = tmp_path / "run"
    trained = torchrun(2, *_ddp_args(tiny_data, out), "--workers", "1", project=copy)
    assert trained.returncode == 0, trained.stderr[-3000:]
    evaluated = subprocess.run([sys.executable, "-c", EVALUATE_BOTH, str(out)], cwd=copy, env=_env(),
                               capture_output=True, text=True, timeout=HANG_S)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert_evaluate_equals_training(evaluated.stdout, out)
    assert {"val_top2_acc", "val_worst_recall"} <= set((out / "metrics.csv").read_text().splitlines()[0].split(","))
