"""Reading one image file as uint8 pixels with the model's number of channels.

Every PIL mode a dataset may hold ends up as 8-bit L (1 channel) or RGB (3 channels): palette
images go through RGB(A); alpha is composited onto white; 16-bit and 32-bit integer images are
scaled down to 8 bits by their range; float images are read as [0, 1] (or [0, 255] when larger).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from vitkit.errors import DataError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".ppm", ".pgm")


def is_image_file(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES and not path.name.startswith(".")


def to_8bit(image: Image.Image) -> Image.Image:
    """An 8-bit L, LA, RGB or RGBA image from any PIL mode (palette, 16-bit, 32-bit, float, CMYK ...)."""
    if image.mode in ("L", "LA", "RGB", "RGBA"):
        return image
    if image.mode == "P":
        return image.convert("RGBA" if "transparency" in image.info else "RGB")
    if image.mode in ("PA",):
        return image.convert("RGBA")
    if image.mode == "1":
        return image.convert("L")
    if image.mode.startswith("I") or image.mode == "F":
        array = np.asarray(image).astype(np.float64)
        if image.mode == "F":
            top = 1.0 if array.max(initial=0.0) <= 1.0 else 255.0
        elif image.mode == "I" and array.max(initial=0) <= 255:
            top = 255.0
        else:
            top = 65535.0  # 16-bit data, also when PIL widened it to mode I
        return Image.fromarray(np.clip(array / top * 255.0 + 0.5, 0, 255).astype(np.uint8), mode="L")
    return image.convert("RGB")  # CMYK, YCbCr, LAB, HSV


def to_channels(image: Image.Image, channels: int) -> Image.Image:
    """`image` as L (channels=1) or RGB (channels=3); alpha is composited onto white."""
    image = to_8bit(image)
    if image.mode in ("LA", "RGBA"):
        background = Image.new(image.mode, image.size, (255,) * len(image.mode))
        image = Image.alpha_composite(background, image).convert(image.mode[:-1])
    if channels == 1:
        return image.convert("L")
    if channels == 3:
        return image.convert("RGB")
    raise DataError(f"model.in_chans: images can be read with 1 or 3 channels, not {channels}")


def resize_center_crop(image: Image.Image, size: int, crop_pct: float = 1.0) -> Image.Image:
    """Resize the shorter side to size / crop_pct, then cut the central size x size square."""
    scale_to = max(size, round(size / crop_pct))
    w, h = image.size
    if min(w, h) != scale_to:
        ratio = scale_to / min(w, h)
        image = image.resize((max(scale_to, round(w * ratio)), max(scale_to, round(h * ratio))), Image.BILINEAR, reducing_gap=None)
    w, h = image.size
    left, top = (w - size) // 2, (h - size) // 2
    return image.crop((left, top, left + size, top + size))


def load_image(path: str | os.PathLike, channels: int, size: int | None = None, crop_pct: float = 1.0) -> np.ndarray:
    """(C, H, W) uint8 pixels of one file; resized and centre-cropped to size x size when `size` is given."""
    path = Path(path)
    try:
        with Image.open(path) as image:
            image.load()
            image = to_channels(image, channels)
    except FileNotFoundError:
        raise DataError(f"{path}: image file not found") from None
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise DataError(f"{path}: cannot read image ({err})") from None
    if size is not None:
        image = resize_center_crop(image, size, crop_pct)
    array = np.asarray(image, dtype=np.uint8)
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
