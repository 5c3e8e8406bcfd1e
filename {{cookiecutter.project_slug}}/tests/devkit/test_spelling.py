"""devkit/spelling.py: a device spec's spelling, checked without torch, refuses exactly what resolve_device would
refuse as malformed, and takes every spelling it takes."""

import subprocess
import sys

import pytest

from {{ cookiecutter.package_name }}.devkit import DeviceError
from {{ cookiecutter.package_name }}.devkit.precision import DTYPES
from {{ cookiecutter.package_name }}.devkit.resolve import _choose
from {{ cookiecutter.package_name }}.devkit.spelling import PRECISIONS, check_device_spelling

SPECS = ["auto", " AUTO ", "auto:free", "auto:free:8GiB", "auto:free:0.5g", "auto:free:8 parsecs", "auto:free:x",
         "auto:freeish", "autos", "cpu", "CPU", "cpu:0", "cpu:1", "cuda", "cuda:0", "cuda:1", "cuda:10", "Cuda:3",
         "cuda:01", "cuda:-1", "cuda: 1", "cuda:", "cuda:0:1", "cuda:+1", "cuda:\u0661", "cuda1", "gpu", "gpu:0",
         "mps", "mps:0", "xpu", "xpu:2", "meta", "hip", "mkldnn", "vulkan", "", " ", "GPU-5e3f", "gpu-", "GPU-xyz"]


def malformed_for_resolve(spec: str) -> bool:
    """Whether resolve_device refuses `spec` for its spelling (a machine without the device says 'not available')."""
    try:
        _choose(spec)
    except DeviceError as error:
        return "unknown device" in str(error) or "auto:free takes" in str(error)
    return False


@pytest.mark.parametrize("spec", SPECS)
def test_the_spelling_check_agrees_with_resolve_device(spec, no_gpus):
    """Refused here exactly when resolve_device refuses it as malformed (no GPU here: presence is not asked)."""
    refused = False
    try:
        check_device_spelling(spec)
    except DeviceError as error:
        refused = True
        assert repr(spec) in str(error)
    assert refused == malformed_for_resolve(spec)


def test_the_precision_names_are_the_dtypes_names():
    """The flag's choices (read before torch loads) are the names precision.py computes in."""
    assert PRECISIONS == tuple(DTYPES)


def test_the_spelling_check_and_the_kit_edge_import_no_torch():
    """A script can refuse a malformed --device, or a bad flag (edge.ArgumentParser), before it imports torch."""
    code = ("import sys; from {{ cookiecutter.package_name }}.devkit import edge, spelling; "
            "print('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
