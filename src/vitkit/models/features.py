"""A model as a feature extractor, as timm's `create_model(..., features_only=True, out_indices=...)` returns one:
`forward(x)` gives a list of (B, C, h, w) maps, one per level asked for, and `feature_info` says their channels,
reduction (input pixels per cell) and module.

    ViT, hybrid   a level per block; out_indices by default the last 3 (timm's default for its ViTs)
    BiT ResNet    level 0 the stem, level s stage s; out_indices by default all of them

out_indices as `forward_intermediates` reads them: n the last n levels, a tuple those (-1 the last).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .vit import VisionTransformer

VIT_DEFAULT_LEVELS = 3


class FeatureInfo:
    """timm's FeatureInfo: a level's `num_chs`, `reduction` and `module`, for the levels a feature extractor returns
    (`idx` None) or for the model's level numbers `idx` (an int or a list)."""

    def __init__(self, levels: list[dict], out_indices: Sequence[int]):
        self.info = [{**level, "index": i} for i, level in enumerate(levels)]
        self.out_indices = tuple(out_indices)

    def get(self, key: str, idx: int | Sequence[int] | None = None):
        if idx is None:
            return [self.info[i][key] for i in self.out_indices]
        if isinstance(idx, (list, tuple)):
            return [self.info[i][key] for i in idx]
        return self.info[idx][key]

    def get_dicts(self, keys: Sequence[str] | None = None, idx: int | Sequence[int] | None = None):
        picked = self.out_indices if idx is None else idx
        pick = lambda i: self.info[i] if keys is None else {k: self.info[i][k] for k in keys}
        return pick(picked) if isinstance(picked, int) else [pick(i) for i in picked]

    def channels(self, idx: int | Sequence[int] | None = None):
        return self.get("num_chs", idx)

    def reduction(self, idx: int | Sequence[int] | None = None):
        return self.get("reduction", idx)

    def module_name(self, idx: int | Sequence[int] | None = None):
        return self.get("module", idx)

    def __getitem__(self, item):
        return self.info[item]

    def __len__(self) -> int:
        return len(self.info)


class FeatureNet(nn.Module):
    """`model` cut after the last level asked for, its head removed: forward(x) -> [(B, C, h, w) per level]."""

    def __init__(self, model: nn.Module, out_indices: int | Sequence[int] | None = None, *, norm: bool = False):
        super().__init__()
        if out_indices is None and isinstance(model, VisionTransformer):
            out_indices = min(VIT_DEFAULT_LEVELS, model.levels)
        take = model.prune_intermediate_layers(out_indices, prune_norm=not norm)
        self.model = model
        self.out_indices = tuple(take)
        self.norm = norm  # the model's final norm on each level (ViT) or the last stage (BiT), as timm's norm=True
        self.feature_info = FeatureInfo(model.feature_info, take)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return self.model.forward_intermediates(x, list(self.out_indices), norm=self.norm, intermediates_only=True)
