"""Macro-F1 and per-class figures from the validation confusion matrix."""

from __future__ import annotations

import pytest
import torch

from {{ cookiecutter.package_name }}.task import class_report, format_report


def test_f1_and_macro_f1_follow_their_definitions():
    """F1 = 2PR / (P + R) per class; a class never predicted and absent scores 0 and still counts in the mean."""
    matrix = torch.tensor([[2, 1, 0, 0], [0, 3, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    report = class_report(matrix)
    expected = [2 * p * r / (p + r) if p + r else 0.0 for p, r in zip(report.precision, report.recall)]
    assert report.f1 == pytest.approx(expected) and report.f1[2:] == [0.0, 0.0]
    assert report.macro_f1 == pytest.approx(sum(expected) / 4)
    table = format_report(report, ["a", "b", "c", "d"])
    [macro_line] = [line for line in table.splitlines() if line.startswith("macro-F1")]  # a project may add lines
    assert f"{report.macro_f1:.6f}" in macro_line and "f1" in table.splitlines()[0]

