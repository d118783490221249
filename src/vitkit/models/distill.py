"""DeiT's distillation token (Touvron et al. 2021, "Training data-efficient image transformers & distillation through
attention", §4), with `distilled: true` in the model config.

    z_0 = [x_class; x_distil; x_p^1 E; ...; x_p^N E] + E_pos      the distillation token after the class token
    y   = head(z_L^0), y_dist = head_dist(z_L^1)                   one head per token

The token (`dist_token`) has its own position embedding and its own head (`head_dist`); timm's state dict uses the
same names. While training the model returns both heads' logits (class token, distillation token): the first learns
the labels, the second the teacher's (train.teacher, vitkit.train.objectives.Distillation). In eval it returns their
mean, as DeiT classifies; its pooled feature (`pre_logits=True`) is the mean of the two tokens.
"""

from __future__ import annotations

import torch
from torch import nn


def dist_token(width: int) -> nn.Parameter:
    """The learned distillation token x_distil, (1, 1, D), drawn as DeiT draws it (normal, std 0.02)."""
    return nn.Parameter(torch.randn(1, 1, width) * 0.02)


def two_heads(
    tokens: torch.Tensor, head: nn.Module, head_dist: nn.Module, *, pre_logits: bool, training: bool
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """(B, 2 + N, D) tokens -> the pooled feature (mean of the two tokens), both heads' logits while training, or their
    mean in eval."""
    cls, dist = tokens[:, 0], tokens[:, 1]  # (B, D) each
    if pre_logits:
        return (cls + dist) / 2
    y, y_dist = head(cls), head_dist(dist)  # (B, K) each
    return (y, y_dist) if training else (y + y_dist) / 2


def one_output(out: torch.Tensor | tuple[torch.Tensor, ...]) -> torch.Tensor:
    """One tensor of a forward's output: a distilled model in training gives one per head, here averaged (what it
    gives in eval), for callers that only time or size a pass."""
    return sum(out) / len(out) if isinstance(out, tuple) else out
