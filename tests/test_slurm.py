"""The SLURM batch script of a project generated with scheduler=slurm (and multi_gpu=ddp) on a real one-node cluster.

`scripts/slurm_train.sh` is submitted as generated, with only its resource lines and data changed
(SUBSTITUTIONS, also listed in the README) and train.py run through the project's tests/paused_train.py
(train.py with the tests' pause points), and stopped three ways at a known mid-epoch step (TEST_PAUSE_AT
holds its first run after step 2 of epoch 1): `scontrol requeue`, the time
limit (`--time` with the script's `--signal=B:USR1@...` trap), and preemption by a job in a
higher-priority partition; the requeue also with a loader worker (`--workers 1`), whose process slurmd
signals too. Each time the job must save that step, come back, resume there, exit 0
and end with weights equal bit for bit to the same torchrun command run without interruption.

Needs the cluster of scripts/slurm/up.sh, which exports TEMPLATE_SLURM_CLUSTER and SLURM_CONF
(`.ci/run` starts one as root); skipped elsewhere. Timings go to $TEMPLATE_SLURM_CLUSTER/timings.txt.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from helpers import DEFAULT_PACKAGE, same_training_state, subprocess_env

ANSWERS = {"multi_gpu": "ddp", "scheduler": "slurm"}  # the answers that bring the batch script and torchrun's ranks

CLUSTER = os.environ.get("TEMPLATE_SLURM_CLUSTER")
pytestmark = pytest.mark.xdist_group("cluster")  # one worker runs these and the two-node tests (test_two_nodes.py)
needs_cluster = pytest.mark.skipif(
    not CLUSTER, reason='needs a SLURM cluster: as root, eval "$(scripts/slurm/up.sh)" first (README, "SLURM test")')
PAUSE_ENV_VAR = "TEST_PAUSE_AT"  # read by the project's tests/paused_train.py
PAUSE_AT = "step:1:2"  # the first run of each job waits after step 2 of epoch 1 until a stop request arrives
SCRIPT = "scripts/slurm_train.sh"
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY", "DEADLINE"}

# Tiny and deterministic: 24 images of 32 px, 6 steps an epoch, 2 epochs, one CPU rank (gloo).
TRAIN_ARGS = "--epochs 2 --device cpu --image-size 32 --batch-size 4 --no-pretrained --backbone resnet18"


def substitutions(data: Path, runs: Path, time_limit: str, signal_at: str, workers: int = 0) -> list[tuple[str, str]]:
    """(text in the generated script, its replacement on a one-node CPU cluster); each text occurs once."""
    return [
        ("#SBATCH --nodes=2", "#SBATCH --nodes=1"),
        ("#SBATCH --gpus-per-node=8\n", ""),  # no GPUs
        ("#SBATCH --cpus-per-task=32", "#SBATCH --cpus-per-task=1"),
        ("#SBATCH --time=24:00:00", f"#SBATCH --time={time_limit}"),
        ("#SBATCH --signal=B:USR1@300", f"#SBATCH --signal=B:USR1@{signal_at}"),
        ("--nproc_per_node=8", "--nproc_per_node=1"),
        ("    train.py --parallel ddp", "    tests/paused_train.py --parallel ddp"),  # the tests' pause points
        ("--data /shared/imagenet --epochs 90", f"--data {data} {TRAIN_ARGS} --workers {workers}"),
        ("/shared/runs/", f"{runs}/"),
    ]


def adapted_script(project: Path, **values) -> str:
    """The project's batch script with SUBSTITUTIONS applied (each must match exactly once)."""
    text = (project / SCRIPT).read_text(encoding="utf-8")
    for old, new in substitutions(**values):
        assert text.count(old) == 1, f"{SCRIPT} should contain {old!r} once"
        text = text.replace(old, new)
    return text


def test_the_docs_show_the_batch_script_line_for_line(bakery):
    """docs/preemption.md's SLURM block is scripts/slurm_train.sh, and every substitution still applies."""
    project = bakery.project(**ANSWERS)
    docs = (project / "docs" / "preemption.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", docs, flags=re.S)
    script = (project / SCRIPT).read_text(encoding="utf-8")
    assert script in blocks, f"docs/preemption.md should show {SCRIPT} verbatim"
    assert adapted_script(project, data=Path("/d"), runs=Path("/r"), time_limit="2", signal_at="60")


def test_each_job_gets_a_rendezvous_port_of_its_own(bakery, tmp_path):
    """Run as jobs 4711 and 4712 (srun and scontrol stand-ins record the torchrun line): two ports, both valid.

    A fixed port put two jobs whose first node was the same into one rendezvous; scancel of one killed both.
    """
    project, bin_dir = bakery.project(**ANSWERS), tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho node0\n", encoding="utf-8")
    (bin_dir / "srun").write_text('#!/bin/sh\necho "$@" >> "$SRUN_LOG"\n', encoding="utf-8")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    ports = []
    for job in ("4711", "4712", "4711"):
        log = tmp_path / f"srun-{len(ports)}.txt"
        result = subprocess.run(["bash", SCRIPT], cwd=project, capture_output=True, text=True, timeout=60,
                                env=subprocess_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", SRUN_LOG=str(log),
                                                   SLURM_JOB_ID=job, SLURM_JOB_NODELIST="node[0-1]", SLURM_NNODES="2",
                                                   SLURM_JOB_NAME="exp1"))
        assert result.returncode == 0, result.stderr
        ports.append(int(re.search(r"--rdzv-endpoint=node0:(\d+) ", log.read_text()).group(1)))
    assert ports[0] != ports[1] and ports[0] == ports[2], ports  # a requeued job (same id) keeps its port
    assert all(1024 <= port < 65536 for port in ports), ports


def slurm(*args: str) -> str:
    """Run a SLURM client command; its stdout."""
    result = subprocess.run(args, env=subprocess_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"{' '.join(args)}: {result.stderr}"
    return result.stdout


def job_fields(job: str) -> dict[str, str]:
    """`scontrol show job` as a dict (JobState, Restarts, ExitCode, ...)."""
    return dict(item.split("=", 1) for item in slurm("scontrol", "show", "job", "-o", job).split() if "=" in item)


def timing(line: str) -> None:
    """Print a measured time and keep it in the cluster folder for .ci/run to show."""
    print(line)
    with open(Path(CLUSTER) / "timings.txt", "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def wait_for(what: str, condition: Callable[[], object], log: Path, timeout: float = 240) -> float:
    """Poll until condition() is true; the monotonic time it became so. Fails with the job's log tail."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} in {timeout:.0f} s; log tail:\n{_text(log)[-3000:]}"
        time.sleep(0.1)
    return time.monotonic()


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


class Job:
    """One submission of the adapted batch script: its id, log and run folder."""

    def __init__(self, project: Path, workdir: Path, data: Path, name: str, time_limit: str = "10",
                 signal_at: str = "300", workers: int = 0):
        self.name, self.log, self.out = name, workdir / f"{name}.log", workdir / "runs" / name
        script = workdir / f"{name}.sh"
        script.write_text(adapted_script(project, data=data, runs=workdir / "runs", time_limit=time_limit,
                                         signal_at=signal_at, workers=workers), encoding="utf-8")
        env = subprocess_env(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                             OMP_NUM_THREADS="1", **{PAUSE_ENV_VAR: PAUSE_AT})
        result = subprocess.run(["sbatch", "--parsable", f"--job-name={name}", f"--output={self.log}",
                                 f"--chdir={project}", str(script)], env=env, capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0, result.stderr
        self.id = result.stdout.strip().split(";")[0]
        self.submitted = time.monotonic()

    def fields(self) -> dict[str, str]:
        return job_fields(self.id)

    def wait_paused(self) -> float:
        return wait_for(f"'paused at {PAUSE_AT}'", lambda: f"paused at {PAUSE_AT}" in _text(self.log), self.log)

    def wait_requeued_with_the_step_saved(self) -> float:
        """Until SLURM holds the job pending again; then last.pt must hold epoch 1 step 2."""
        at = wait_for("requeue", lambda: self.fields()["JobState"] == "PENDING"
                      and int(self.fields()["Restarts"]) >= 1, self.log)
        state = torch.load(self.out / "last.pt", map_location="cpu", weights_only=True)
        assert (state["epoch"], state["step"]) == (1, 2), f"last.pt holds {state['epoch']}/{state['step']}"
        return at

    def wait_running(self) -> float:
        return wait_for("restart", lambda: self.fields()["JobState"] == "RUNNING", self.log)

    def finish(self, reference: Path) -> str:
        """Wait for the end: COMPLETED with exit 0, resumed from the mid-epoch step, weights as the reference's."""
        wait_for("end", lambda: self.fields()["JobState"] in FINAL_STATES, self.log)
        fields, text = self.fields(), _text(self.log)
        assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), f"{fields}\n{text[-3000:]}"
        assert "stopped by SIGTERM at epoch 1 step 2" in text, text[-3000:]
        assert f"resume auto: continuing from {self.out / 'last.pt'}" in text, text[-3000:]
        assert "interrupted" not in text, text[-3000:]  # no KeyboardInterrupt, in any run
        same_training_state(self.out / "last.pt", reference)
        return text


class Reference:
    """The same torchrun command outside SLURM, uninterrupted: the weights every job must end with."""

    def __init__(self, project: Path, data: Path, out: Path):
        self.command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
                        "train.py", "--parallel", "ddp", "--data", str(data), *TRAIN_ARGS.split(), "--workers", "0",
                        "--out", str(out),
                        "--resume", "auto", "--save-every-minutes", "20"]
        self.project, self.out, self.process = project, out, None

    def start(self) -> None:
        """Start it in the background (once). Never while a job waits for its signals: a busy CPU
        delays a training process's handler until torchrun's copy of SIGTERM has arrived too, and
        the two then count as one, which hides the very thing these tests are for."""
        if self.process is None:
            self.process = subprocess.Popen(self.command, cwd=self.project, env=subprocess_env(OMP_NUM_THREADS="1"),
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def checkpoint(self) -> Path:
        """Its last.pt, once it has finished with exit 0."""
        self.start()
        output = self.process.communicate(timeout=300)[0]
        assert self.process.returncode == 0, output[-3000:]
        return self.out / "last.pt"


@pytest.fixture(scope="module")
def cluster_run(bakery, tmp_path_factory):
    """The project, its data, a submit(name, ...) for jobs (cancelled at the end) and the reference run."""
    project = bakery.project(**ANSWERS)
    workdir = tmp_path_factory.mktemp("slurm")
    data = workdir / "data"
    write = (f"from {DEFAULT_PACKAGE}.data import write_demo_dataset; "
             f"write_demo_dataset({str(data)!r}, train_per_class=6, val_per_class=3, image_size=32, seed=0)")
    subprocess.run([sys.executable, "-c", write], cwd=project, env=subprocess_env(), check=True, timeout=120)
    jobs: list[Job] = []
    reference = Reference(project, data, workdir / "reference")

    def submit(name: str, **limits: str) -> Job:
        jobs.append(Job(project, workdir, data, name, **limits))
        return jobs[-1]

    yield {"submit": submit, "reference": reference}
    if reference.process is not None and reference.process.poll() is None:
        reference.process.kill()
    for job in jobs:
        subprocess.run(["scancel", job.id], env=subprocess_env(), capture_output=True, timeout=60)


@needs_cluster
@pytest.mark.slow
def test_a_requeued_job_resumes_at_its_step_and_ends_bit_identical(cluster_run):
    """`scontrol requeue` while paused after step 1:2: last.pt holds it, the job restarts, resumes, exits 0."""
    job = cluster_run["submit"]("requeue")
    job.wait_paused()
    requeued = time.monotonic()
    slurm("scontrol", "requeue", job.id)
    pending = job.wait_requeued_with_the_step_saved()
    cluster_run["reference"].start()  # the signals are handled: now the CPU may be busy
    running = job.wait_running()
    job.finish(cluster_run["reference"].checkpoint())
    timing(f"requeue: {pending - requeued:.1f} s to stop and requeue, {running - requeued:.1f} s to running again, "
           f"{time.monotonic() - job.submitted:.1f} s from submission to the end")


@needs_cluster
@pytest.mark.slow
def test_a_requeued_job_with_a_loader_worker_resumes_at_its_step_and_ends_bit_identical(cluster_run):
    """--workers 1: slurmd signals the loader worker too; the step is still saved, the job resumes and exits 0.

    The loader worker's order does not depend on how many workers load it, so the reference (--workers 0) holds.
    """
    job = cluster_run["submit"]("requeue-workers", workers=1)
    job.wait_paused()
    requeued = time.monotonic()
    slurm("scontrol", "requeue", job.id)
    pending = job.wait_requeued_with_the_step_saved()
    running = job.wait_running()
    job.finish(cluster_run["reference"].checkpoint())
    timing(f"requeue with --workers 1: {pending - requeued:.1f} s to stop and requeue, {running - requeued:.1f} s to "
           f"running again, {time.monotonic() - job.submitted:.1f} s from submission to the end")


@needs_cluster
@pytest.mark.slow
def test_the_time_limit_signal_saves_requeues_and_the_job_ends_bit_identical(cluster_run):
    """--time=3 --signal=B:USR1@60: the script's trap stops the step at 1:2 and requeues; the job ends exit 0.

    USR1 comes 90 to 120 s after the start: time for torch's import and two steps on a loaded machine
    (with --time=2, 30 to 60 s, the first run had not reached step 2 at a load average of 15).
    """
    job = cluster_run["submit"]("timelimit", time_limit="3", signal_at="60")
    job.wait_paused()
    signalled = wait_for("time-limit signal", lambda: "time limit near" in _text(job.log), job.log, timeout=240)
    pending = job.wait_requeued_with_the_step_saved()
    running = job.wait_running()
    text = job.finish(cluster_run["reference"].checkpoint())
    # the trap's line, then the training process's: the step it saved, the one the next start resumes at
    assert re.search(r"time limit near.*stopped by SIGTERM at epoch 1 step 2: \S+ holds epoch 1 step 2", text, re.S)
    timing(f"time limit: USR1 {signalled - job.submitted:.1f} s after submission (limit 180 s, asked for 60 s "
           f"before it), {pending - signalled:.1f} s to stop and requeue, {running - signalled:.1f} s to running "
           f"again, {time.monotonic() - job.submitted:.1f} s from submission to the end")


@needs_cluster
@pytest.mark.slow
def test_a_job_preempted_by_a_higher_priority_partition_resumes_and_ends_bit_identical(cluster_run):
    """A job in partition `high` needing every CPU preempts the paused job (requeue); it comes back and ends exit 0."""
    job = cluster_run["submit"]("preempted")
    job.wait_paused()
    preempted = time.monotonic()
    every_cpu = slurm("sinfo", "-h", "-o", "%c").split()[0]
    slurm("sbatch", "--parsable", "--partition=high", f"--cpus-per-task={every_cpu}", f"--output={job.log}.high",
          "--wrap=true")
    pending = job.wait_requeued_with_the_step_saved()
    running = job.wait_running()
    job.finish(cluster_run["reference"].checkpoint())
    timing(f"preemption: {pending - preempted:.1f} s to stop and requeue, {running - preempted:.1f} s to running "
           f"again, {time.monotonic() - job.submitted:.1f} s from submission to the end")
