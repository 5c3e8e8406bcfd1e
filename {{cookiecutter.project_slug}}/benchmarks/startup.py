"""Start-up: how soon train.py answers a typo, prints --help and takes its first optimizer step, beside a peer.

    python benchmarks/startup.py --torchvision /tmp/vision/references/classification/train.py

The peer is torchvision's reference script (pytorch/vision's references/classification/train.py, not part of this
project: check it out from its public repository), run with `--peer-python`. Left out, train.py runs alone.

The data is the demo dataset (data/demo.py), written once into train/ and val/ of hard links (peers.py's split),
the same files for both. Each figure is the wall time from starting a process to a line it prints:
  error   `--epochs abc`: its one-line refusal (exit 2)
  help    `--help`: the whole usage text (exit 0)
  step    the first optimizer step of resnet18 from scratch at 224 px (the reference's fixed crop), batch
          `--batch-size`, `--workers` loader processes, on the CPU with one thread: train.py with a plugin whose
          after_step hook prints a line (`train.main(argv, plugins=[...])`); the reference with --print-freq 1,
          whose first log line follows its first step
then the process (and its loader workers) is ended. The commands run interleaved (ours, the peer's; then the
other way round) `--repeats` times after one untimed round (the file cache, Python's bytecode caches); printed:
each run, the medians, and the median per-round ratios train.py / peer. A script that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, uninstalled
sys.path.insert(0, str(Path(__file__).resolve().parent))  # peers.py beside it

from peers import write_split  # noqa: E402

PROJECT = Path(__file__).resolve().parent.parent
PACKAGE = next(path.parent.parent.name for path in PROJECT.glob("*/devkit/__init__.py"))
# train.py as a user runs it, with one plugin more: it says when the first optimizer step is done, and ends
FIRST_STEP = """
import os, sys
sys.path.insert(0, {project!r})
sys.argv[0] = {train!r}
import train
from {package}.hooks import Plugin


class FirstStep(Plugin):
    def after_step(self, run, epoch, step):
        print("first optimizer step", flush=True)
        os._exit(0)


sys.exit(train.main(sys.argv[1:], plugins=[FirstStep()]))
"""
MEASURES = ("error", "help", "step")


def get_args_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--torchvision", default=None, help="pytorch/vision's references/classification/train.py")
    p.add_argument("--peer-python", default=sys.executable, help="the Python that runs the reference script")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    return p


def ours(measure: str, data: Path, out: Path, args) -> tuple[list[str], Callable[[str], bool]]:
    """train.py's command for `measure`, and the line that ends the timing (None: the process's end)."""
    train = str(PROJECT / "train.py")
    if measure == "error":
        return [sys.executable, train, "--epochs", "abc"], None
    if measure == "help":
        return [sys.executable, train, "--help"], None
    flags = ["--data", str(data), "--backbone", "resnet18", "--no-pretrained", "--image-size", "224",
             "--batch-size", str(args.batch_size), "--workers", str(args.workers), "--epochs", "1",
             "--device", "cpu", "--precision", "fp32", "--threads", "1", "--out", str(out)]
    script = FIRST_STEP.format(project=str(PROJECT), train=train, package=PACKAGE)
    return [sys.executable, "-c", script, *flags], lambda line: line.startswith("first optimizer step")


def reference(measure: str, data: Path, out: Path, args) -> tuple[list[str], Callable[[str], bool]]:
    """The reference script's command for `measure`, and the line that ends the timing (None: its end)."""
    script = [args.peer_python, args.torchvision]
    if measure == "error":
        return [*script, "--epochs", "abc"], None
    if measure == "help":
        return [*script, "--help"], None
    flags = ["--data-path", str(data), "--model", "resnet18", "--device", "cpu", "--batch-size",
             str(args.batch_size), "--workers", str(args.workers), "--epochs", "1", "--print-freq", "1",
             "--output-dir", str(out)]
    return [*script, *flags], lambda line: line.startswith("Epoch: [0]")


def time_to(command: list[str], until: Callable[[str], bool] | None, cwd: Path) -> float:
    """Seconds from starting `command` to the line `until` accepts (or to its end), one thread per process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True) as process:
        said = []
        for line in process.stdout:
            said.append(line)
            if until is not None and until(line):
                elapsed = time.perf_counter() - start
                os.killpg(process.pid, signal.SIGKILL)  # the loader workers too
                return elapsed
        process.wait()
    if until is not None:
        sys.exit(f"error: {' '.join(command[:2])} ended without the line it was timed to:\n{''.join(said[-20:])}")
    return time.perf_counter() - start


def one_round(args, scripts: dict, data: Path, order: list[str], label: str) -> dict[tuple[str, str], float]:
    """Every measure of every script, in `order`; printed as it goes."""
    times = {}
    for measure in MEASURES:
        for name in order:
            out = Path(tempfile.mkdtemp(dir=data.parent))
            command, until = scripts[name](measure, data, out / "run", args)
            times[name, measure] = time_to(command, until, out)
            print(f"{label} {name:12s} {measure:5s} {times[name, measure]:6.2f} s  load "
                  f"{os.getloadavg()[0]:.2f}", flush=True)
    return times


def summary(rounds: list[dict], names: list[str]) -> None:
    """The medians of each script and measure, then the median per-round ratios train.py / peer."""
    for measure in MEASURES:
        medians = "  ".join(f"{name} {statistics.median(r[name, measure] for r in rounds):.2f} s" for name in names)
        line = f"median {measure:5s} {medians}"
        if len(names) > 1:
            ratio = statistics.median(r["train.py", measure] / r[names[1], measure] for r in rounds)
            line += f"  ratio train.py / {names[1]} {ratio:.3f}"
        print(line)


def main(argv: list[str] | None = None) -> None:
    """Write the demo data, time each script's answers, print every run, the medians and the ratios."""
    args = get_args_parser().parse_args(argv)
    demo = importlib.import_module(f"{PACKAGE}.data.demo")
    scripts = {"train.py": ours, **({"torchvision": reference} if args.torchvision else {})}
    names = list(scripts)
    with tempfile.TemporaryDirectory(prefix="startup-") as tmp:
        demo.write_demo_dataset(Path(tmp) / "demo")
        data = Path(tmp) / "data"
        write_split(Path(tmp) / "demo", data, 0.2, 0)
        print(f"demo data in train/ and val/, batch {args.batch_size}, {args.workers} workers, one thread, "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
        one_round(args, scripts, data, names, "warm-up")
        rounds = [one_round(args, scripts, data, names if repeat % 2 == 0 else names[::-1], f"repeat {repeat}")
                  for repeat in range(args.repeats)]
        summary(rounds, names)


if __name__ == "__main__":
    main()
