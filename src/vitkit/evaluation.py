"""Classification metrics: top-1, top-5, per-class accuracy and the confusion matrix (paper §4.1)."""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from vitkit.data.augment import eval_transform


def topk_correct(logits: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
    """(B,) bool: whether the label is among the k highest logits."""
    k = min(k, logits.shape[-1])
    return (logits.topk(k, dim=-1).indices == labels[:, None]).any(dim=-1)


def confusion_matrix(pred: torch.Tensor, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(K, K) int64 counts; row = true class, column = predicted class."""
    return torch.bincount(labels * num_classes + pred, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


@torch.no_grad()
def evaluate(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    crop_pct: float = 1.0,
    autocast_dtype: torch.dtype | None = None,
) -> dict:
    """Run `model` over (uint8 images, labels) batches; top1/top5 in [0, 1], mean loss, per-class accuracy, confusion."""
    was_training = model.training
    model.eval()
    c = model.config
    K = c.num_classes
    cm = torch.zeros(K, K, dtype=torch.long)
    top5 = 0
    loss_sum = 0.0
    for images, labels in batches:
        x = eval_transform(images, c.image_size, crop_pct, c.mean, c.std)
        with torch.autocast(x.device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
            logits = model(x).float()
        loss_sum += float(nn.functional.cross_entropy(logits, labels, reduction="sum"))
        top5 += int(topk_correct(logits, labels, 5).sum())
        cm += confusion_matrix(logits.argmax(-1), labels, K).cpu()
    model.train(was_training)
    n = int(cm.sum())
    if n == 0:
        return {"n": 0, "top1": float("nan"), "top5": float("nan"), "loss": float("nan"), "per_class": [], "confusion": cm.tolist()}
    per_class = (cm.diag().double() / cm.sum(1).clamp(min=1).double()).tolist()
    return {
        "n": n,
        "top1": float(cm.diag().sum()) / n,
        "top5": top5 / n,
        "loss": loss_sum / n,
        "per_class": per_class,
        "confusion": cm.tolist(),
    }


@torch.no_grad()
def predict(model: nn.Module, images: torch.Tensor, *, k: int = 5, crop_pct: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k (probabilities, class indices) for uint8 images (B, C, H, W)."""
    model.eval()
    c = model.config
    probs = model(eval_transform(images, c.image_size, crop_pct, c.mean, c.std)).float().softmax(-1)
    return probs.topk(min(k, probs.shape[-1]), dim=-1)
