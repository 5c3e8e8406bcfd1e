"""A multi_gpu=ddp project on two simulated nodes: the docs' multi-node torchrun command, run as a user would.

scripts/netns/two_nodes.sh makes two network namespaces joined by a veth pair (addresses only inside
them); each node also has its own hostname and /etc/hosts. Every case runs the command of the
generated docs/multi-node.md with one process per node and a loader worker (`--workers 1`)
on the demo data at 32 px, and must end with weights equal bit for bit to `torchrun --standalone
--nproc_per_node=2`: as it is; after a SIGKILL of node 1's worker mid-epoch (`--max-restarts 2`);
after SIGTERM to every process group of both nodes mid-epoch and a second launch with `--resume
auto`; and on node-local disks, where node 1 never sees the run folder node 0 writes. A node whose
name resolves to 127.0.1.1 gets one line naming GLOO_SOCKET_IFNAME. The mid-epoch cases hold rank 1 at a
step through the project's tests/paused_train.py (train.py with the tests' pause points, TEST_PAUSE_AT).

Needs root (network namespaces, bind mounts): `.ci/run` runs as root; skipped elsewhere. Each case
prints its time and the exit codes seen.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import DEFAULT_PACKAGE, TEMPLATE, same_training_state, subprocess_env

NETNS = TEMPLATE / "scripts" / "netns" / "two_nodes.sh"
CAN_RUN = os.geteuid() == 0 and all(shutil.which(tool) for tool in ("ip", "unshare"))
# one xdist group with the SLURM tests (test_slurm.py): one worker runs the cluster cases, one after another
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("cluster"), pytest.mark.skipif(
    not CAN_RUN, reason="needs root for network namespaces (ip, unshare); .ci/run runs as root")]
ANSWERS = {"multi_gpu": "ddp"}  # the answer that brings torchrun's machinery and docs/multi-node.md
PAUSE_ENV_VAR = "TEST_PAUSE_AT"  # read by the project's tests/paused_train.py, which the paused launches run
PAUSED_TRAIN = "tests/paused_train.py"
PAUSE_AT = "step:1:2"  # rank 1's first attempt waits after step 2 of epoch 1's 3 (until a stop request)
TRAIN_ARGS = ["--device", "cpu", "--image-size", "32", "--batch-size", "4", "--epochs", "1", "--no-pretrained",
              "--backbone", "mobilenet_v3_small", "--workers", "1"]
LAUNCH_TIMEOUT_S = 600  # every launch (a plain one took 269 s at a load average of 20); a hang fails the case
PORTS = itertools.count(29500)  # the namespaces are this test's own: any port is free in them


def documented_command(project: Path, port: int, out: Path, data: Path, *extra_train: str,
                       max_restarts: int = 0) -> list[str]:
    """The docs' multi-node torchrun command: one process per node, node0 as rendezvous host, our data and folder."""
    docs = (project / "docs" / "multi-node.md").read_text(encoding="utf-8")
    block = re.search(r"```\n(torchrun --nnodes=2 .*?)```", docs, flags=re.S).group(1)
    for old, new in [("torchrun ", f"{sys.executable} -m torch.distributed.run --max-restarts={max_restarts} "),
                     ("--nproc_per_node=8", "--nproc_per_node=1"),
                     ("node0.cluster:29500", f"node0:{port}"),
                     ("--epochs 90 --data /shared/imagenet --out /shared/runs/exp1",
                      f"--data {data} --out {out} {' '.join(TRAIN_ARGS + list(extra_train))}")]:
        assert block.count(old) == 1, f"docs/multi-node.md's multi-node command should contain {old!r} once"
        block = block.replace(old, new)
    return block.replace("\\\n", " ").split()


def _process_groups(roots: list[int]) -> set[int]:
    """The process group of every process in the trees under `roots` (agents, workers, loader workers)."""
    parents, groups = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():  # self, thread-self, sys, ...
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(entry.name)], groups[int(entry.name)] = int(fields[1]), int(fields[2])
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo += [child for child, parent in parents.items() if parent == pid and child not in found]
    return {groups[pid] for pid in found if pid in groups}


def _signal_groups(groups: set[int], signum: int) -> None:
    for group in groups:
        try:
            os.killpg(group, signum)
        except ProcessLookupError:
            pass


class World:
    """The two namespaces, the project, its data and the reference run; launches nodes and cleans up after them."""

    def __init__(self, project: Path, workdir: Path):
        self.project, self.workdir, self.netns = project, workdir, workdir / "netns"
        self.data, self.agents = workdir / "data", []
        write = (f"from {DEFAULT_PACKAGE}.data import write_demo_dataset; "
                 f"write_demo_dataset({str(self.data)!r}, train_per_class=6, val_per_class=3, image_size=32, seed=0)")
        subprocess.run([sys.executable, "-c", write], cwd=project, env=subprocess_env(), check=True, timeout=120)
        subprocess.run([str(NETNS), "up", str(self.netns)], check=True, timeout=60)

    def env(self, **extra: str) -> dict[str, str]:
        # PYTHONFAULTHANDLER: a hung launch's processes print every thread's stack on SIGABRT (_wait)
        env = subprocess_env(OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1", **extra)
        env.pop(PAUSE_ENV_VAR, None)
        return {**env, **extra}

    def start(self, node: int, command: list[str], log: Path, **env: str) -> subprocess.Popen:
        """`command` on node N (its own session), its output in `log`."""
        with open(log, "ab") as handle:
            agent = subprocess.Popen([str(NETNS), "run", str(self.netns), str(node), *command], cwd=self.project,
                                     env=self.env(**env), stdout=handle, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.agents.append(agent)
        return agent

    def launch(self, out: Path, name: str, *extra_train: str, max_restarts: int = 0,
               env: dict[str, str] | None = None, node_env: dict[int, dict[str, str]] | None = None
               ) -> tuple[list[subprocess.Popen], list[Path]]:
        """The documented command on both nodes at once; the agents and their logs. With a pause point in `env`,
        train.py runs through the tests' pause points (tests/paused_train.py), as the project's own tests do."""
        command = documented_command(self.project, next(PORTS), out, self.data, *extra_train,
                                     max_restarts=max_restarts)
        if PAUSE_ENV_VAR in (env or {}):
            command = [PAUSED_TRAIN if arg == "train.py" else arg for arg in command]
        logs = [self.workdir / f"{name}.node{node}.log" for node in (0, 1)]
        agents = [self.start(node, command, logs[node], **(env or {}), **(node_env or {}).get(node, {}))
                  for node in (0, 1)]
        return agents, logs

    def close(self) -> None:
        """Kill whatever a failed case left running, then remove the namespaces."""
        try:
            _signal_groups(_process_groups([agent.pid for agent in self.agents if agent.poll() is None]),
                           signal.SIGKILL)
        finally:
            subprocess.run([str(NETNS), "down", str(self.netns)], timeout=60)


def _texts(logs: list[Path]) -> str:
    return "\n".join(log.read_text(errors="replace") for log in logs if log.exists())


def _wait(agents: list[subprocess.Popen], logs: list[Path]) -> list[int]:
    """The agents' exit codes, each within LAUNCH_TIMEOUT_S; a hang fails with every process's stacks."""
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    try:
        return [agent.wait(timeout=max(1.0, deadline - time.monotonic())) for agent in agents]
    except subprocess.TimeoutExpired:
        groups = _process_groups([agent.pid for agent in agents])
        _signal_groups(groups, signal.SIGABRT)  # faulthandler (World.env) writes each thread's stack to the log
        time.sleep(5)
        _signal_groups(groups, signal.SIGKILL)
        pytest.fail(f"no exit in {LAUNCH_TIMEOUT_S} s; the stacks at the end:\n{_texts(logs)[-12000:]}")


def _paused_pid(agents: list[subprocess.Popen], logs: list[Path]) -> int:
    """The pid of rank 1's worker once it waits at PAUSE_AT."""
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    while not (match := re.search(rf"paused at {PAUSE_AT} \(rank 1, pid (\d+)\)", _texts(logs))):
        assert all(agent.poll() is None for agent in agents), _texts(logs)[-4000:]
        assert time.monotonic() < deadline, f"no pause in {LAUNCH_TIMEOUT_S} s:\n{_texts(logs)[-4000:]}"
        time.sleep(0.1)
    return int(match.group(1))


def timing(case: str, started: float, codes: list) -> None:
    print(f"two nodes, {case}: {time.monotonic() - started:.1f} s, exit codes {codes}")


@pytest.fixture(scope="module")
def world(bakery, tmp_path_factory):
    """Two nodes for a multi_gpu=ddp project, with its demo data; torn down (processes, namespaces) at the end."""
    two = World(bakery.project(**ANSWERS), tmp_path_factory.mktemp("two-nodes"))
    yield two
    two.close()


@pytest.fixture(scope="module")
def reference(world) -> Path:
    """`torchrun --standalone --nproc_per_node=2` with the same training flags, on the host: its last.pt."""
    out, log = world.workdir / "reference", world.workdir / "reference.log"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py",
               "--parallel", "ddp", "--data", str(world.data), "--out", str(out), *TRAIN_ARGS]
    with open(log, "ab") as handle:
        agent = subprocess.Popen(command, cwd=world.project, env=world.env(), stdout=handle,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    world.agents.append(agent)
    assert _wait([agent], [log]) == [0], _texts([log])[-4000:]
    return out / "last.pt"


def test_two_nodes_train_like_one_node_with_two_processes(world, reference):
    """The docs' command on node0 and node1: both exit 0, weights equal to the standalone run's."""
    started, out = time.monotonic(), world.workdir / "plain"
    agents, logs = world.launch(out, "plain")
    codes = _wait(agents, logs)
    timing("plain run", started, codes)
    assert codes == [0, 0], _texts(logs)[-4000:]
    assert "ddp: weights identical on every rank" in _texts(logs)
    same_training_state(out / "last.pt", reference)


def test_sigkill_of_one_nodes_worker_restarts_both_nodes_and_ends_bit_identical(world, reference):
    """--max-restarts 2, node 1's worker killed after step 2: the agents restart, the ranks meet, exit 0."""
    out = world.workdir / "sigkill"
    agents, logs = world.launch(out, "sigkill", "--resume", "auto", "--save-every-minutes", "1e-6", max_restarts=2,
                                env={PAUSE_ENV_VAR: f"{PAUSE_AT}@1"})
    os.kill(_paused_pid(agents, logs), signal.SIGKILL)
    killed = time.monotonic()
    codes = _wait(agents, logs)
    timing("SIGKILL of node 1's worker to the end", killed, codes)
    assert codes == [0, 0], _texts(logs)[-4000:]
    assert f"resume auto: continuing from {out / 'last.pt'}" in _texts(logs)
    same_training_state(out / "last.pt", reference)


def test_sigterm_to_every_process_group_saves_one_step_and_a_second_launch_ends_bit_identical(world, reference):
    """SIGTERM to each process group of both nodes (agents, workers, loader workers) while rank 1 waits after
    step 2: last.pt holds that step; the same command with --resume auto then exits 0 bit-identical."""
    out = world.workdir / "sigterm"
    agents, logs = world.launch(out, "sigterm", "--resume", "auto", env={PAUSE_ENV_VAR: f"{PAUSE_AT}@1"})
    _paused_pid(agents, logs)
    signalled = time.monotonic()
    _signal_groups(_process_groups([agent.pid for agent in agents]), signal.SIGTERM)
    codes = _wait(agents, logs)
    timing("SIGTERM to every process group, to both nodes' exit", signalled, codes)
    text = _texts(logs)
    assert "stopped by SIGTERM at epoch 1 step 2" in text and "DataLoader worker" not in text, text[-4000:]
    state = torch.load(out / "last.pt", map_location="cpu", weights_only=True)
    assert (state["epoch"], state["step"]) == (1, 2)
    started = time.monotonic()
    agents, logs = world.launch(out, "sigterm-resumed", "--resume", "auto")
    codes = _wait(agents, logs)
    timing("the resumed launch", started, codes)
    assert codes == [0, 0], _texts(logs)[-4000:]
    same_training_state(out / "last.pt", reference)


def test_on_node_local_disks_a_restarted_rank_gets_the_checkpoint_from_rank_0(world, reference):
    """Node 1 sees its own empty folder where node 0 writes the run: after a SIGKILL of node 1's worker, the
    restarted rank 1 gets rank 0's last.pt over the network (rank 0 names it) and the job ends bit-identical."""
    out, local_disk = world.workdir / "local" / "run", world.workdir / "node1-disk"
    out.mkdir(parents=True)
    local_disk.mkdir()
    agents, logs = world.launch(out, "local", "--resume", "auto", "--save-every-minutes", "1e-6", max_restarts=2,
                                env={PAUSE_ENV_VAR: f"{PAUSE_AT}@1"},
                                node_env={1: {"NODE_BIND_1": f"{local_disk}:{out}"}})
    os.kill(_paused_pid(agents, logs), signal.SIGKILL)
    killed = time.monotonic()
    codes = _wait(agents, logs)
    timing("node-local disks, SIGKILL of node 1's worker to the end", killed, codes)
    text = _texts(logs)
    assert codes == [0, 0], text[-4000:]
    assert re.search(r"resume: rank 1 on node1 did not have \S+last\.pt .*sent rank 0's copy", text), text[-4000:]
    assert not any(local_disk.iterdir())  # only rank 0 writes
    same_training_state(out / "last.pt", reference)


def test_a_node_named_on_loopback_gets_one_line_naming_the_interface_variables(world):
    """Node 1's hosts file maps node1 to 127.0.1.1 (Debian's line): node 1 prints the GLOO_SOCKET_IFNAME fix."""
    started = time.monotonic()
    agents, logs = world.launch(world.workdir / "loopback", "loopback",
                                node_env={1: {"HOSTS_LINE_1": "127.0.1.1 node1"}})
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    try:
        while "GLOO_SOCKET_IFNAME" not in logs[1].read_text(errors="replace"):
            assert time.monotonic() < deadline and agents[1].poll() is None, _texts(logs)[-4000:]
            time.sleep(0.1)
    finally:
        _signal_groups(_process_groups([agent.pid for agent in agents]), signal.SIGKILL)
        codes = [agent.wait(timeout=60) for agent in agents]
    timing("loopback host name, to the warning", started, codes)
    lines = [line for line in logs[1].read_text().splitlines() if "GLOO_SOCKET_IFNAME" in line]
    assert len(lines) == 1 and "127.0.1.1" in lines[0] and "NCCL_SOCKET_IFNAME" in lines[0]
