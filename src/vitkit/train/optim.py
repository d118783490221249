"""The optimizer and its schedule (paper App. B), the training loss, and the EMA of the weights.

Adam(W) with betas 0.9/0.999 and decoupled weight decay (none on norms, biases, position embeddings
and class token) or SGD with momentum for fine-tuning; linear warmup then cosine or linear decay.
Layer-wise learning-rate decay (BEiT, MAE; timm's `--layer-decay`) scales each group's rate by its depth.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.devices import fused_optimizer
from vitkit.errors import ConfigError
from vitkit.models import VisionTransformer


def param_groups(model: nn.Module, weight_decay: float, layer_decay: float | None = None) -> list[dict]:
    """Weight decay on weight matrices only; none on norms, biases, position embeddings, class token, [mask] token.

    Without `layer_decay`: two groups (decay, no decay). With it, one pair per layer, each with its `lr_scale`:
    layer_decay ** (L + 1 - layer) for the layers of `layer_ids`, so the head trains at the full rate."""
    skip = model.no_weight_decay()
    layers = layer_ids(model) if layer_decay is not None else {}
    top = max(layers.values(), default=0)
    groups: dict[tuple[int, bool], dict] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        layer, decays = layers.get(id(p), top), not (p.ndim <= 1 or name in skip)
        scale = 1.0 if layer_decay is None else layer_decay ** (top - layer)
        group = groups.setdefault(
            (layer, decays), {"params": [], "weight_decay": weight_decay if decays else 0.0, "lr_scale": scale}
        )
        group["params"].append(p)
    if layer_decay is None:  # the two groups, decay first, even where one is empty
        for decays in (True, False):
            groups.setdefault((0, decays), {"params": [], "weight_decay": weight_decay * decays, "lr_scale": 1.0})
    return [groups[key] for key in sorted(groups, key=lambda k: (k[0], not k[1]))]


def layer_ids(model: nn.Module) -> dict[int, int]:
    """The layer of every parameter (by id) for layer-wise decay, by timm's rule for ViTs (`group_matcher`): 0 for
    the embeddings (patch embedding, a hybrid's ResNet stem, position embeddings, class token), i for block i
    (1-based), L for the final norm (grouped with the last block), L + 1 for the head and anything outside the ViT
    (a pre-logits layer, an objective's own parameters)."""
    vit = next((m for m in model.modules() if isinstance(m, VisionTransformer)), None)
    if vit is None:
        raise ConfigError(
            f"train.layer_decay: layer-wise decay needs a ViT's blocks, and {type(model).__name__} has none; "
            "unset train.layer_decay"
        )
    depth = len(vit.blocks)
    ids = {id(p): depth + 1 for p in model.parameters()}
    for name, p in vit.named_parameters():
        first = name.split(".")[0]
        if first == "blocks":
            ids[id(p)] = int(name.split(".")[1]) + 1
        elif first == "norm":
            ids[id(p)] = depth
        elif first not in ("head", "pre_logits"):
            ids[id(p)] = 0
    return ids


def make_optimizer(model: nn.Module, t) -> torch.optim.Optimizer:
    groups = param_groups(model, t.weight_decay, t.layer_decay)
    if t.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=t.lr, momentum=t.momentum)
    # "adam" and "adamw" are the same here: Adam with decoupled weight decay, as in the paper's code
    fused = fused_optimizer(next(model.parameters()).device)
    return torch.optim.AdamW(groups, lr=t.lr, betas=t.betas, fused=fused)


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The step's rate on every group, times the group's layer-wise scale."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)


def describe(t, depth: int | None) -> str:
    """The optimizer as the plan shows it: the weight decay's reach and the layer-wise scales."""
    decay = (
        f"weight decay {t.weight_decay:g} on weight matrices (none on norms, biases, position/class embeddings)"
        if t.weight_decay
        else "no weight decay"
    )
    if t.layer_decay is None or depth is None:
        return decay
    d = t.layer_decay
    return f"{decay}; layer decay {d:g}: head x1, block {depth} x{d:.3g}, block 1 x{d**depth:.3g}, embeddings x{d ** (depth + 1):.3g}"


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
    """Moves the averaged weights `ema` towards the model's parameters by 1 - decay; buffers are copied as they are.
    BatchNorm's running statistics already average recent batches under the live weights: averaged again, they lag
    behind weights that weight decay keeps shrinking, and the averaged model normalises with variances far off its
    own."""
    for name, value in model.named_parameters(remove_duplicate=False):  # a shared tensor under every name
        ema[name].lerp_(value, 1.0 - decay)
    for name, value in model.named_buffers(remove_duplicate=False):
        if name in ema:  # a non-persistent buffer is in no state dict
            ema[name].copy_(value)
