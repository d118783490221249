"""What a model answers for uint8 images (top-k classes; for a multi-label model every class over a threshold), and
the normalised images int8 observers calibrate on."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable

import torch
from torch import nn

from vitkit.data import Split, eval_batches
from vitkit.data.augment import eval_transform
from vitkit.errors import CheckpointError, ConfigError


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
    finite_outputs(logits, getattr(runner, "description", "fp32"))
    probs = logits.sigmoid() if multi_label else logits.softmax(-1)
    return probs.topk(min(k, probs.shape[-1]), dim=-1)


def finite_outputs(logits: torch.Tensor, how: str) -> torch.Tensor:
    """`logits` where every one is a number; else a CheckpointError, as no probability or score can be read from NaN
    or infinity. `how`: the precision they were computed at."""
    bad = int((~torch.isfinite(logits)).flatten(1).any(-1).sum())
    if bad:
        raise CheckpointError(
            f"the model's outputs are NaN or infinite for {bad} of {len(logits)} image{'s' * (len(logits) != 1)} "
            f"({how}), so they are no probabilities: its weights overflow"
            + (
                " or are damaged; check the checkpoint (vitkit info), or use another"
                if how.startswith("fp32")
                else " at this precision; run at --precision fp32"
            )
        )
    return logits


class FiniteOutputs:
    """A runner (vitkit.inference.precision.Runner) whose every output passes `finite_outputs`; its other attributes
    (description, ...) are the runner's."""

    def __init__(self, runner):
        self.runner = runner

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return finite_outputs(self.runner(x), self.runner.description)

    def __getattr__(self, name: str):
        return getattr(self.runner, name)


def answers_csv(answers: list[tuple[str, list[tuple[str, float]]]], k: int, multi_label: bool) -> str:
    """Each image's answer as CSV: image,label,prob and the next classes (label_2,prob_2 ... to k); a multi-label
    model's image,labels,probs, each joined by ';'. Read back as a list (`image` and `label`/`labels` columns), it is
    data vitkit trains on."""
    out = io.StringIO()
    rows = csv.writer(out, lineterminator="\n")
    if multi_label:
        rows.writerow(["image", "labels", "probs"])
        rows.writerows(
            [image, ";".join(n for n, _ in top), ";".join(f"{p:.6f}" for _, p in top)] for image, top in answers
        )
        return out.getvalue()
    rows.writerow(["image", "label", "prob", *(f"{c}_{i}" for i in range(2, k + 1) for c in ("label", "prob"))])
    rows.writerows([image, *(v for n, p in top for v in (n, f"{p:.6f}"))] for image, top in answers)
    return out.getvalue()
