"""A device-safe classification loss: its class weights are a buffer, so they follow `.to()`.

A plain tensor attribute (`self.weight = torch.tensor(...)`) stays on the CPU when the
loss is moved and fails with "Expected all tensors to be on the same device" on GPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def balanced_class_weights(counts: torch.Tensor) -> torch.Tensor:
    """Weights inversely proportional to class frequency, averaging 1 over the samples."""
    counts = counts.float().clamp(min=1)
    return counts.sum() / (len(counts) * counts)


class WeightedCrossEntropy(nn.Module):
    """Cross entropy with per-class weights held as a buffer, computed in float32."""

    def __init__(self, class_weights: torch.Tensor, label_smoothing: float = 0.0):
        super().__init__()
        self.register_buffer("class_weights", class_weights.float())
        self.label_smoothing = label_smoothing

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean loss for logits (B, C) and integer targets (B,)."""
        # float32 even under autocast: fp16 log-softmax loses the small probabilities.
        return F.cross_entropy(logits.float(), targets, weight=self.class_weights,
                               label_smoothing=self.label_smoothing)
