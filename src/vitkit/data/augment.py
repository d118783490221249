"""Batched augmentation on the training device, as used for ViTs.

Every function takes a batch (B, C, H, W) and a `torch.Generator` (on the CPU) that draws all
random choices, so an augmented batch is a pure function of (pixels, seed, step): this is what
makes an interrupted run resume exactly. Pixels are floats in [0, 1] until `normalize`.

train: random-resized (Inception) crop or padded random crop -> horizontal flip -> RandAugment
       -> normalise -> random erasing; then Mixup/CutMix on the batch with soft targets (label
       smoothing included).
eval:  resize + centre crop -> normalise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .images import scaled_size


@dataclass(frozen=True)
class AugmentConfig:
    crop: str = "rrc"  # "rrc" (random-resized crop), "pad" (padded random crop) or "none"
    rrc_scale: tuple[float, float] = (0.08, 1.0)
    rrc_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    pad: int = 4  # for crop="pad"
    hflip: float = 0.5
    randaugment_ops: int = 0  # RandAugment N (0: off)
    randaugment_magnitude: float = 9.0  # RandAugment M, out of 10
    mixup: float = 0.0  # Beta(alpha, alpha) for Mixup (0: off)
    cutmix: float = 0.0  # Beta(alpha, alpha) for CutMix (0: off)
    mix_prob: float = 1.0  # chance that a batch is mixed at all
    label_smoothing: float = 0.0
    erase: float = 0.0  # chance that an image gets a random rectangle replaced by noise (0: off)
    erase_scale: tuple[float, float] = (0.02, 1 / 3)  # the rectangle's area, as a fraction of the image
    erase_ratio: tuple[float, float] = (0.3, 1 / 0.3)  # its aspect ratio h / w (log-uniform)
    eval_crop_pct: float = 1.0  # eval: resize the shorter side to size / crop_pct, then centre crop


def _uniform(n: int, low: float, high: float, g: torch.Generator) -> torch.Tensor:
    return low + (high - low) * torch.rand(n, generator=g)


def _log_uniform(n: int, low: float, high: float, g: torch.Generator) -> torch.Tensor:
    """Aspect ratios: uniform in log space, so r and 1/r are equally likely."""
    return _uniform(n, math.log(low), math.log(high), g).exp()


def _warp(x: torch.Tensor, theta: torch.Tensor, size: tuple[int, int], fill: float = 0.0) -> torch.Tensor:
    """Sample x through per-image affine maps theta (B, 2, 3) in normalised coordinates."""
    grid = F.affine_grid(
        theta.to(x.device, x.dtype, non_blocking=True), [x.shape[0], x.shape[1], *size], align_corners=False
    )
    if fill == 0.0:
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return F.grid_sample(x - fill, grid, mode="bilinear", padding_mode="zeros", align_corners=False) + fill


def random_resized_crop(x: torch.Tensor, size: tuple[int, int], scale, ratio, g: torch.Generator) -> torch.Tensor:
    """Inception crop: a box of random area (scale) and aspect (ratio) resized to `size`."""
    B, _, H, W = x.shape
    area = _uniform(B, *scale, g)
    aspect = _log_uniform(B, *ratio, g)
    # box width/height as fractions of the image; clamp keeps the box inside the image
    w = (area * aspect * H / W).sqrt().clamp(max=1.0)
    h = (area / aspect * W / H).sqrt().clamp(max=1.0)
    cx = (1 - w) * (2 * torch.rand(B, generator=g) - 1)  # box centre in [-1 + w, 1 - w]
    cy = (1 - h) * (2 * torch.rand(B, generator=g) - 1)
    theta = torch.zeros(B, 2, 3)
    theta[:, 0, 0], theta[:, 0, 2] = w, cx
    theta[:, 1, 1], theta[:, 1, 2] = h, cy
    return _warp(x, theta, size)


def padded_random_crop(x: torch.Tensor, pad: int, g: torch.Generator) -> torch.Tensor:
    """Zero-pad by `pad` and cut a random window of the original size (per image)."""
    B, C, H, W = x.shape
    padded = F.pad(x, (pad, pad, pad, pad))
    top = torch.randint(0, 2 * pad + 1, (B,), generator=g).to(x.device, non_blocking=True)
    left = torch.randint(0, 2 * pad + 1, (B,), generator=g).to(x.device, non_blocking=True)
    rows = (top[:, None] + torch.arange(H, device=x.device))[:, None, :, None].expand(B, C, H, W + 2 * pad)
    out = padded.gather(2, rows)  # (B, C, H, W + 2p)
    cols = (left[:, None] + torch.arange(W, device=x.device))[:, None, None, :].expand(B, C, H, W)
    return out.gather(3, cols)


def hflip(x: torch.Tensor, p: float, g: torch.Generator) -> torch.Tensor:
    flip = (torch.rand(x.shape[0], generator=g) < p).to(x.device, non_blocking=True)
    return torch.where(flip[:, None, None, None], x.flip(-1), x)


# -- RandAugment (Cubuk et al. 2020), batched: every image draws its own N ops -----------------
def _gray(x: torch.Tensor) -> torch.Tensor:
    if x.shape[1] == 1:
        return x
    return 0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3]


def _blend(a: torch.Tensor, b: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return (b + factor[:, None, None, None] * (a - b)).clamp(0, 1)


def _geometric(kind: str, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    theta = torch.zeros(x.shape[0], 2, 3)
    theta[:, 0, 0] = theta[:, 1, 1] = 1.0
    if kind == "rotate":
        a = m * math.radians(30)
        theta[:, 0, 0], theta[:, 0, 1], theta[:, 1, 0], theta[:, 1, 1] = a.cos(), -a.sin(), a.sin(), a.cos()
    elif kind == "shear_x":
        theta[:, 0, 1] = m * 0.3
    elif kind == "shear_y":
        theta[:, 1, 0] = m * 0.3
    elif kind == "translate_x":
        theta[:, 0, 2] = m * 0.45 * 2  # up to 45% of the image
    elif kind == "translate_y":
        theta[:, 1, 2] = m * 0.45 * 2
    return _warp(x, theta, tuple(x.shape[-2:]), fill=0.5)


def _photometric(kind: str, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    s = 1.0 + 0.9 * m.to(x.device)  # enhancement factor in [0.1, 1.9]
    if kind == "brightness":
        return _blend(x, torch.zeros_like(x), s)
    if kind == "contrast":
        return _blend(x, _gray(x).mean(dim=(1, 2, 3), keepdim=True).expand_as(x), s)
    if kind == "color":
        return _blend(x, _gray(x).expand_as(x), s)
    if kind == "sharpness":
        k = torch.tensor([[1, 1, 1], [1, 5, 1], [1, 1, 1]], dtype=x.dtype, device=x.device) / 13
        blurred = F.conv2d(F.pad(x, (1, 1, 1, 1), mode="replicate"), k.expand(x.shape[1], 1, 3, 3), groups=x.shape[1])
        return _blend(x, blurred, s)
    if kind == "solarize":
        threshold = (1.0 - m.abs().to(x.device))[:, None, None, None]
        return torch.where(x >= threshold, 1.0 - x, x)
    if kind == "posterize":
        bits = (8 - (m.abs() * 4).round()).to(x.device)[:, None, None, None]
        step = 2.0 ** (8 - bits)
        return torch.floor(x * 255 / step) * step / 255
    if kind == "autocontrast":
        low = x.amin(dim=(2, 3), keepdim=True)
        high = x.amax(dim=(2, 3), keepdim=True)
        return torch.where(high > low, (x - low) / (high - low).clamp(min=1e-6), x)
    if kind == "invert":
        return 1.0 - x
    return x


RANDAUGMENT_OPS = (
    "identity",
    "autocontrast",
    "invert",
    "brightness",
    "contrast",
    "color",
    "sharpness",
    "solarize",
    "posterize",
    "rotate",
    "shear_x",
    "shear_y",
    "translate_x",
    "translate_y",
)
_GEOMETRIC = ("rotate", "shear_x", "shear_y", "translate_x", "translate_y")


def randaugment(x: torch.Tensor, num_ops: int, magnitude: float, g: torch.Generator) -> torch.Tensor:
    """RandAugment: each image applies `num_ops` ops drawn uniformly, at strength magnitude/10 with a random sign."""
    B = x.shape[0]
    for _ in range(num_ops):
        choice = torch.randint(0, len(RANDAUGMENT_OPS), (B,), generator=g)
        sign = torch.where(torch.rand(B, generator=g) < 0.5, -1.0, 1.0)
        strength = sign * magnitude / 10.0
        out = x.clone()
        for i, kind in enumerate(RANDAUGMENT_OPS):
            pick = (choice == i).nonzero().flatten()
            if kind == "identity" or len(pick) == 0:
                continue
            op = _geometric if kind in _GEOMETRIC else _photometric
            out[pick.to(x.device)] = op(kind, x[pick.to(x.device)], strength[pick])
        x = out
    return x


def random_erase(x: torch.Tensor, p: float, scale, ratio, g: torch.Generator) -> torch.Tensor:
    """Random erasing (Zhong et al. 2020) on a normalised batch: with chance p per image, one
    rectangle of random area (scale) and aspect (ratio, log-uniform) gets standard-normal noise."""
    B, C, H, W = x.shape
    area = _uniform(B, *scale, g) * (H * W)
    aspect = _log_uniform(B, *ratio, g)
    h = (area * aspect).sqrt().round().clamp(1, H)
    w = (area / aspect).sqrt().round().clamp(1, W)
    top = (torch.rand(B, generator=g) * (H - h + 1)).floor()
    left = (torch.rand(B, generator=g) * (W - w + 1)).floor()
    on = torch.rand(B, generator=g) < p
    # the noise is drawn where the batch lives (a full batch of normals is too much to draw on the host
    # for a GPU), from a generator seeded by g, so it stays a function of (seed, step)
    device_g = torch.Generator(x.device).manual_seed(int(torch.randint(0, 2**62, (1,), generator=g)))
    noise = torch.randn(x.shape, generator=device_g, device=x.device, dtype=x.dtype)
    rows, cols = torch.arange(H), torch.arange(W)
    inside_rows = (rows[None] >= top[:, None]) & (rows[None] < (top + h)[:, None])  # (B, H)
    inside_cols = (cols[None] >= left[:, None]) & (cols[None] < (left + w)[:, None])  # (B, W)
    mask = (inside_rows[:, :, None] & inside_cols[:, None, :] & on[:, None, None])[:, None].to(
        x.device, non_blocking=True
    )
    return torch.where(mask, noise, x)


# -- whole pipelines ---------------------------------------------------------------------------
def normalize(x: torch.Tensor, mean, std) -> torch.Tensor:
    mean = torch.as_tensor(mean, dtype=x.dtype, device=x.device)[None, :, None, None]
    std = torch.as_tensor(std, dtype=x.dtype, device=x.device)[None, :, None, None]
    return (x - mean) / std


def augment_pixels(images: torch.Tensor, size: tuple[int, int], cfg: AugmentConfig, g: torch.Generator) -> torch.Tensor:
    """uint8 (B, C, H, W) on any device -> cropped, flipped, RandAugmented float (B, C, *size) in [0, 1]:
    the training pixels before normalisation (what `vitkit data --samples` shows)."""
    x = images.float() / 255.0
    if cfg.crop == "rrc":
        x = random_resized_crop(x, size, cfg.rrc_scale, cfg.rrc_ratio, g)
    else:
        x = resize_center_crop(x, size, 1.0)
        if cfg.crop == "pad" and cfg.pad > 0:
            x = padded_random_crop(x, cfg.pad, g)
    if cfg.hflip > 0:
        x = hflip(x, cfg.hflip, g)
    if cfg.randaugment_ops > 0:
        x = randaugment(x, cfg.randaugment_ops, cfg.randaugment_magnitude, g)
    return x


def train_transform(
    images: torch.Tensor, size: tuple[int, int], cfg: AugmentConfig, mean, std, g: torch.Generator
) -> torch.Tensor:
    """uint8 (B, C, H, W) on any device -> augmented, normalised float (B, C, *size)."""
    x = normalize(augment_pixels(images, size, cfg, g), mean, std)
    if cfg.erase > 0:
        x = random_erase(x, cfg.erase, cfg.erase_scale, cfg.erase_ratio, g)
    return x


def resize_center_crop(x: torch.Tensor, size: tuple[int, int], crop_pct: float) -> torch.Tensor:
    """Resize to cover size / crop_pct, keeping the aspect ratio (antialiased; sides as `images.scaled_size` makes them;
    the shorter side to size / crop_pct for a square size), then cut the central window. Images already at `size` are taken as cropped (loaded into memory by `load_image`)."""
    H, W = x.shape[-2:]
    if (H, W) != tuple(size):
        new = scaled_size(W, H, size, crop_pct)[::-1]
        if new != (H, W):
            x = F.interpolate(x, size=new, mode="bilinear", antialias=True, align_corners=False)
    H, W = x.shape[-2:]
    top, left = (H - size[0]) // 2, (W - size[1]) // 2
    return x[..., top : top + size[0], left : left + size[1]]


def eval_transform(images: torch.Tensor, size: tuple[int, int], crop_pct: float, mean, std) -> torch.Tensor:
    """uint8 (B, C, H, W) -> resized, centre-cropped, normalised float (B, C, *size)."""
    return normalize(resize_center_crop(images.float() / 255.0, size, crop_pct), mean, std)


def soft_targets(labels: torch.Tensor, num_classes: int, smoothing: float) -> torch.Tensor:
    """One-hot targets with label smoothing: 1 - s + s/K on the label, s/K elsewhere."""
    off = smoothing / num_classes
    return F.one_hot(labels, num_classes).float() * (1.0 - smoothing) + off


def mix(
    x: torch.Tensor, targets: torch.Tensor, cfg: AugmentConfig, g: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mixup or CutMix (one per batch, chosen evenly when both are on) with the batch flipped as partner."""
    use = [a for a in (("mixup", cfg.mixup), ("cutmix", cfg.cutmix)) if a[1] > 0]
    if not use or torch.rand(1, generator=g).item() >= cfg.mix_prob:
        return x, targets
    kind, alpha = use[int(torch.randint(0, len(use), (1,), generator=g))]
    lam = float(np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=g))).beta(alpha, alpha))
    if kind == "cutmix":
        H, W = x.shape[-2:]
        cut_h, cut_w = int(H * math.sqrt(1 - lam)), int(W * math.sqrt(1 - lam))
        cy, cx = int(torch.randint(0, H, (1,), generator=g)), int(torch.randint(0, W, (1,), generator=g))
        top, bottom = max(cy - cut_h // 2, 0), min(cy + cut_h // 2, H)
        left, right = max(cx - cut_w // 2, 0), min(cx + cut_w // 2, W)
        x = x.clone()
        x[..., top:bottom, left:right] = x.flip(0)[..., top:bottom, left:right]
        lam = 1.0 - (bottom - top) * (right - left) / (H * W)  # the area actually pasted
    else:
        x = lam * x + (1 - lam) * x.flip(0)
    return x, lam * targets + (1 - lam) * targets.flip(0)
