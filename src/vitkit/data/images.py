"""Reading one image file as uint8 pixels with the model's number of channels.

`open_image` is the one place an image file is decoded: every data source, `vitkit predict` and
`vitkit inspect` go through it. Whatever is wrong with a file (missing, empty, truncated, corrupt,
not an image, larger than the decompression-bomb limit) ends as one DataError naming the file;
the EXIF orientation tag is applied, so photos come upright. Every PIL mode a dataset may hold ends up as 8-bit L (1 channel) or RGB (3 channels): palette
images go through RGB(A); alpha is composited onto white; 16-bit and 32-bit integer images are
scaled down to 8 bits by their range; float images are read as [0, 1] (or [0, 255] when larger).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from vitkit.errors import DataError, first_line

MAX_PIXELS = 89_478_485  # larger images are refused before decoding (a decompression bomb); Pillow's own default
_BOMB = "a decompression bomb, or an image far too large to train on; downscale it"
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


def scaled_size(width: int, height: int, size: int, crop_pct: float = 1.0) -> tuple[int, int]:
    """(w, h) of an image once its shorter side is resized to size / crop_pct (before the centre crop)."""
    scale_to = max(size, round(size / crop_pct))
    if min(width, height) == scale_to:
        return width, height
    ratio = scale_to / min(width, height)
    return max(scale_to, round(width * ratio)), max(scale_to, round(height * ratio))


def resize_center_crop(image: Image.Image, size: int, crop_pct: float = 1.0) -> Image.Image:
    """Resize the shorter side to size / crop_pct, then cut the central size x size square."""
    if scaled_size(*image.size, size, crop_pct) != image.size:
        image = image.resize(scaled_size(*image.size, size, crop_pct), Image.BILINEAR, reducing_gap=None)
    w, h = image.size
    left, top = (w - size) // 2, (h - size) // 2
    return image.crop((left, top, left + size, top + size))


def open_image(path: str | os.PathLike, channels: int, *, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """The decoded image of one file as L (channels=1) or RGB (channels=3), upright by its EXIF tag.

    Raises DataError naming the file for anything but a readable image of at most `max_pixels` pixels.
    """
    path = Path(path)
    try:
        if path.stat().st_size == 0:
            raise DataError(f"{path}: empty file (0 bytes); remove it or replace it with the image")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the limit below is ours
            image = Image.open(path)
        with image:
            w, h = image.size
            if w * h > max_pixels:  # checked on the header, before any pixel is decoded
                raise DataError(f"{path}: {w}x{h} pixels is over the limit of {max_pixels:,} ({_BOMB})")
            image.load()
            return to_channels(ImageOps.exif_transpose(image), channels)
    except DataError:
        raise
    except Image.DecompressionBombError:
        raise DataError(f"{path}: larger than Pillow's limit of {2 * Image.MAX_IMAGE_PIXELS:,} pixels ({_BOMB})") from None
    except FileNotFoundError:
        raise DataError(f"{path}: image file not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, not an image file") from None
    except PermissionError:
        raise DataError(f"{path}: permission denied; make the file readable") from None
    except UnidentifiedImageError:
        raise DataError(f"{path}: not an image (or in a format Pillow cannot read); remove it or convert it") from None
    except Exception as err:  # Pillow's decoders raise many types (OSError, SyntaxError, struct.error ...) on damaged files
        raise DataError(f"{path}: cannot decode the image ({first_line(err)}); the file is truncated or corrupt") from None


def load_image(
    path: str | os.PathLike, channels: int, size: int | None = None, crop_pct: float = 1.0, *, max_pixels: int = MAX_PIXELS
) -> np.ndarray:
    """(C, H, W) uint8 pixels of one file; resized and centre-cropped to size x size when `size` is given."""
    image = open_image(path, channels, max_pixels=max_pixels)
    if size is not None:
        w, h = scaled_size(*image.size, size, crop_pct)
        if w * h > max_pixels:  # a thin image (1 x 5,000,000) grows with its shorter side: refused before resizing
            raise DataError(f"{path}: {image.size[0]}x{image.size[1]} pixels would become {w}x{h} when its shorter side is "
                            f"scaled to {max(size, round(size / crop_pct))}, over the limit of {max_pixels:,} pixels; crop it to a "
                            "less extreme aspect ratio")
        image = resize_center_crop(image, size, crop_pct)
    array = np.asarray(image, dtype=np.uint8)
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
