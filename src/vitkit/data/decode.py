"""The Inception crop of a training image, drawn on the whole image and decoded no larger than it needs.

The paper's recipe (App. B) trains on Inception crops: a box of random area (`scale`, 8%-100% of the
image) and aspect ratio (`ratio`, 3/4-4/3, log-uniform), resized to the model's input. As in the
official input pipeline, the box is drawn on the whole image at its decoded resolution, never on a
resized or centre-cropped copy, so every part of a non-square photo can be seen.

A JPEG is decoded with the decoder's DCT scaling (1/2, 1/4 or 1/8, Pillow's `draft`) at the smallest
size that still gives the box at least the output's pixels each way: the final resize only shrinks
(or keeps) it, as it would from the full decode, and small crops are never upsampled from a reduced
copy. Where libjpeg decodes (vitkit.kernels.jpeg_region), only the box's rows and columns are decoded,
with the same pixels as the whole image's. Every random number is a function of (seed, batch number, place in the batch), so an image's
crop is the same in any process, DataLoader worker or resumed run.
"""

from __future__ import annotations

import math
import random

import numpy as np
import torch
import torch.nn.functional as F

from .images import load_pixels

ATTEMPTS = 10  # boxes tried before falling back to the central crop (as torchvision's RandomResizedCrop)


def crop_draws(seed: int, batch: int, slot: int) -> np.ndarray:
    """The uniform [0, 1) numbers of one image's crop: ATTEMPTS rows of (area, aspect, x, y).

    Python's Mersenne Twister seeded by one integer that packs (seed, batch, slot) without overlap
    (slot < 2**24, batch < 2**40): far cheaper to set up per image than a NumPy generator."""
    g = random.Random((seed << 64) | (batch << 24) | slot)
    return np.array([g.random() for _ in range(4 * ATTEMPTS)]).reshape(ATTEMPTS, 4)


def inception_box(width: int, height: int, draws: np.ndarray, scale, ratio) -> tuple[float, float, float, float]:
    """(left, top, right, bottom) in pixels of a width x height image: the first attempt that fits,
    else the largest central box whose aspect ratio lies in `ratio`."""
    log_low, log_high = math.log(ratio[0]), math.log(ratio[1])
    for area, aspect, x, y in draws:
        target = width * height * (scale[0] + (scale[1] - scale[0]) * area)
        aspect = math.exp(log_low + (log_high - log_low) * aspect)
        w, h = math.sqrt(target * aspect), math.sqrt(target / aspect)
        if w <= width and h <= height:
            left, top = x * (width - w), y * (height - h)
            return left, top, left + w, top + h
    w, h = float(width), float(height)
    if width / height < ratio[0]:
        h = width / ratio[0]
    elif width / height > ratio[1]:
        w = height * ratio[1]
    left, top = (width - w) / 2, (height - h) / 2
    return left, top, left + w, top + h


def inception_crop(
    source,
    channels: int,
    size: tuple[int, int],
    draws: np.ndarray,
    scale,
    ratio,
    *,
    name: str | None = None,
    background=None,
) -> np.ndarray:
    """(C, *size) uint8, a new array: the Inception crop of one encoded image (a path, or bytes named `name`; its
    transparent pixels on `background`, the model config's)."""
    out_h, out_w = size
    fraction: list[float] = []

    def needed(width: int, height: int) -> tuple[int, int]:
        """The smallest decoded (width, height) that holds the box with out_w x out_h pixels."""
        left, top, right, bottom = inception_box(width, height, draws, scale, ratio)
        fraction[:] = [left / width, top / height, right / width, bottom / height]
        return math.ceil(out_w * width / (right - left)), math.ceil(out_h * height / (bottom - top))

    def box(width: int, height: int) -> tuple[int, int, int, int]:
        """The box in whole pixels of the decoded (maybe DCT-scaled) width x height image."""
        left, right = _pixel_span(fraction[0], fraction[2], width)
        top, bottom = _pixel_span(fraction[1], fraction[3], height)
        return left, top, right, bottom

    # (h, w, C): the box alone
    pixels = torch.from_numpy(load_pixels(source, channels, name=name, draft=needed, crop=box, background=background))
    # (1, C, h, w) with channels-last strides in every dimension: a (C, h, w) view with [None] put in front gets a batch
    # stride of 1-3, and torch then takes its slower planar uint8 resize path
    region = pixels[None].permute(0, 3, 1, 2)
    # antialiased bilinear on channels-last uint8: torch's vectorised path, quicker than Pillow's box resize
    out = F.interpolate(region, size=(out_h, out_w), mode="bilinear", antialias=True, align_corners=False)
    return out[0].numpy()  # (C, H, W) over channels-last memory: the batch's torch.stack does the one layout copy


def _pixel_span(start: float, stop: float, length: int) -> tuple[int, int]:
    """Whole pixels [a, b) covering the fractional span [start, stop) of `length` pixels, at least one."""
    a = min(int(round(start * length)), length - 1)
    return a, max(a + 1, min(int(round(stop * length)), length))
