"""The data pipeline's one error: DataError, a UserError (one line, exit 2, no traceback)."""

from __future__ import annotations

from ..errors import UserError


class DataError(UserError):
    """The data folder is missing, empty or malformed, or an image cannot be read."""
