"""The CLIs' edge: user errors become one line on stderr and exit code 2, failures exit 1.

Exit codes: 0 done, 1 failure, 2 bad input (any errors.UserError, a DeviceError or a CheckpointError).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from . import config
from .devkit.atomic import CheckpointError
from .devkit.edge import EXIT_BAD_INPUT, ArgumentParser  # the CLIs' parser: a bad flag is one line and exit 2
from .devkit.spelling import check_device_spelling
from .errors import EXPLAINED_FAILURES, USER_ERRORS, ConfigError, one_line

__all__ = ["ArgumentParser", "add_allow_import", "best_effort_output", "check_checkpoint", "check_data", "check_device",
           "run_cli"]

EXIT_OK, EXIT_FAILURE = 0, 1


def add_allow_import(parser: argparse.ArgumentParser) -> None:
    """--allow-import PATH: an import path a checkpoint may name as its backbone or data (config.check_imports)."""
    parser.add_argument("--allow-import", action="append", default=[], metavar="PATH",
                        help="let the checkpoint name this import path (package.module:Name) as its backbone or "
                             "data: files never choose code to run otherwise (repeatable; config.TRUSTED_IMPORTS "
                             "lists your project's own)")


# The flag checks that need no torch (ARCHITECTURE.md, "Flags first, then torch"): each refuses as the later
# read would, in the same words, seconds sooner

def check_checkpoint(path: str) -> None:
    """Refuse a checkpoint path (a .pt, a run or model folder, an exported file) that is not there."""
    if not Path(path).exists():
        raise CheckpointError(f"checkpoint {path} does not exist")


def check_data(data: str) -> None:
    """Refuse a --data that is neither a path that exists nor a module:function dataset."""
    if not config.is_import_path(data, "data") and not Path(data).exists():
        raise ConfigError(f"--data {data}: not a folder, a .csv labels file or a module:function dataset")


def check_device(flag: str | None) -> None:
    """Refuse a malformed device spec (the --device flag, else the environment's); whether it is here is
    resolve_device's question, once torch has loaded."""
    check_device_spelling(config.device_spec(flag))


class BestEffortStream:
    """A stream whose failure (a closed terminal, /dev/full) silences it instead of failing the command."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except (OSError, ValueError):
            self._silence()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except (OSError, ValueError):
            self._silence()

    def _silence(self) -> None:
        # What the stream still holds drains into /dev/null, so the interpreter's own flush at exit succeeds
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self.stream.fileno())
            os.close(null)
            self.stream.flush()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def best_effort_output() -> None:
    """Make printing best-effort for a command whose result is its files (train.py): a closed stdout or stderr
    reads as /dev/null (so no file the run opens takes its descriptor), and one that fails goes quiet."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:  # closed when the command started: Python left sys.stdout/sys.stderr None
            null = os.open(os.devnull, os.O_WRONLY)  # takes the lowest free descriptor: this one
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, name, open(fd, "w", closefd=False))  # noqa: SIM115 (the process's own stream)
        if not isinstance(getattr(sys, name), BestEffortStream):
            setattr(sys, name, BestEffortStream(getattr(sys, name)))


def run_cli(command: Callable[[], int], *, verbose: bool = False) -> int:
    """Run `command`, mapping user errors to exit 2 and unexpected failures to exit 1."""
    # Python writes file names it could not decode (not UTF-8) with surrogate escapes; a strict stdout
    # (PYTHONIOENCODING=utf-8:strict) would fail on them after the work was done: print them as backslash escapes.
    if getattr(sys.stdout, "errors", None) == "strict" and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        code = command()
        sys.stdout.flush()  # a reader that went away (| head) is found here, inside the handlers below
        return code
    except BrokenPipeError:  # the reader took what it wanted and left: nothing failed
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so exit's own flush is quiet too
        return EXIT_OK
    # bad input (exit 2), or a failure its message fully explains: a full disk, a vanished run folder (exit 1)
    except (*USER_ERRORS, *EXPLAINED_FAILURES) as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT if isinstance(error, USER_ERRORS) else EXIT_FAILURE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # a bug or a runtime failure (e.g. out of memory): still one line
        if verbose:
            traceback.print_exc()
        print(f"error: {type(error).__name__}: {one_line(error)} (rerun with --verbose for the traceback)",
              file=sys.stderr)
        return EXIT_FAILURE
