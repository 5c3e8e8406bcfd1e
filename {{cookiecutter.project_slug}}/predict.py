"""Classify images with a trained checkpoint, or a model exported by export.py (.onnx, .pt2).

    python predict.py runs/latest/best.pt photo.jpg holiday/ 'scans/**/*.png' --topk 3
    python predict.py model.onnx photo.jpg          # onnxruntime (pip install -e '.[export]')
    python predict.py model.pt2 photo.jpg           # torch.export.load: a .pt2 this user exported (signed)

Inputs are image files, folders (searched recursively for images) and glob patterns. Prints
an aligned table (path, label, probability), or a JSON list with --json. Unreadable images
are reported on stderr (`warning: skipped PATH: REASON`) and the rest are still classified.
Exit codes: 0 done, 1 failure, 2 bad input (including: no readable image at all).
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from {{ cookiecutter.package_name }} import cli, config
from {{ cookiecutter.package_name }}.data.errors import DataError
from {{ cookiecutter.package_name }}.deferred import deferred
from {{ cookiecutter.package_name }}.errors import ConfigError

# What the prediction runs with: torch and the rest load when first used, once the flags passed (ARCHITECTURE.md)
torch = deferred("torch")
torch_data = deferred("torch.utils.data")
model_files = deferred("{{ cookiecutter.package_name }}.model_files")
model_folder = deferred("{{ cookiecutter.package_name }}.model_folder")
folders = deferred("{{ cookiecutter.package_name }}.data.folders")
image_listing = deferred("{{ cookiecutter.package_name }}.data.listing")
transforms = deferred("{{ cookiecutter.package_name }}.data.transforms")
backends = deferred("{{ cookiecutter.package_name }}.devkit.backends")
precision = deferred("{{ cookiecutter.package_name }}.devkit.precision")
run_state = deferred("{{ cookiecutter.package_name }}.training.run_state")
hardware = deferred("{{ cookiecutter.package_name }}.training.hardware")


def get_args_parser() -> argparse.ArgumentParser:
    """The prediction flags."""
    p = cli.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoint", help="a .pt file written by train.py, its run directory (uses last.pt), "
                                      "or an .onnx / .pt2 file written by export.py")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="image files, folders or glob patterns")
    p.add_argument("--device", default=None, help=f"default: ${config.DEVICE_ENV_VAR}, else {config.DEFAULT_DEVICE}")
    p.add_argument("--half", action="store_true",
                   help="run a float16 copy of the model, inputs cast to match "
                        "(probabilities agree with fp32 to within 0.05)")
    p.add_argument("--topk", type=int, default=1, metavar="K", help="show the K most likely labels per image")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=config.default_workers(),
                   help="DataLoader worker processes (default: the cores this process may use, less one: "
                        "%(default)s here)")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    p.add_argument("--trust", action="append", default=[], metavar="FILE",
                   help="load this .pt2 though this user's export.py did not sign it: loading a .pt2 can run code "
                        "in it, so only for files from someone you trust (repeatable)")
    cli.add_allow_import(p)
    p.add_argument("--verbose", action="store_true", help="print tracebacks on failure")
    return p


def warn(message: str) -> None:
    """A warning line on stderr, so that stdout stays a clean table or JSON."""
    print(message, file=sys.stderr, flush=True)


def expand_inputs(inputs: list[str], warn: Callable[[str], None]) -> list[Path]:
    """Files as given, folders searched recursively for images, globs expanded; in order, no repeats."""
    found: dict[Path, None] = {}  # an ordered set
    for item in inputs:
        path = Path(item)
        if path.is_file():
            found[path] = None
        elif path.is_dir():  # the listing training uses: no directory links followed, hidden names skipped
            listing = image_listing.image_files(path)
            found.update((Path(p), None) for p in listing.paths)
            if listing.note():
                warn(f"{listing.note()} (in {item})")
        elif glob.has_magic(item):  # each match is a file or a folder given by name
            matches = sorted(glob.glob(item, recursive=True))
            found.update(dict.fromkeys(expand_inputs(matches, warn)))
            if not matches:
                warn(f"warning: skipped {item}: no file matches")
        else:
            warn(f"warning: skipped {item}: no such file or directory")
    return list(found)


class ImagePaths:  # a map-style dataset, as DataLoader takes it (torch's base class would load torch here)
    """Images by path; an unreadable one yields its error instead of a tensor, for the collate to drop."""

    def __init__(self, paths: list[Path], transform: Callable, short_side: int | None = None):
        self.paths, self.transform, self.short_side = paths, transform, short_side  # short_side: the memory budget

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor | None, int, str | None]:
        path = str(self.paths[index])
        try:
            return self.transform(folders.load_rgb(path, self.short_side)), index, None  # (3, H, W), on the CPU
        except DataError as error:  # the warning names the path itself; keep only the why
            return None, index, str(error).removeprefix(f"cannot read image {path}: ")


def collate_readable(batch: list) -> tuple[torch.Tensor | None, list[int], list[tuple[int, str]]]:
    """Stack the readable images; return the unreadable ones' indices and reasons separately."""
    readable = [(image, index) for image, index, error in batch if error is None]
    failed = [(index, error) for _, index, error in batch if error is not None]
    images = torch.stack([image for image, _ in readable]) if readable else None  # (B, 3, H, W)
    return images, [index for _, index in readable], failed


def load_predictor(args: argparse.Namespace, device: torch.device) -> model_files.Predictor:
    """The model to classify with: a checkpoint's (optionally a float16 copy), or an exported file's."""
    if model_files.format_of(args.checkpoint) is not None:
        if args.half:
            raise ConfigError("--half makes a float16 copy of a checkpoint's model; an exported model runs as exported")
        # auto may pick a GPU that the installed onnxruntime cannot use: then the CPU runs it, with a note
        explicit = not config.device_spec(args.device).strip().lower().startswith("auto")
        trusted = any(Path(named).resolve() == Path(args.checkpoint).resolve() for named in args.trust)
        return model_files.load(args.checkpoint, device, explicit=explicit, trusted=trusted)
    state = model_folder.read_any(args.checkpoint, trusted=config.trusted_imports(*args.allow_import))
    model = run_state.model_from_state(state, device, args.checkpoint).eval()
    metadata = model_files.Metadata(**run_state.inference_metadata(state))
    if metadata.problem():  # class names that would forge output rows, ...
        raise model_files.ExportError(f"{args.checkpoint}: {metadata.problem()}")
    return model_files.TorchPredictor(precision.half_copy(model) if args.half else model, metadata, device)


def top_predictions(predictor: model_files.Predictor, loader: torch_data.DataLoader, k: int,
                    warn: Callable[[str], None], hw: hardware.Hardware) -> Iterator[tuple[int, list[float], list[int]]]:
    """Yield (input index, top-k probabilities, top-k class indices) per readable image, in order.

    The loader yields uint8 images: `hw` makes them float and normalises them on the predictor's device."""
    for images, indices, failed in loader:
        for index, reason in failed:
            warn(f"warning: skipped {loader.dataset.paths[index]}: {reason}")
        if images is None:
            continue
        images = hw.to_float(images.to(predictor.device, non_blocking=True))  # (B, 3, H, W) float32
        logits = predictor.predict_logits(images)  # (B, C), float32 on the CPU
        probs, classes = logits.softmax(dim=1).topk(k, dim=1)  # (B, k) each
        yield from zip(indices, probs.tolist(), classes.tolist())


def format_row(path: str, labels: list[str], probs: list[float], width: int, label_width: int) -> str:
    """One table row: path, then label and probability (several pairs for --topk > 1)."""
    if len(labels) == 1:
        return f"{path:<{width}}  {labels[0]:<{label_width}}  {probs[0]:.3f}"
    return f"{path:<{width}}  " + ", ".join(f"{label} {p:.3f}" for label, p in zip(labels, probs))


def check_flags(args: argparse.Namespace) -> argparse.Namespace:
    """The flags, refused (one line, exit 2) with the standard library only: before torch loads."""
    if args.topk < 1 or args.batch_size < 1 or args.workers < 0:
        raise ConfigError("--topk and --batch-size must be at least 1, --workers at least 0")
    cli.check_checkpoint(args.checkpoint)
    cli.check_device(args.device)
    return args


def predict(args: argparse.Namespace) -> int:
    """Load the model once, classify every readable input in batches, print a row each."""
    predictor = load_predictor(args, config.compute_device(args.device))
    if predictor.note:
        warn(predictor.note)
    class_names = predictor.metadata.class_names
    paths = expand_inputs(args.inputs, warn)
    if not paths:
        raise DataError(f"no images found in {' '.join(args.inputs)}")
    prep = predictor.metadata.preprocessing()
    # uint8 from the workers (a quarter of the bytes to copy), float and normalised on the predictor's device
    hw = hardware.Hardware.create(predictor.device, mean=prep.mean, std=prep.std)
    dataset = ImagePaths(paths, transforms.build_transforms(prep, train=False, normalize=False),
                         folders.short_side(prep))
    loader = torch_data.DataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers,
                                   collate_fn=collate_readable, pin_memory=backends.pins_memory(predictor.device))
    k = min(args.topk, len(class_names))
    width, label_width = max(len(str(p)) for p in paths), max(len("label"), *map(len, class_names))
    if not args.json:
        header = "probability" if k == 1 else f"top-{k} (label probability)"
        print(f"{'path':<{width}}  " + (f"{'label':<{label_width}}  " if k == 1 else "") + header)
    results = []
    for index, probs, classes in top_predictions(predictor, loader, k, warn, hw):
        labels = [class_names[c] for c in classes]
        topk = [{"label": label, "probability": round(p, 6)} for label, p in zip(labels, probs)]
        results.append({"path": str(paths[index]), **topk[0], "topk": topk})
        if not args.json:  # each row as soon as its batch is done
            print(format_row(str(paths[index]), labels, probs, width, label_width), flush=True)
    if args.json:
        print(json.dumps(results, indent=2))
    if not results:
        raise DataError(f"none of the {len(paths)} image(s) could be read")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse and check the flags (no torch yet), then predict; returns the exit code."""
    args = get_args_parser().parse_args(argv)
    return cli.run_cli(lambda: predict(check_flags(args)), verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
