"""The few lines of a script's main() that turn the kit's errors into what a user should see: one line, exit 2.

Every error the kit raises for bad input (a device that is not here, a checkpoint that cannot be trusted, a
precision the device cannot run) is a ValueError subclass whose message is that one line, so a script that
adopts the kit needs only:

    from devkit.edge import run_main

    def main() -> int:
        device = resolve_device(args.device)   # DeviceError for --device cuda:1 on a machine with one GPU
        ...
        return 0

    if __name__ == "__main__":
        sys.exit(run_main(main))               # "error: ...", exit 2; anything else keeps its traceback

A mistyped flag is bad input too: `ArgumentParser` is argparse's, but its error is that one line and exit 2,
without the usage block (which can fill a screen and push the error itself out of a log's last lines). It takes
flags as spelled in full only: argparse would read `--verb` as `--verbose` (the next flag added may make it ambiguous,
and a script's own look at sys.argv would miss it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

from .atomic import CheckpointError  # these two modules: the standard library only, so no torch yet
from .spelling import DeviceError, PrecisionError

KIT_ERRORS = (DeviceError, CheckpointError, PrecisionError)  # bad input: the user can fix it
EXIT_BAD_INPUT = 2


def run_main(main: Callable[[], int | None]) -> int:
    """main()'s exit code (0 for None); a kit error is one line on stderr and EXIT_BAD_INPUT."""
    try:
        return main() or 0
    except KIT_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose bad flag or value is one line on stderr and EXIT_BAD_INPUT (--help has the usage)."""

    def __init__(self, *args, **kwargs) -> None:
        """argparse's arguments; abbreviated flags (allow_abbrev) are refused unless asked for."""
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"error: {message} (see {self.prog} --help)\n")
