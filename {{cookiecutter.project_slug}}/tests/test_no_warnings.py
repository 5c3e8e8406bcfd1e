"""A run free of deprecation warnings: train, evaluate, predict and export under warnings-as-errors.

torch, torchvision, TorchCodec, Pillow and this project deprecate APIs between releases (torchvision 0.29
deprecated its image decoders for TorchCodec's); a call the next release removes should fail here first, not
in a user's upgrade. DeprecationWarning and FutureWarning raised from those libraries' modules (or ours) are
errors in a fresh Python that runs each CLI's main(); other libraries' warnings (matplotlib, onnx) stay
warnings, as they are not ours to fix.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import HANG_S
from run_helpers import PROJECT

STRICT = r"^(torch|torchvision|torchcodec|PIL|{{ cookiecutter.package_name }}|train|evaluate|predict|export)(\.|$)"
COMMANDS = '''
import sys, warnings
for kind in (DeprecationWarning, FutureWarning):
    warnings.filterwarnings("error", category=kind, module={strict!r})
import evaluate, export, predict, train
data, out = sys.argv[1], sys.argv[2]
steps = [
    ("train", lambda: train.main(["--data", data, "--out", out, "--epochs", "1", "--device", "cpu", "--batch-size", "8",
                                 "--image-size", "32", "--no-pretrained", "--workers", "1", "--progress", "none"])),
    ("evaluate", lambda: evaluate.main([out + "/best.pt", "--device", "cpu"])),
    ("predict", lambda: predict.main([out + "/best.pt", data + "/val", "--device", "cpu"])),
    ("export pt2", lambda: export.main([out + "/best.pt", "--format", "pt2", "--out", out + "/m.pt2"])),
    ("predict pt2", lambda: predict.main([out + "/m.pt2", data + "/val", "--device", "cpu"])),
]
for name, step in steps:
    code = step()
    print("STEP", name, code, file=sys.stderr, flush=True)
    if code != 0:
        sys.exit(code)
'''


@pytest.mark.slow
def test_train_evaluate_predict_and_export_raise_no_deprecation_warning(tiny_data, tmp_path):
    """Each step exits 0 with deprecation warnings of torch, torchvision, TorchCodec, Pillow and ours as errors."""
    script = COMMANDS.format(strict=STRICT)
    result = subprocess.run([sys.executable, "-c", script, str(tiny_data), str(tmp_path / "run")], cwd=PROJECT,
                            capture_output=True, text=True, timeout=HANG_S)
    steps = [line.split()[1:] for line in result.stderr.splitlines() if line.startswith("STEP ")]
    assert result.returncode == 0 and len(steps) == 5, result.stderr[-3000:]
