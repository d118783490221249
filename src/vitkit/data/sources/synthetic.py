"""Synthetic data: a learnable toy dataset made from a seed, for tests and quick runs without any files."""

from __future__ import annotations

import torch

from ..images import as_hw
from ..split import SPLITS, Split


def synthetic(
    num_classes: int, size: int, channels: int, image_size: int | tuple[int, int], seed: int = 0, split: str = "train"
) -> Split:
    """A learnable toy dataset of images of `image_size` (H, W), one side: square. Each class is a fixed random
    pattern (from `seed`) plus pixel noise (per split)."""
    h, w = as_hw(image_size)
    patterns = torch.rand(num_classes, channels, h, w, generator=torch.Generator().manual_seed(seed)) * 255
    g = torch.Generator().manual_seed(seed + 1 + SPLITS.index(split))
    labels = torch.arange(size) % num_classes
    labels = labels[torch.randperm(size, generator=g)]
    noise = torch.randn(size, channels, h, w, generator=g) * 40
    images = (patterns[labels] + noise).clamp(0, 255).round().to(torch.uint8)
    return Split(
        labels=labels, class_names=[f"class_{i}" for i in range(num_classes)], images=images, source="synthetic"
    )
