"""Batched augmentation on the training device, as used for ViTs.

Every function takes a batch (B, C, H, W) and a `torch.Generator` (on the CPU) that draws all
random choices, so an augmented batch is a pure function of (pixels, seed, step): this is what
makes an interrupted run resume exactly. Pixels are floats in [0, 1] until `normalize`.

train: random-resized (Inception) crop or padded random crop -> horizontal flip -> RandAugment
       (vitkit's, or a timm config string / TrivialAugment: `auto_augment`) -> normalise -> random
       erasing; then Mixup/CutMix on the batch with soft targets (label smoothing included).
eval:  resize + centre crop -> normalise.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from vitkit.errors import ConfigError, shown
from vitkit.limits import domain, limits

from .images import background_bytes, scaled_size


@dataclass(frozen=True)
class AugmentConfig:
    # "rrc" (random-resized crop), "pad" (padded random crop) or "none"
    crop: str = field(default="rrc", metadata=limits(choices=("rrc", "pad", "none")))
    rrc_scale: tuple[float, float] = field(default=(0.08, 1.0), metadata=limits("(0, 1]"))
    rrc_ratio: tuple[float, float] = field(default=(3 / 4, 4 / 3), metadata=limits("(0, inf)"))
    # for crop="pad"
    pad: int = 4
    hflip: float = field(default=0.5, metadata=limits("[0, 1]"))
    # RandAugment N (0: off)
    randaugment_ops: int = 0
    # RandAugment M, out of 10
    randaugment_magnitude: float = field(default=9.0, metadata=limits("[0, 10]"))
    # timm's RandAugment config string ("rand-m9-mstd0.5-inc1", "rand-m10-n2": timm's ops and magnitude law) or
    # "ta_wide" (TrivialAugment, torchvision's wide space); None: off. Not with randaugment_ops.
    auto_augment: str | None = None
    # Beta(alpha, alpha) for Mixup (0: off)
    mixup: float = 0.0
    # Beta(alpha, alpha) for CutMix (0: off)
    cutmix: float = 0.0
    # chance that a batch is mixed at all
    mix_prob: float = field(default=1.0, metadata=limits("[0, 1]"))
    label_smoothing: float = field(default=0.0, metadata=limits("[0, 1)"))
    # chance that an image gets a random rectangle replaced by noise (0: off)
    erase: float = field(default=0.0, metadata=limits("[0, 1]"))
    # the rectangle's area, as a fraction of the image
    erase_scale: tuple[float, float] = field(default=(0.02, 1 / 3), metadata=limits("(0, 1]"))
    # its aspect ratio h / w (log-uniform)
    erase_ratio: tuple[float, float] = field(default=(0.3, 1 / 0.3), metadata=limits("(0, inf)"))
    # eval: resize the shorter side to size / crop_pct, then centre crop
    eval_crop_pct: float = field(default=1.0, metadata=domain("crop_pct"))


def _uniform(n: int, low: float, high: float, g: torch.Generator) -> torch.Tensor:
    return low + (high - low) * torch.rand(n, generator=g)


def _log_uniform(n: int, low: float, high: float, g: torch.Generator) -> torch.Tensor:
    """Aspect ratios: uniform in log space, so r and 1/r are equally likely."""
    return _uniform(n, math.log(low), math.log(high), g).exp()


def _warp(x: torch.Tensor, theta: torch.Tensor, size: tuple[int, int], fill: float | None = 0.0) -> torch.Tensor:
    """Sample x through per-image affine maps theta (B, 2, 3) in normalised coordinates; what lies outside the image is
    `fill`, or with fill None the nearest edge pixel."""
    grid = F.affine_grid(
        theta.to(x.device, x.dtype, non_blocking=True), [x.shape[0], x.shape[1], *size], align_corners=False
    )
    if fill is None or fill == 0.0:
        padding = "zeros" if fill is not None else "border"
        return F.grid_sample(x, grid, mode="bilinear", padding_mode=padding, align_corners=False)
    return F.grid_sample(x - fill, grid, mode="bilinear", padding_mode="zeros", align_corners=False) + fill


def fill_of(background) -> tuple[float, ...]:
    """The fill in [0, 1] of the model config's `background` (None: white) exactly as decoding composites on it: its
    uint8 value / 255, so a padded border and a transparent pixel get the same colour."""
    return tuple(v / 255.0 for v in background_bytes(background))


def random_resized_crop(x: torch.Tensor, size: tuple[int, int], scale, ratio, g: torch.Generator) -> torch.Tensor:
    """Inception crop: a box of random area (scale) and aspect (ratio) resized to `size`. The box lies inside the
    image; an upsampled box's outermost samples, within half a pixel of the image's edge, take the edge pixel (as a
    crop, then a resize would), never a fill colour."""
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
    return _warp(x, theta, size, fill=None)


def padded_random_crop(x: torch.Tensor, pad: int, g: torch.Generator, fill=0.0) -> torch.Tensor:
    """Pad by `pad` with `fill` (one value, or one per channel: the model's background) and cut a random window of the
    original size (per image)."""
    B, C, H, W = x.shape
    fill = torch.as_tensor(fill, dtype=x.dtype).to(x.device, non_blocking=True).reshape(1, -1, 1, 1)
    padded = fill.expand(B, C, H + 2 * pad, W + 2 * pad).clone()
    padded[..., pad : pad + H, pad : pad + W] = x
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


def enhance(kind: str, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """PIL's ImageEnhance: x blended with a degenerate image by factor s (B,): 0 gives the degenerate image, 1 x."""
    if kind == "brightness":
        return _blend(x, torch.zeros_like(x), s)
    if kind == "contrast":
        return _blend(x, _gray(x).mean(dim=(1, 2, 3), keepdim=True).expand_as(x), s)
    if kind == "color":
        return _blend(x, _gray(x).expand_as(x), s)
    # sharpness: the degenerate image is PIL's SMOOTH filter of the interior, the border pixels kept
    k = torch.tensor([[1, 1, 1], [1, 5, 1], [1, 1, 1]], dtype=x.dtype, device=x.device) / 13
    blurred = x.clone()
    if min(x.shape[-2:]) >= 3:
        blurred[..., 1:-1, 1:-1] = F.conv2d(x, k.expand(x.shape[1], 1, 3, 3), groups=x.shape[1])
    return _blend(x, blurred, s)


def _photometric(kind: str, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    if kind in ("brightness", "contrast", "color", "sharpness"):
        return enhance(kind, x, 1.0 + 0.9 * m.to(x.device))  # enhancement factor in [0.1, 1.9]
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


# -- RandAugment config strings (timm's op set and magnitude law) and TrivialAugment ---------------
# "rand-m9-mstd0.5-inc1": parts m (magnitude, of 10), n (ops per image), mstd (std of a normal noise on the
# magnitude of every op drawn; over 100: uniform in [0, m]), mmax (the magnitude's upper clip, 10), inc (1: ops
# whose strength grows with the magnitude), p (the chance that a drawn op is applied). "ta_wide": TrivialAugment
# (Mueller & Hutter 2021) in torchvision's wide space: one op a image, its strength one of 31 bins.
LEVEL_DENOM = 10.0
RAND_OPS = (
    "AutoContrast",
    "Equalize",
    "Invert",
    "Rotate",
    "Posterize",
    "Solarize",
    "SolarizeAdd",
    "Color",
    "Contrast",
    "Brightness",
    "Sharpness",
    "ShearX",
    "ShearY",
    "TranslateXRel",
    "TranslateYRel",
)
RAND_INCREASING_OPS = tuple(
    f"{op}Increasing" if op in ("Posterize", "Solarize", "Color", "Contrast", "Brightness", "Sharpness") else op
    for op in RAND_OPS
)
TRIVIAL_OPS = (
    "Identity",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "Rotate",
    "Brightness",
    "Color",
    "Contrast",
    "Sharpness",
    "Posterize",
    "Solarize",
    "AutoContrast",
    "Equalize",
)
TRIVIAL_BINS = 31
_ENHANCE = ("Color", "Contrast", "Brightness", "Sharpness")
_RAND_FILL = 128 / 255  # timm's fill of the pixels a geometric op uncovers; TrivialAugment (torchvision) fills 0


@dataclass(frozen=True)
class Policy:
    """A RandAugment (num_ops ops a image, each applied with chance prob) or, with trivial, TrivialAugment."""

    ops: tuple[str, ...]
    num_ops: int = 2
    magnitude: float = LEVEL_DENOM
    mstd: float = 0.0
    mmax: float = LEVEL_DENOM
    prob: float = 0.5
    trivial: bool = False


_PARTS = {"m": float, "n": int, "mstd": float, "mmax": float, "inc": int, "p": float}


@functools.lru_cache(maxsize=16)
def parse_policy(text: str, key: str = "augment.auto_augment") -> Policy:
    """The policy a timm RandAugment string ("rand-m9-mstd0.5-inc1") or "ta_wide" names; a ConfigError naming `key`."""
    if text == "ta_wide":
        return Policy(TRIVIAL_OPS, num_ops=1, prob=1.0, trivial=True)
    head, *parts = text.split("-")
    if head != "rand":
        raise ConfigError(
            f"{key}: expected a RandAugment string such as rand-m9-mstd0.5-inc1 or ta_wide, got {shown(text)}"
        )
    values: dict = {}
    for part in parts:
        found = re.fullmatch(r"([a-z]+)(\d[\d.]*)", part)
        kind = _PARTS.get(found.group(1)) if found else None
        try:
            values[found.group(1)] = kind(found.group(2))
        except (AttributeError, TypeError, ValueError):
            raise ConfigError(
                f"{key}: {shown(part)} in {shown(text)} is not a part of a RandAugment string; the parts are "
                "m<magnitude>, n<ops>, mstd<std>, mmax<clip>, inc<0|1>, p<chance> (e.g. rand-m9-mstd0.5-inc1)"
            ) from None
    mstd = values.get("mstd", 0.0)
    policy = Policy(  # inc0 is off (timm takes any inc part, inc0 too, as on)
        RAND_INCREASING_OPS if values.get("inc") else RAND_OPS,
        num_ops=values.get("n", 2),
        magnitude=values.get("m", LEVEL_DENOM),
        mstd=math.inf if mstd > 100 else mstd,
        mmax=values.get("mmax") or LEVEL_DENOM,
        prob=values.get("p", 0.5),
    )
    if not 0.0 <= policy.prob <= 1.0:
        raise ConfigError(f"{key}: p{policy.prob:g} in {shown(text)}: the chance an op is applied is in [0, 1]")
    return policy


def check_policy(cfg: AugmentConfig) -> None:
    """augment.auto_augment names a policy, and vitkit's own RandAugment is not on beside it."""
    if cfg.auto_augment is None:
        return
    parse_policy(cfg.auto_augment)
    if cfg.randaugment_ops > 0:
        raise ConfigError(
            f"augment.auto_augment={cfg.auto_augment} and augment.randaugment_ops={cfg.randaugment_ops} are two "
            "RandAugments; keep one (set augment.randaugment_ops=0)"
        )


def draw_magnitudes(policy: Policy, count: int, g: torch.Generator) -> torch.Tensor:
    """(count,) float64 magnitudes: the policy's, with its noise, clipped to [0, mmax] (timm's AugmentOp)."""
    m = torch.full((count,), float(policy.magnitude), dtype=torch.float64)
    if policy.mstd == math.inf:
        m = torch.rand(count, generator=g, dtype=torch.float64) * policy.magnitude
    elif policy.mstd > 0:
        m = m + policy.mstd * torch.randn(count, generator=g, dtype=torch.float64)
    return m.clamp(0.0, policy.mmax)


def op_argument(op: str, magnitude: torch.Tensor, sign: torch.Tensor) -> torch.Tensor:
    """timm's level-to-argument law: what op applies at `magnitude` (of 10) with random `sign` (+-1), float64."""
    level = magnitude / LEVEL_DENOM
    if op == "Rotate":
        return level * 30.0 * sign  # degrees
    if op in ("ShearX", "ShearY"):
        return level * 0.3 * sign
    if op in ("TranslateXRel", "TranslateYRel"):
        return level * 0.45 * sign  # of the image's side
    if op in _ENHANCE:
        return level * 1.8 + 0.1  # enhancement factor
    if op.removesuffix("Increasing") in _ENHANCE:
        return (1.0 + level * 0.9 * sign).clamp(min=0.1)
    laws = {
        "Posterize": (level * 4).floor(),  # bits kept
        "PosterizeIncreasing": 4 - (level * 4).floor(),
        "Solarize": (level * 256).floor(),  # threshold (of 255)
        "SolarizeIncreasing": 256 - (level * 256).floor(),
        "SolarizeAdd": (level * 110).floor(),  # added below 128
    }
    return laws.get(op, torch.zeros_like(magnitude))


def trivial_argument(op: str, bins: torch.Tensor, sign: torch.Tensor) -> torch.Tensor:
    """TrivialAugment's wide space (torchvision's TrivialAugmentWide): the argument of bin 0..30, float64."""
    top = TRIVIAL_BINS - 1
    frac = bins.double() / top
    if op in ("ShearX", "ShearY"):
        return frac * 0.99 * sign
    if op in ("TranslateX", "TranslateY"):
        return frac * 32.0 * sign  # pixels
    if op == "Rotate":
        return frac * 135.0 * sign
    if op in _ENHANCE:
        return 1.0 + frac * 0.99 * sign
    if op == "Posterize":
        return 8 - (bins.double() / (top / 6)).round()
    if op == "Solarize":
        return 255.0 * (1 - frac)
    return torch.zeros_like(frac)


def _affine(x: torch.Tensor, kind: str, arg: torch.Tensor, fill: float) -> torch.Tensor:
    """PIL's geometric ops in normalised coordinates: rotation about the centre, shears about the top-left corner."""
    H, W = x.shape[-2:]
    a = arg.float()
    theta = torch.zeros(len(a), 2, 3)
    theta[:, 0, 0] = theta[:, 1, 1] = 1.0
    if kind == "Rotate":
        r = a * math.pi / 180
        theta[:, 0, 0], theta[:, 0, 1] = r.cos(), -r.sin() * H / W
        theta[:, 1, 0], theta[:, 1, 1] = r.sin() * W / H, r.cos()
    elif kind == "ShearX":  # input x = x + f y (pixels from the corner)
        theta[:, 0, 1] = theta[:, 0, 2] = a * H / W
    elif kind == "ShearY":
        theta[:, 1, 0] = theta[:, 1, 2] = a * W / H
    elif kind == "TranslateXRel":
        theta[:, 0, 2] = 2 * a
    elif kind == "TranslateYRel":
        theta[:, 1, 2] = 2 * a
    elif kind == "TranslateX":  # pixels
        theta[:, 0, 2] = 2 * a / W
    elif kind == "TranslateY":
        theta[:, 1, 2] = 2 * a / H
    return _warp(x, theta, (H, W), fill=fill)


def equalize(x: torch.Tensor) -> torch.Tensor:
    """PIL's ImageOps.equalize per image and channel, on 8-bit levels: lut[i] = (step // 2 + count below i) // step,
    step = (pixels - count of the highest level present) // 256; a channel of one level, or step 0, is kept."""
    B, C = x.shape[:2]
    v = (x * 255).round().clamp(0, 255).long().flatten(2)  # (B, C, HW)
    hist = torch.zeros(B, C, 256, dtype=torch.long, device=x.device).scatter_add_(2, v, torch.ones_like(v))
    top = 255 - (hist.flip(-1) > 0).long().argmax(-1, keepdim=True)  # the highest level present
    step = (hist.sum(-1, keepdim=True) - hist.gather(2, top)) // 256
    below = hist.cumsum(-1) - hist
    lut = ((step // 2 + below) // step.clamp(min=1)).clamp(max=255)
    keep = (step == 0) | ((hist > 0).sum(-1, keepdim=True) <= 1)
    out = torch.where(keep, v, lut.gather(2, v)).float() / 255
    return out.view_as(x).to(x.dtype)


def _levels(op: str, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """The ops defined on 8-bit levels (posterize, solarize, solarize-add), `a` (n,) on x's device."""
    v = (x * 255).round()
    a = a[:, None, None, None]
    if op.startswith("Posterize"):  # keep the top `a` bits
        step = 2.0 ** (8 - a.clamp(max=8))
        return torch.where(a >= 8, x, torch.floor(v / step) * step / 255)
    if op.startswith("SolarizeAdd"):
        return torch.where(v < 128, (x + a / 255).clamp(max=1.0), x)
    return torch.where(v >= a, 1.0 - x, x)  # solarize above the threshold


def _apply_op(op: str, x: torch.Tensor, arg: torch.Tensor, fill: float) -> torch.Tensor:
    """One named op on images x (n, C, H, W) in [0, 1] with their arguments `arg` (n,)."""
    base = op.removesuffix("Increasing")
    if base in ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY", "TranslateXRel", "TranslateYRel"):
        return _affine(x, base, arg, fill)
    if base in _ENHANCE:
        return enhance(base.lower(), x, arg.to(x.device, x.dtype))
    if base in ("Posterize", "Solarize", "SolarizeAdd"):
        return _levels(base, x, arg.to(x.device, x.dtype))
    if base == "Equalize":
        return equalize(x)
    if base == "AutoContrast":
        return _photometric("autocontrast", x, arg)
    return 1.0 - x if base == "Invert" else x


def apply_policy(x: torch.Tensor, policy: Policy, g: torch.Generator) -> torch.Tensor:
    """The policy on a batch in [0, 1]: each image draws its own ops, chances, magnitudes and signs from g (the
    same number of draws whatever is drawn, so a batch stays a function of the seed and step)."""
    B = x.shape[0]
    for _ in range(policy.num_ops):
        choice = torch.randint(0, len(policy.ops), (B,), generator=g)
        applied = torch.rand(B, generator=g) < policy.prob
        sign = torch.where(torch.rand(B, generator=g) < 0.5, -1.0, 1.0).double()
        if policy.trivial:
            strength = torch.randint(0, TRIVIAL_BINS, (B,), generator=g)
        else:
            strength = draw_magnitudes(policy, B, g)
        out = x.clone()
        for i, op in enumerate(policy.ops):
            pick = ((choice == i) & applied).nonzero().flatten()
            if len(pick) == 0 or op == "Identity":
                continue
            law = trivial_argument if policy.trivial else op_argument
            arg = law(op, strength[pick], sign[pick])
            on = pick.to(x.device)
            out[on] = _apply_op(op, x[on], arg, 0.0 if policy.trivial else _RAND_FILL)
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


def augment_pixels(
    images: torch.Tensor, size: tuple[int, int], cfg: AugmentConfig, g: torch.Generator, background=None
) -> torch.Tensor:
    """uint8 (B, C, H, W) on any device -> cropped, flipped, RandAugmented float (B, C, *size) in [0, 1]:
    the training pixels before normalisation (what `vitkit data --samples` shows). The padded crop fills its border
    with `background` (the model config's; None: white), the colour transparent pixels were composited on."""
    x, fill = images.float() / 255.0, fill_of(background)
    if cfg.crop == "rrc":
        x = random_resized_crop(x, size, cfg.rrc_scale, cfg.rrc_ratio, g)
    else:
        x = resize_center_crop(x, size, 1.0)
        if cfg.crop == "pad" and cfg.pad > 0:
            x = padded_random_crop(x, cfg.pad, g, fill)
    if cfg.hflip > 0:
        x = hflip(x, cfg.hflip, g)
    if cfg.randaugment_ops > 0:
        x = randaugment(x, cfg.randaugment_ops, cfg.randaugment_magnitude, g)
    if cfg.auto_augment:
        x = apply_policy(x, parse_policy(cfg.auto_augment), g)
    return x


def train_transform(
    images: torch.Tensor, size: tuple[int, int], cfg: AugmentConfig, mean, std, g: torch.Generator, background=None
) -> torch.Tensor:
    """uint8 (B, C, H, W) on any device -> augmented, normalised float (B, C, *size); the padded crop fills with
    `background`. Random erasing writes noise, not a colour."""
    x = normalize(augment_pixels(images, size, cfg, g, background), mean, std)
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
