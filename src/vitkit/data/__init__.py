"""Data: sources (IDX, image folders, CSV/JSONL lists, tar shards, Parquet, synthetic), image-mode conversion, batched
device-side augmentation and reproducibly ordered batches."""

from __future__ import annotations

import os

from .augment import AugmentConfig, augment_pixels, eval_transform, mix, soft_targets, train_transform
from .loader import Batches, epoch_order, eval_batches, fits_in_memory, load_into_memory
from .sources import available_splits, open_split
from .sources.synthetic import synthetic
from .spec import DataSpec
from .split import ON_ERROR, SPLITS, BadFiles, MissingSplit, Split, check_compatible


def open_dataset(
    name: str,
    path: str | os.PathLike | None,
    split: str,
    *,
    channels: int,
    image_size: int,
    val_fraction: float = 0.1,
    seed: int = 0,
    synthetic_size: int = 512,
    synthetic_classes: int = 10,
) -> Split:
    """One split of the dataset a run config names: "synthetic", or whatever `path` holds (None: Fashion-MNIST)."""
    spec = DataSpec(
        path=path,
        name=name,
        val_fraction=val_fraction,
        split_seed=seed,
        synthetic_size=synthetic_size,
        synthetic_classes=synthetic_classes,
    )
    return spec.open(split, channels=channels, image_size=image_size)


__all__ = [
    "ON_ERROR",
    "SPLITS",
    "BadFiles",
    "DataSpec",
    "MissingSplit",
    "AugmentConfig",
    "augment_pixels",
    "Batches",
    "Split",
    "available_splits",
    "check_compatible",
    "epoch_order",
    "eval_batches",
    "eval_transform",
    "fits_in_memory",
    "load_into_memory",
    "mix",
    "open_dataset",
    "open_split",
    "soft_targets",
    "synthetic",
    "train_transform",
]
