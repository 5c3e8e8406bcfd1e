"""The README's "Change it" edits of task.py as a user makes them (text changes), and a copy of the project to
make them in: shared by tests/test_change_it.py and the ddp bake's tests (a loss and metric of your own)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
PACKAGE = "{{ cookiecutter.package_name }}"
SOURCES = ("train.py", "evaluate.py", "predict.py", "export.py", PACKAGE)


def changed_copy(tmp_path: Path, relative: str, change: Callable[[str], str]) -> Path:
    """A copy of the project's code with `change` made to the text of `relative` (a path under the project)."""
    copy = tmp_path / "project"
    copy.mkdir()
    for name in SOURCES:
        source = PROJECT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, copy / name)
    path = copy / relative
    before = path.read_text(encoding="utf-8")
    after = change(before)
    assert after != before, f"the change to {relative} did not apply"
    path.write_text(after, encoding="utf-8")
    return copy


FOCAL_LOSS = '''

class FocalLoss(nn.Module):
    """Cross entropy scaled by (1 - p)^gamma: the images already classified well count less."""

    def __init__(self, gamma: float = 2.0):
        super().__init__()
        self.gamma = gamma

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        log_p = F.log_softmax(logits.float(), dim=1).gather(1, targets[:, None]).squeeze(1)  # (B,)
        return (-((1 - log_p.exp()) ** self.gamma) * log_p).mean()
'''


def focal_loss(text: str) -> str:
    """build_loss returns the focal loss, written at the end of task.py."""
    built = "    return WeightedCrossEntropy(balanced_class_weights(counts), label_smoothing).to(device)"
    return text.replace(built, "    return FocalLoss(gamma=2.0).to(device)", 1) + FOCAL_LOSS


def top2_and_worst_recall(text: str) -> str:
    """A top-2 accuracy (TOP_K) and a figure of our own from the confusion matrix: the worst class's recall."""
    figures = 'figures = {"acc": report.accuracy, "macro_f1": report.macro_f1}'
    return (text.replace("TOP_K = (5,)", "TOP_K = (2, 5)", 1)
            .replace(figures, figures[:-1] + ', "worst_recall": min(report.recall)}', 1))
