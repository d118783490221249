"""A short look at a dataset before training: the images' typical size and whether they are in colour.

`scan(split)` reads the headers of a few files spread over the split (PIL opens a file lazily, so only
colour images are decoded, and only to tell true colour from gray stored as RGB); in-memory splits
(IDX, synthetic) are read from their tensor. `blank_on` / `blank_among` look at a few partly transparent files for
images that are one flat colour on a model's background (what they show is that colour).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from .images import ORIENTATION, Record, to_8bit, to_channels
from .split import Split


@dataclass(frozen=True)
class ImageScan:
    scanned: int  # images looked at
    total: int  # images in the split
    height: int  # median height, pixels
    width: int  # median width
    channels: int  # 3 if any scanned image has colour, else 1
    unreadable: int = 0  # images looked at that could not be read (training skips them under data.on_error=skip)
    # median brightness in [0, 1] of the images' outermost pixels, transparent ones on white (None: not looked at)
    border: float | None = None
    # images looked at that are partly transparent, and the median brightness in [0, 1] of what they show (their
    # opaque pixels, weighted by opacity; None: none looked at): a background that bright would hide them
    clear: int = 0
    ink: float | None = None

    def __str__(self) -> str:
        kind = "colour" if self.channels == 3 else "grayscale"
        bad = f" ({self.unreadable} unreadable)" if self.unreadable else ""
        if not self.scanned:  # nothing to take a size from: the fit falls back to its defaults
            return f"none of the {self.unreadable} of {self.total} images looked at could be read: size and colour not known"
        return f"scanned {self.scanned} of {self.total} images{bad}: median {self.width}x{self.height} px, {kind}"


def scan(split: Split, limit: int = 64) -> ImageScan:
    """Median size and colour of up to `limit` images spread evenly over `split`."""
    pick = np.unique(np.linspace(0, len(split) - 1, min(limit, len(split))).round().astype(int))
    if split.images is not None:
        _, c, h, w = split.images.shape
        border = float(np.median([_border(split.images[i].numpy()) for i in pick])) / 255 if len(pick) else None
        return ImageScan(len(split), len(split), h, w, 1 if c == 1 else 3, border=border)
    sizes, colour, borders, inks = [], False, [], []
    for i in pick:
        item = split.paths[i]
        try:
            with Image.open(io.BytesIO(item.read()) if isinstance(item, Record) else item) as image:
                turned = image.getexif().get(ORIENTATION, 1) in (5, 6, 7, 8)  # shown upright, as training reads it
                sizes.append(image.size[::-1] if turned else image.size)
                colour = colour or _has_colour(image)
                borders += _edge_of(image)
                inks += _ink_of(image)
        # unreadable files (damaged, a decompression bomb) are the training run's business (data.on_error)
        except Exception:
            continue
    if not sizes:
        return ImageScan(0, len(split), 0, 0, 3, unreadable=len(pick))
    w, h = np.median(np.array(sizes), axis=0)
    border = float(np.median(borders)) / 255 if borders else None
    ink = float(np.median(inks)) if inks else None
    return ImageScan(
        len(sizes), len(split), int(h), int(w), 3 if colour else 1, len(pick) - len(sizes), border, len(inks), ink
    )


def _edge_of(image: Image.Image) -> list[float]:
    """[the border brightness of `image` as gray on white], or [] where it cannot be told (the size is known)."""
    try:
        small = image.reduce(max(1, min(image.size) // 64)) if image.mode in ("L", "LA", "RGB", "RGBA") else image
        return [_border(np.asarray(to_channels(small, 1))[None])]
    except Exception:
        return []


def _ink_of(image: Image.Image) -> list[float]:
    """[the opacity-weighted brightness in [0, 1] of what a partly transparent `image` shows], or [] for an opaque
    image (under a twentieth of its pixels under half opacity), a wholly transparent one, or one that cannot be told."""
    try:
        image = to_8bit(image)  # a palette or a colour marked transparent (tRNS) as alpha, as training reads it
        if image.mode not in ("LA", "RGBA"):
            return []
        image = image.convert("RGBA")
        small = np.asarray(image.reduce(max(1, min(image.size) // 64)), dtype=np.float64)
    except Exception:
        return []
    alpha = small[..., 3] / 255
    if (alpha < 0.5).mean() < 0.05 or alpha.sum() == 0:
        return []
    gray = small[..., :3] @ np.array([0.299, 0.587, 0.114]) / 255  # as PIL's L
    return [float((gray * alpha).sum() / alpha.sum())]


# a composited image whose pixels span at most this many levels (of 255) in every channel is one flat colour
FLAT_LEVELS = 8


def blank_on(split: Split, background, channels: int, limit: int = 64) -> tuple[int, int]:
    """(how many, of up to `limit` images spread over a split of files, are partly transparent and one flat colour
    once composited on `background` as training reads them; how many of those looked at are partly transparent).
    Only transparent files are decoded; (0, 0) for images in memory, already composited, and for records in shards
    or Parquet files, where reading 64 spread over them can mean as many row groups or seeks."""
    if split.paths is None or (len(split) and isinstance(split.paths[0], Record)):
        return 0, 0
    blank, clear = blank_among(split.paths, background, channels, limit)
    return len(blank), clear


def blank_among(paths: list, background, channels: int, limit: int = 64) -> tuple[list, int]:
    """(the paths, of up to `limit` spread evenly over `paths`, of partly transparent image files one flat colour on
    `background` (`blank_file`); how many of those looked at are partly transparent)."""
    pick = np.unique(np.linspace(0, len(paths) - 1, min(limit, len(paths))).round().astype(int)) if paths else []
    seen = {paths[i]: blank_file(paths[i], background, channels) for i in pick}
    return [path for path, found in seen.items() if found], sum(found is not None for found in seen.values())


def blank_file(path, background, channels: int) -> bool | None:
    """Whether the image file at `path`, partly transparent, is one flat colour composited on `background` as a model
    of `channels` reads it; None for an opaque image, or one that cannot be read (the reader's business; a FIFO or a
    device is never opened: it could wait, or never end)."""
    try:
        if not Path(path).is_file():
            return None
        with Image.open(path) as image:
            if image.mode not in ("LA", "RGBA", "PA") and "transparency" not in image.info:
                return None  # opaque: nothing of it depends on the background
            small = image.reduce(max(1, min(image.size) // 64)) if image.mode in ("LA", "RGBA") else image
            if not _ink_of(small):
                return None
            pixels = np.asarray(to_channels(small, channels, background), dtype=np.int16)
    except Exception:
        return None
    return bool(np.ptp(pixels.reshape(-1, channels), axis=0).max() <= FLAT_LEVELS)


def blank_words(blank: int, clear: int, background, images: str) -> str:
    """`blank_on`'s finding in words: `blank` of `clear` partly transparent `images` ("training images") are one
    flat colour on `background` (the model config's, in [0, 1])."""
    values = [round(255 * v) for v in background]
    colour = "black" if max(values) == 0 else "white" if min(values) == 255 else str(tuple(values))
    return (
        f"{blank} of {clear} partly transparent {images} looked at are one flat colour on model.background {colour}: "
        "what they show is that colour, so the model sees blank images"
    )


def other_background(background) -> str:
    """The black or white value of model.background furthest from `background`, as a KEY=VALUE value and its name."""
    return "1 (white)" if sum(background) / len(background) < 0.5 else "0 (black)"


def _border(pixels: np.ndarray) -> float:
    """The mean of a (C, H, W) uint8 image's outermost rows and columns, over its channels."""
    edge = np.concatenate([pixels[:, 0], pixels[:, -1], pixels[:, :, 0], pixels[:, :, -1]], axis=1)
    return float(edge.mean())


def _has_colour(image: Image.Image) -> bool:
    if image.mode in ("1", "L", "LA", "I", "I;16", "F"):
        return False
    rgb = np.asarray(image.convert("RGB").resize((32, 32)), dtype=np.int16)
    return bool(np.abs(rgb - rgb.mean(axis=2, keepdims=True)).max() > 8)


def small_pixels(split: Split, limit: int = 2000, side: int = 16, background=None) -> tuple[np.ndarray, np.ndarray]:
    """(N, 3, side, side) uint8 pixels and (N,) class indices of up to `limit` images spread evenly over a
    single-label `split`, each read as RGB (transparent pixels on `background`, None: white) and averaged down to
    side x side; an unreadable file is left out. A cheap look at what the images show, for the fit's choices."""
    pick = np.unique(np.linspace(0, len(split) - 1, min(limit, len(split))).round().astype(int))
    labels = split.labels.numpy()
    if split.images is not None:
        import torch.nn.functional as F

        images = F.adaptive_avg_pool2d(split.images[pick].float(), side).round().to(dtype=split.images.dtype)
        return images.expand(-1, 3, -1, -1).numpy().astype(np.uint8), labels[pick]
    xs, ys = [], []
    for i in pick:
        item = split.paths[i]
        try:
            with Image.open(io.BytesIO(item.read()) if isinstance(item, Record) else item) as image:
                image.draft("RGB", (side * 4, side * 4))  # JPEGs decode at a fraction of their size
                small = to_channels(image, 3, background).resize((side, side), Image.BOX)
        except Exception:
            continue
        xs.append(np.asarray(small).transpose(2, 0, 1))
        ys.append(labels[i])
    if not xs:
        return np.zeros((0, 3, side, side), np.uint8), np.zeros(0, np.int64)
    return np.stack(xs), np.array(ys)
