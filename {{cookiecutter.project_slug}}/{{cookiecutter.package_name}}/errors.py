"""The errors a user can cause, as one family, so the CLIs map them all to exit code 2.

Every project module raises a subclass of `UserError` for bad input (a flag, a data folder, a
precision the device cannot run). `devices.py` and `checkpoint.py` are written to be copied
into other projects on their own, so their errors (`DeviceError`, `CheckpointError`) subclass
ValueError directly instead of importing this module; `USER_ERRORS` names them beside it.
"""

from __future__ import annotations

from .checkpoint import CheckpointError
from .devices import DeviceError


class UserError(ValueError):
    """Bad input the user can fix: a flag, a file, a folder, a setting. Exit code 2."""


class ConfigError(UserError):
    """A flag or configuration value that cannot work (e.g. `--epochs 0`)."""


USER_ERRORS: tuple[type[Exception], ...] = (UserError, DeviceError, CheckpointError)
