"""Export a trained checkpoint for deployment: ONNX (onnxruntime) or .pt2 (torch.export), checked before it is written.

    python export.py runs/latest/best.pt --format onnx --out model.onnx
    python export.py runs/latest/best.pt --format pt2 --out model.pt2
    python export.py runs/latest/best.pt --format safetensors --out my-classifier   # a folder to share

The file holds the plain model (normalised images (B, 3, H, W) in, logits (B, C) out; the batch
dimension dynamic unless --static-batch) and the class names, image size and normalisation.
Before writing, the exported model is run on a batch beside the checkpoint's model, and the
largest logit and probability differences are printed; a file off by more than --tolerance in
probability is not written (exit 1). Export runs on the CPU, so the file does not name a GPU.
A safetensors folder (model_folder.py) holds the weights, config.json and a README.md model card.
A .pt2 is signed with this user's key (FILE.pt2.sig beside it): loading one can run code, so predict.py
reads only those this user exported (or names with --trust). Share ONNX or a safetensors folder instead.
`predict.py FILE ...` takes the result wherever it takes a checkpoint.
Exit codes: 0 done, 1 failure, 2 bad input (including a missing optional dependency).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import signal
import sys
from pathlib import Path

from {{ cookiecutter.package_name }} import cli, config
from {{ cookiecutter.package_name }}.deferred import deferred
from {{ cookiecutter.package_name }}.devkit import atomic
from {{ cookiecutter.package_name }}.errors import ConfigError, one_line

# What the export runs with: torch and the rest load when first used, once the flags passed (ARCHITECTURE.md)
torch = deferred("torch")
model_files = deferred("{{ cookiecutter.package_name }}.model_files")
model_folder = deferred("{{ cookiecutter.package_name }}.model_folder")
run_state = deferred("{{ cookiecutter.package_name }}.training.run_state")
FORMATS = ("onnx", "pt2")  # model_files.FORMATS: the files predict.py takes back


def get_args_parser() -> argparse.ArgumentParser:
    """The export flags."""
    p = cli.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoint", help="a .pt file written by train.py, or its run directory (uses last.pt)")
    p.add_argument("--format", required=True, choices=[*FORMATS, "safetensors"],
                   help="onnx: for onnxruntime (needs pip install -e '.[export]'); pt2: torch.export; safetensors: "
                        "a folder of weights, config.json and a model card (needs the export extra)")
    p.add_argument("--out", required=True, help="the file to write (e.g. model.onnx, model.pt2), or the folder for "
                                                "safetensors")
    p.add_argument("--batch-size", type=int, default=4, help="images in the parity check (default: %(default)s)")
    p.add_argument("--static-batch", action="store_true", help="fix the batch dimension to --batch-size")
    p.add_argument("--tolerance", type=float, default=1e-3,
                   help="largest probability difference accepted in the check (default: %(default)s)")
    cli.add_allow_import(p)
    p.add_argument("--verbose", action="store_true", help="print tracebacks on failure")
    return p


def parity(reference: model_files.Predictor, candidate: model_files.Predictor,
           images: torch.Tensor) -> tuple[float, float]:
    """Largest absolute difference of the logits and of the softmax probabilities on `images`."""
    expected, actual = reference.predict_logits(images), candidate.predict_logits(images)  # (B, C) each
    logit_diff = (expected - actual).abs().max().item()
    prob_diff = (expected.softmax(dim=1) - actual.softmax(dim=1)).abs().max().item()
    return logit_diff, prob_diff


def check_out(path: Path) -> None:
    """Refuse an --out that is a folder, or under a file (ConfigError), before anything is exported."""
    if path.is_dir():
        raise ConfigError(f"--out {path} is a folder; name the file to write (e.g. {path / 'model.pt2'})")
    for place in path.parents:
        if place.exists():
            if not place.is_dir():
                raise ConfigError(f"cannot write --out {path}: {place} is a file, not a folder")
            return


def check_flags(args: argparse.Namespace) -> argparse.Namespace:
    """The flags, refused (one line, exit 2) with the standard library only: before torch loads."""
    if args.batch_size < 1:
        raise ConfigError("--batch-size must be at least 1")
    if not 0 <= args.tolerance < math.inf:  # NaN fails this too: a check that accepts anything is no check
        raise ConfigError(f"--tolerance must be a finite number of at least 0, got {args.tolerance}")
    cli.check_checkpoint(args.checkpoint)
    if args.format != "safetensors":
        check_out(Path(args.out))  # before the export's minutes of work
    return args


def run(args: argparse.Namespace) -> int:
    """Export, check against the checkpoint on a batch, then write the file atomically."""
    device = torch.device("cpu")  # a graph traced on a GPU would name that GPU; the CPU's is portable
    state = model_folder.read_any(args.checkpoint, trusted=config.trusted_imports(*args.allow_import))
    model = run_state.model_from_state(state, device, args.checkpoint).eval()
    metadata = model_files.Metadata(**run_state.inference_metadata(state))
    if metadata.problem():  # class names that would forge output rows, ...
        raise model_files.ExportError(f"{args.checkpoint}: {metadata.problem()}")
    reference, size = model_files.TorchPredictor(model, metadata, device), metadata.image_size
    generator = torch.Generator().manual_seed(0)
    example = torch.randn(args.batch_size, 3, size, size, generator=generator)  # (B, 3, H, W), normalised
    if args.format == "safetensors":
        return export_folder(args, state, reference, example)
    data = model_files.export_bytes(model, example, args.format, metadata, dynamic_batch=not args.static_batch)
    candidate = model_files.predictor_from_bytes(data, args.format, device, args.out)
    # A different batch from the traced one (and of another size, when the batch is dynamic).
    check_batch = args.batch_size if args.static_batch else args.batch_size + 1
    images = torch.randn(check_batch, 3, size, size, generator=generator)
    logit_diff, prob_diff = parity(reference, candidate, images)
    print(f"parity on {check_batch} images of {size} px: max |logit difference| {logit_diff:.3g}, "
          f"max |probability difference| {prob_diff:.3g}")
    if not prob_diff <= args.tolerance:  # also catches NaN
        raise RuntimeError(f"the exported model differs from the checkpoint by {prob_diff:.3g} in probability "
                           f"(over --tolerance {args.tolerance}); {args.out} was not written")
    try:
        path = atomic.atomic_write(args.out, data)
        # this user's signature beside a .pt2 (FILE.pt2.sig): predict.py loads one only when it matches
        note = model_files.write_signature(path, data) if args.format == "pt2" else None
    except atomic.DiskFullError:
        raise
    except OSError as error:  # a read-only or special file system (/proc), no permission
        raise ConfigError(f"cannot write --out {args.out}: {error.strerror or error}") from None
    if note:
        print(f"note: {note}", file=sys.stderr)
    batch = check_batch if args.static_batch else "dynamic"
    signed = f"; this user's signature in {model_files.signature_file(path).name}" if args.format == "pt2" else ""
    print(f"wrote {path} ({args.format}, {Path(path).stat().st_size / 2**20:.1f} MiB, "
          f"{len(metadata.class_names)} classes, {size} px, batch {batch}{signed})")
    return 0


def export_folder(args: argparse.Namespace, state: dict, reference: model_files.TorchPredictor,
                  images: torch.Tensor) -> int:
    """The model folder: weights, settings and card; read back and checked against the checkpoint's model."""
    try:
        environment = model_folder.run_environment(args.checkpoint)
    except model_files.ExportError as error:  # only the card's command and versions come from it: not worth a refusal
        print(f"note: {one_line(error)}; the model card says 'not recorded' for the command and versions",
              file=sys.stderr)
        environment = {}
    metadata = reference.metadata
    try:
        folder = model_folder.write(state, dataclasses.asdict(metadata), environment, args.out)
    except atomic.DiskFullError:
        raise  # not the user's bad input: exit 1, as for a file (cli.run_cli)
    except OSError as error:
        raise ConfigError(f"cannot write --out {args.out}: {error.strerror or error}") from None
    back = model_folder.read_any(folder, trusted=config.trusted_imports(*args.allow_import))
    model = run_state.model_from_state(back, reference.device, str(folder)).eval()
    logit_diff, _ = parity(reference, model_files.TorchPredictor(model, metadata, reference.device), images)
    print(f"wrote {folder} (model.safetensors, config.json, README.md; {len(metadata.class_names)} classes, "
          f"{metadata.image_size} px; read back: max |logit difference| {logit_diff:.3g})")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse and check the flags (no torch yet), then export; returns the exit code."""
    args = get_args_parser().parse_args(argv)
    # SIGTERM ends the export as an exception would: the scratch folder beside --out is removed on the way out
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    return cli.run_cli(lambda: run(check_flags(args)), verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
