"""Run `train.py --help` and then the given test files of a baked project, in one interpreter.

Importing torch and torchvision costs several seconds per process on a small CI machine; doing both
checks in one process halves that for every bake. Run it with the baked project as the working
directory: `python <template>/tests/bake_check.py [test files...]`. The last line of stdout is
`BAKE_CHECK {json}` with the help exit code, the help text and pytest's exit code (null if no files).
"""

import contextlib
import io
import json
import os
import runpy
import sys
import tempfile

# Run as a script, sys.path[0] is this file's folder; the baked project must win imports instead.
sys.path[0] = os.getcwd()


def train_help() -> tuple[int, str]:
    """Exit code and stdout of `python train.py --help`, run as __main__ in this process."""
    sys.argv = ["train.py", "--help"]
    out = io.StringIO()
    code = 0
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path("train.py", run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    return code, out.getvalue()


def main() -> int:
    targets = sys.argv[1:]
    help_code, help_text = train_help() if os.path.isfile("train.py") else (None, "")
    pytest_code = None
    if targets:
        import pytest

        # A basetemp of its own, removed at once: an answer bake's run folders hold GBs of checkpoints (ResNet-50,
        # ConvNeXt), and pytest's default keeps the last three sessions' folders on a disk CI shares.
        with tempfile.TemporaryDirectory(prefix="bake-check-", ignore_cleanup_errors=True) as basetemp:
            pytest_code = int(pytest.main(["-q", "-x", "-p", "no:cacheprovider", f"--basetemp={basetemp}", *targets]))
    print("BAKE_CHECK " + json.dumps({"help_code": help_code, "help": help_text, "pytest_code": pytest_code}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
