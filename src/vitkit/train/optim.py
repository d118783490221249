"""The optimizer and its schedule (paper App. B), the training loss, and the EMA of the weights.

Adam(W) with betas 0.9/0.999 and decoupled weight decay (none on norms, biases, position embeddings
and class token) or SGD with momentum for fine-tuning; linear warmup then cosine or linear decay.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.models import VisionTransformer


def param_groups(model: VisionTransformer, weight_decay: float) -> list[dict]:
    """Two groups: weight decay on weight matrices only; none on norms, biases, position embedding, class token."""
    skip = model.no_weight_decay()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim <= 1 or name in skip else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: VisionTransformer, t) -> torch.optim.Optimizer:
    groups = param_groups(model, t.weight_decay)
    if t.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=t.lr, momentum=t.momentum)
    # "adam" and "adamw" are the same here: Adam with decoupled weight decay, as in the paper's code
    # one fused kernel for the whole update, on GPUs and CPUs alike: far quicker than the per-parameter
    # loop, and the same update to rounding
    fused = next(model.parameters()).device.type in ("cuda", "cpu")
    return torch.optim.AdamW(groups, lr=t.lr, betas=t.betas, fused=fused or None)


def learning_rate(step: int, *, lr: float, warmup: int, total: int, decay: str, end_ratio: float = 0.0) -> float:
    """Linear warmup over `warmup` steps, then cosine or linear decay to lr * end_ratio at `total`."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min((step - warmup) / max(total - warmup, 1), 1.0)
    end = lr * end_ratio
    if decay == "cosine":
        return end + (lr - end) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if decay == "linear":
        return lr + (end - lr) * progress
    return lr


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against soft targets (label smoothing, Mixup/CutMix)."""
    return -(targets * F.log_softmax(logits.float(), dim=-1)).sum(dim=-1).mean()


@torch.no_grad()
def update_ema(ema: dict[str, torch.Tensor], model: nn.Module, decay: float) -> None:
    for name, value in model.state_dict().items():
        if value.is_floating_point():
            ema[name].lerp_(value, 1.0 - decay)
        else:
            ema[name].copy_(value)


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, or None for plain fp32: bf16 on GPU by default, fp32 on CPU unless asked."""
    if precision == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
