"""What a user may type for a device or a precision, and its errors, with the standard library only.

`check_device_spelling(spec)` refuses (DeviceError) what resolve_device would refuse as malformed, without
importing torch: a script can answer `--device cuda1` at once, before its seconds of imports. Whether the
device is present is resolve_device's question, asked once torch has loaded.
"""

from __future__ import annotations

import re


class DeviceError(ValueError):
    """A device was asked for that is malformed or not present, or tensors disagree on devices."""


class PrecisionError(ValueError):
    """The requested precision cannot run on the chosen device (a ValueError, so the kit stands alone)."""


KINDS = ("cpu", "cuda", "mps", "xpu", "meta")
INDEXED = ("cuda", "mps", "xpu")  # tensors on these report an index: cuda:0, never bare cuda
PRECISIONS = ("fp32", "fp16", "bf16")  # precision.DTYPES' names

AUTO_FREE = re.compile(r"auto:free(?::([0-9]+(?:\.[0-9]+)?)([a-z]*))?\Z")  # auto:free, auto:free:8GiB
UUID = re.compile(r"gpu-[0-9a-f-]+\Z")  # as nvidia-smi -L and CUDA_VISIBLE_DEVICES write it
UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20, "g": 2**30, "gib": 2**30, "t": 2**40, "tib": 2**40}
# torch's own spelling of a device: a kind, and an index without sign, space or leading zero ('cuda:01' is refused)
_KIND_INDEX = re.compile(rf"({'|'.join(KINDS)})(?::(0|[1-9][0-9]*))?\Z", re.ASCII)
SPELLINGS = "auto, auto:free[:MIN], cpu, cuda[:N], GPU-<uuid>, mps, xpu[:N]"
_TABLE = f"python -m {__package__}"  # the device table: what this machine has


def check_device_spelling(spec: str) -> None:
    """Refuse (DeviceError, one line) a device spec that no machine has, e.g. 'cuda1' or 'auto:free:8 parsecs'."""
    text = spec.strip().lower()  # any case, any surrounding space, as resolve_device takes them
    if text == "auto" or UUID.match(text) or _KIND_INDEX.match(text):
        return
    if text.startswith("auto:free"):
        match = AUTO_FREE.match(text)
        if match and (not match.group(1) or match.group(2) in UNITS):
            return
        raise DeviceError(f"unknown device {spec!r}: auto:free takes a minimum such as auto:free:8GiB")
    raise DeviceError(f"unknown device {spec!r}; spell it as one of {SPELLINGS} ({_TABLE} lists those available "
                      "here)")
