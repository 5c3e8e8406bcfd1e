"""What an epoch's end costs: train.py's save step (checkpoints with fsync, best.pt, metrics.csv, curves.png).

    python benchmarks/save_overhead.py
    python benchmarks/save_overhead.py --backbone resnet50 --data /path/to/images --out /scratch/bench

Builds the run train.py builds (`training.run.Run`, `--backbone` from scratch, AdamW) and takes one
optimizer step, so the optimizer holds its moments as in a real checkpoint. Then calls the
project's own `epochs.save_epoch` `--repeats` times for an epoch whose validation improved (best.pt
and last.pt: one serialisation, a hard link) and for one that did not (last.pt only), alternating,
into `--out` (a temp folder by default: put it on the disk your runs write to). Prints the checkpoint
size and, per kind, the median wall-clock and CPU seconds of the whole step and of its parts:
building the state, metrics.csv, the curves figure (drawn and written), checkpoint writes (serialise,
write, fsync, rename) and best.pt's link. The first call is shown apart, and so is importing
matplotlib, which train.py does once, at the first epoch's end.
A script that prints figures, not a test; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, uninstalled

import torch  # noqa: E402

from {{ cookiecutter.package_name }} import outputs  # noqa: E402
from {{ cookiecutter.package_name }}.config import TrainConfig  # noqa: E402
from {{ cookiecutter.package_name }}.training import epochs, run_state  # noqa: E402
from {{ cookiecutter.package_name }}.training.run import Run  # noqa: E402

PARTS = ("state", "metrics.csv", "curves", "checkpoint", "link")


def get_args_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=None, help="ImageFolder root (default: the demo data, as train.py)")
    p.add_argument("--backbone", default="resnet18")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--out", default=None, help="where the checkpoints go (default: a temp folder)")
    p.add_argument("--repeats", type=int, default=5)
    return p


def one_step_run(args, out: Path) -> Run:
    """The run train.py builds, after one AdamW step (the optimizer's moments exist, as in a real save)."""
    cfg = TrainConfig(data=args.data, backbone=args.backbone, pretrained=False, image_size=args.image_size,
                      batch_size=4, workers=0, device="cpu", precision="fp32", parallel="none", out=str(out))
    run = Run(cfg, torch.device("cpu"))
    images, targets = run.hw.batch(*next(iter(run.train_loader)))
    run.loss_fn(run.model(images), targets).backward()
    run.optimizer.step()
    return run


@contextlib.contextmanager
def timed_parts(run: Run, seconds: dict[str, list[float]]) -> Iterator[None]:
    """Within it, the parts of save_epoch add their wall-clock seconds to `seconds[part]`."""
    from {{ cookiecutter.package_name }} import plots  # what save_epoch imports at its start

    def timed(part: str, function: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[part].append(time.perf_counter() - start)
        return wrapper

    targets = [(run, "state", "state"), (outputs, "write_metrics", "metrics.csv"),
               (plots, "curves_figure", "curves"), (plots, "save_figure", "curves"),
               (run_state, "save", "checkpoint"), (epochs, "atomic_link", "link")]
    targets = [target for target in targets if hasattr(target[0], target[1])]  # older projects lack a part
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in targets]
    for owner, name, part in targets:
        setattr(owner, name, timed(part, getattr(owner, name)))
    try:
        yield
    finally:
        for owner, name, original in originals:
            if owner is run:
                delattr(run, name)  # back to the class's method
            else:
                setattr(owner, name, original)


def row(epoch: int, val_acc: float) -> dict:
    """A metrics row as run_epoch returns it."""
    return {"epoch": epoch, "train_loss": 1.0, "train_acc": 0.5, "val_loss": 1.0, "val_acc": val_acc, "lr": 1e-3,
            "epoch_time_s": 10.0, "images_per_s": 100.0, "unreadable_images": 0}


def save_once(run: Run, out: Path, epoch: int, improved: bool) -> tuple[float, float, dict[str, float]]:
    """One save_epoch call: its wall and CPU seconds, and the seconds of each part."""
    parts: dict[str, list[float]] = defaultdict(list)
    val_acc = run.best_acc + 0.001 if improved else run.best_acc - 0.001
    with timed_parts(run, parts):
        wall, cpu = time.perf_counter(), time.process_time()
        epochs.save_epoch(run, row(epoch, val_acc), out)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall, cpu, {part: sum(parts[part]) for part in PARTS}


def report(kind: str, results: list[tuple[float, float, dict[str, float]]]) -> None:
    """One line: median wall and CPU seconds of the step, then each part's median wall seconds."""
    wall = statistics.median(r[0] for r in results)
    cpu = statistics.median(r[1] for r in results)
    parts = "  ".join(f"{part} {statistics.median(r[2][part] for r in results):.3f}" for part in PARTS)
    print(f"{kind:13s} wall {wall:.3f} s  cpu {cpu:.3f} s  |  {parts}")


def main(argv: list[str] | None = None) -> None:
    """Build the run, save `--repeats` improved and unimproved epochs alternately, print the medians."""
    args = get_args_parser().parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    from {{ cookiecutter.package_name }} import plots  # noqa: F401  (matplotlib: what save_epoch imports first)
    import_seconds = time.perf_counter() - start
    with tempfile.TemporaryDirectory(prefix="save-overhead-", dir=args.out) as tmp:
        out = Path(tmp)
        run = one_step_run(args, out)
        run.best_acc = 0.0
        first = save_once(run, out, 1, improved=True)
        size = (out / "last.pt").stat().st_size / 1e6
        results: dict[str, list] = {"improved": [], "not improved": []}
        for epoch in range(2, 2 + 2 * args.repeats):
            kind = "improved" if epoch % 2 == 0 else "not improved"
            results[kind].append(save_once(run, out, epoch, improved=kind == "improved"))
    print(f"{args.backbone} + AdamW, checkpoint {size:.1f} MB, {args.repeats} repeats, "
          f"into {args.out or 'a temp folder'}; seconds (medians):")
    print(f"import plots (matplotlib, once a run) wall {import_seconds:.3f} s")
    report("first", [first])
    for kind, values in results.items():
        report(kind, values)


if __name__ == "__main__":
    main()
