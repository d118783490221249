"""The frozen feature of a backbone, pooled as its family evaluates it (`feature_pool` in the model config, or asked
for by name): what linear-probe, k-NN and few-shot read.

    head       what the head reads, model(x, pre_logits=True): the class token (ViT, CLIP's pooled output), the mean
               of the patch tokens, attention pooling (SigLIP's pooled output); DeiT: the mean of its two tokens
    cls        the class token z_L^0 after the final LayerNorm
    mean       the mean of the patch tokens after it (registers and other prefix tokens left out)
    cls_mean   [cls; mean], (B, 2D): DINOv2's linear protocol (Oquab et al. 2024, its linear evaluation)
"""

from __future__ import annotations

import torch
from torch import nn

from vitkit.errors import ConfigError

from .config import FEATURE_POOLS


def pool_tokens(tokens: torch.Tensor, pool: str, num_prefix_tokens: int) -> torch.Tensor:
    """(B, prefix + N, D) tokens after the final LayerNorm -> the `pool` feature, (B, D) or (B, 2D) for cls_mean."""
    cls, mean = tokens[:, 0], tokens[:, num_prefix_tokens:].mean(dim=1)
    return {"cls": cls, "mean": mean, "cls_mean": torch.cat([cls, mean], dim=-1)}[pool]


class PooledFeatures(nn.Module):
    """`model` whose forward(x, pre_logits=True) gives the `pool` feature (every other use of a model for its features,
    a precision runner or a compiled graph, takes it as the model); `config` is the model's."""

    def __init__(self, model: nn.Module, pool: str):
        super().__init__()
        self.model, self.pool = model, pool

    @property
    def config(self):
        return self.model.config

    def forward(self, x: torch.Tensor, pre_logits: bool = True) -> torch.Tensor:
        if not pre_logits:
            return self.model(x)
        return pool_tokens(self.model.forward_features(x), self.pool, self.config.num_prefix_tokens)


def with_feature_pool(model: nn.Module, pool: str | None = None) -> nn.Module:
    """`model` giving the `pool` feature (None: its config's feature_pool): itself for "head", else PooledFeatures. A
    pool the model has no token for is one ConfigError."""
    c = model.config
    pool = pool or getattr(c, "feature_pool", "head")
    if pool not in FEATURE_POOLS:
        raise ConfigError(f"--pool: expected one of {', '.join(FEATURE_POOLS)}, got {pool!r}")
    if pool == "head":
        return model
    if not hasattr(model, "forward_features") or not hasattr(c, "num_prefix_tokens"):
        raise ConfigError(f"--pool {pool}: a ViT's tokens; this model (a ResNet) pools its feature map: use head")
    if pool in ("cls", "cls_mean") and c.classifier != "token":
        raise ConfigError(f"--pool {pool}: reads the class token, and this model (classifier={c.classifier}) has none")
    return PooledFeatures(model, pool)
