"""Synthetic data: a learnable toy dataset made from a seed, for tests and quick runs without any files."""

from __future__ import annotations

import torch

from vitkit.errors import DataError
from vitkit.limits import memory_available

from ..images import as_hw
from ..split import SPLITS, Split


def synthetic(
    num_classes: int, size: int, channels: int, image_size: int | tuple[int, int], seed: int = 0, split: str = "train"
) -> Split:
    """A learnable toy dataset of images of `image_size` (H, W), one side: square. Each class is a fixed random
    pattern (from `seed`) plus pixel noise (per split)."""
    h, w = as_hw(image_size)
    # float32 patterns, then per image its pattern, its noise and their sum: checked before any of it is allocated
    nbytes = 4 * (num_classes + 4 * size) * channels * h * w
    available = memory_available()
    if available is not None and nbytes > available:
        raise DataError(
            f"data.synthetic_classes={num_classes}: {num_classes:,} class patterns and {size:,} {split} images of "
            f"{channels}x{h}x{w} px need about {nbytes / 2**30:,.1f} GiB of memory and this process has {available / 2**30:,.1f} GiB "
            "available; choose fewer classes (data.synthetic_classes), images (data.synthetic_size) or pixels"
        )
    patterns = torch.rand(num_classes, channels, h, w, generator=torch.Generator().manual_seed(seed)).mul_(255)
    g = torch.Generator().manual_seed(seed + 1 + SPLITS.index(split))
    labels = torch.arange(size) % num_classes
    labels = labels[torch.randperm(size, generator=g)]
    noise = torch.randn(size, channels, h, w, generator=g) * 40
    images = (patterns[labels] + noise).clamp(0, 255).round().to(torch.uint8)
    return Split(
        labels=labels, class_names=[f"class_{i}" for i in range(num_classes)], images=images, source="synthetic"
    )
