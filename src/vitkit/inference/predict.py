"""What a model answers for uint8 images (top-k classes; for a multi-label model every class over a threshold), and
the normalised images int8 observers calibrate on."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from vitkit.data import Split, eval_batches
from vitkit.data.augment import eval_transform
from vitkit.errors import ConfigError


def calibration_images(
    split: Split, model: nn.Module, *, n: int, crop_pct: float = 1.0, batch_size: int = 256, seed: int = 0
) -> list[torch.Tensor]:
    """`n` images of `split` drawn with `seed`, normalised as the model reads them: what int8 observers calibrate on."""
    if n <= 0:  # observers that saw nothing quantize every activation to one value
        raise ConfigError(f"calibration: int8 needs a positive number of calibration images (--calibration N), got {n}")
    c = model.config
    pick = torch.randperm(len(split), generator=torch.Generator().manual_seed(seed))[:n].sort().values
    batches = eval_batches(
        split.subset(pick.numpy()),
        batch_size,
        torch.device("cpu"),
        channels=c.in_chans,
        size=c.image_size,
        crop_pct=crop_pct,
        background=c.background,
    )
    return CalibrationImages(
        [eval_transform(images, c.image_size, crop_pct, c.mean, c.std) for images, _ in batches], split.source
    )


class CalibrationImages(list):
    """Normalised image batches, and `where` they were drawn from (said wherever a figure reports int8)."""

    def __init__(self, batches: list[torch.Tensor], where: str):
        super().__init__(batches)
        self.where = where


@torch.no_grad()
def predict(
    model: nn.Module,
    images: torch.Tensor,
    *,
    k: int = 5,
    crop_pct: float = 1.0,
    runner: Callable[[torch.Tensor], torch.Tensor] | None = None,
    keep_size: bool = False,
    multi_label: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k (probabilities, class indices) for uint8 images (B, C, H, W); `runner` as in `evaluate`. keep_size: run
    the images at their own size (a `dynamic_img_size` model), not resized to the model's. A multi-label model's
    probabilities are each class's sigmoid (they need not sum to 1), else the softmax over classes."""
    model.eval()
    c = model.config
    size = tuple(images.shape[-2:]) if keep_size else c.image_size
    logits = (runner or model)(eval_transform(images, size, crop_pct, c.mean, c.std)).float()
    probs = logits.sigmoid() if multi_label else logits.softmax(-1)
    return probs.topk(min(k, probs.shape[-1]), dim=-1)
