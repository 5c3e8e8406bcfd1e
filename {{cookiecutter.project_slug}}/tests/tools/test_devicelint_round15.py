"""Round 15 of the device lint: what held-out 13's false alarms and misses showed (after that set was scored).

An accelerator flag set False where an availability test fails is, past that test, on only where the accelerator
is: a guard (bindsnet's example scripts); an option's default is the one its own script's parser gives, not another
script's `set_defaults` for an option of the same name; a helper's parameter a caller passes a DataParallel wrapper
stays wrapped through `model = model.eval()` (dfdc_deepfake_challenge's `evaluate_val`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import devicelint  # tools/devicelint.py: pytest puts tools/ on sys.path (pyproject.toml)

CHECKED = sorted(code for code, rule in devicelint.RULES.items() if rule.default)


def tree_codes(root: Path, files: dict[str, str]) -> list[tuple[str, int, str]]:
    """(file, line, code) for a small program written under `root` (an application: a .git, no setup.py)."""
    (root / ".git").mkdir(parents=True, exist_ok=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    found = devicelint.lint_paths([str(root)], select=CHECKED)
    return sorted((Path(f.path).relative_to(root).as_posix(), f.line, f.code) for f in found)


SCRIPT_WITH_DEFAULT = """
    import argparse
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", dest="gpu", action="store_true")
    parser.set_defaults(plot=False, gpu={default})
    args = parser.parse_args()
    if args.gpu:
        torch.set_default_tensor_type("torch.cuda.FloatTensor")
    """


def test_an_option_default_is_its_own_scripts_not_another_scripts(tmp_path: Path) -> None:
    """bindsnet's `random_network_baseline.py`: its parser sets `gpu=False` (so `--gpu` is an explicit request);
    other scripts' `set_defaults(gpu=True)` are their own options' defaults, not a call passing `gpu=True`. The
    script whose own default is True is still reported."""
    files = {
        "baseline.py": SCRIPT_WITH_DEFAULT.format(default="False"),
        "train.py": SCRIPT_WITH_DEFAULT.format(default="True"),
    }
    assert tree_codes(tmp_path, files) == [("train.py", 10, "DEV010")]
