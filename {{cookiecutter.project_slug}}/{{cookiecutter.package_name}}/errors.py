"""The errors a user can cause, as one family, so the CLIs map them all to exit code 2.

Every project module raises a subclass of `UserError` for bad input (a flag, a data folder, a
file). The device kit (`devkit/`) is written to be copied into other projects whole, so its
errors (`DeviceError`, `CheckpointError`, `PrecisionError`: devkit/edge.KIT_ERRORS) subclass ValueError
directly instead of importing this module; `USER_ERRORS` names them beside it.
"""

from __future__ import annotations

from .devkit.atomic import DiskFullError
from .devkit.edge import KIT_ERRORS


class UserError(ValueError):
    """Bad input the user can fix: a flag, a file, a folder, a setting. Exit code 2."""


class ConfigError(UserError):
    """A flag or configuration value that cannot work (e.g. `--epochs 0`)."""


class MissingDependencyError(UserError):
    """An optional feature whose dependency group is not installed (e.g. `pip install -e '.[export]'`)."""


USER_ERRORS: tuple[type[Exception], ...] = (UserError, *KIT_ERRORS)


class RunFailure(RuntimeError):
    """A failure its message fully explains (the run folder vanished): one line, exit 1, no traceback hint."""


EXPLAINED_FAILURES: tuple[type[Exception], ...] = (RunFailure, DiskFullError)


def one_line(error: BaseException) -> str:
    """The point of an error message in one line.

    Errors raised in DataLoader workers arrive with the worker's traceback in their text;
    its last line is the original message.
    """
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    text = lines[-1] if lines else type(error).__name__
    prefix = f"{type(error).__name__}: "
    return text[len(prefix):] if text.startswith(prefix) else text
