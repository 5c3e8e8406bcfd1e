"""The kit's errors, in a module of the standard library only: a script can refuse a bad flag before torch loads.

Each is a ValueError whose message is the one line a user should see (edge.py turns them into exit code 2).
"""


class DeviceError(ValueError):
    """A device was asked for that is malformed or not present, or tensors disagree on devices."""


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt, unsafe, or for another model."""


class PrecisionError(ValueError):
    """The requested precision cannot run on the chosen device (a ValueError, so the kit stands alone)."""
