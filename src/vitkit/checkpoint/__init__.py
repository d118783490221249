"""Checkpoints: vitkit's own format (config.json + model.safetensors) and conversions of other formats.

`load_pretrained(path)` returns a ready model from any format vitkit reads; `save_pretrained(model, dir)`
writes vitkit's own.
"""

from __future__ import annotations

import os
from pathlib import Path

from vitkit.errors import CheckpointError
from vitkit.models import VisionTransformer

from .native import is_native, load_native, save_pretrained


def load_pretrained(
    path: str | os.PathLike,
    *,
    image_size: int | tuple[int, int] | None = None,
    num_classes: int | None = None,
    format: str | None = None,
) -> VisionTransformer:
    """Load a checkpoint; resample position embeddings for `image_size`, put a new zero head for `num_classes`."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such file or directory")
    if format not in (None, "vitkit") or not is_native(path):
        raise CheckpointError(f"{path}: not a vitkit checkpoint directory (config.json + model.safetensors)")
    model, _ = load_native(path)
    if image_size is not None:
        model.set_image_size(image_size)
    if num_classes is not None and num_classes != model.config.num_classes:
        model.reset_head(num_classes)
    return model


__all__ = ["load_pretrained", "save_pretrained"]
