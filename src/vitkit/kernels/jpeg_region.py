"""One box of a JPEG decoded with the system's libjpeg-turbo, skipping what lies outside it (jpeg_region.c).

    if jpeg_region.load():
        width, height, colorspace = jpeg_region.info(data)
        pixels = jpeg_region.decode(data, (left, top, right, bottom), width=jpeg_region.scaled(width, 2), scale=2)  # (h, w, 3) uint8

An Inception crop covers about half of a photo on average: libjpeg-turbo's jpeg_crop_scanline and
jpeg_skip_scanlines leave out the IDCT, upsampling and colour conversion of the columns and rows outside the box,
and the rows below it are never read. The pixels are exactly those of the
whole-image decode at the same DCT scale: the box is decoded with one extra column on each side where the image
has one, because libjpeg's fancy upsampling treats a cropped region's edge columns as image edges, and at least
MIN_SPAN columns wide, because it does not use that filter at all on a region only one or two chroma columns wide.

The C source is compiled once per machine against the system's jpeglib.h and libjpeg (Debian: libjpeg-dev), as
vitkit's other kernels are; where that fails, `load()` returns False and callers decode whole images instead.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np

from vitkit.kernels import build_library

SOURCE = Path(__file__).with_name("jpeg_region.c")
COLORSPACES = {1: "Gray", 2: "RGB", 3: "YCbCr", 4: "CMYK", 5: "YCCK"}  # libjpeg's J_COLOR_SPACE
MIN_SPAN = 32  # columns decoded at least: a narrower region would be upsampled differently from the whole image
_MESSAGE = 256
_lib: ctypes.CDLL | None = None
_failure: str | None = None  # why the library is unavailable, once tried


class JpegError(ValueError):
    """libjpeg refused the data (corrupt, truncated, not a JPEG)."""


def load() -> bool:
    """Build (or find in the cache) and load the library; False where it cannot be (see `unavailable()`)."""
    global _lib, _failure
    if _lib is None and _failure is None:
        try:
            lib = ctypes.CDLL(
                str(build_library(SOURCE, os.environ.get("CC", "cc"), ["-O2", "-shared", "-fPIC"], ["-ljpeg"]))
            )
            _declare(lib)
            _lib = lib
        except Exception as e:  # no compiler, no jpeglib.h, a libjpeg without jpeg_crop_scanline, a read-only cache
            _failure = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return _lib is not None


def unavailable() -> str | None:
    """Why `load()` failed (None if it did not, or was not tried)."""
    return _failure


def _declare(lib: ctypes.CDLL) -> None:
    i, p = ctypes.c_int, ctypes.POINTER(ctypes.c_int)
    lib.vk_jpeg_info.argtypes = [ctypes.c_char_p, ctypes.c_size_t, p, p, p, p, ctypes.c_char_p]
    lib.vk_jpeg_info.restype = i
    lib.vk_jpeg_region.argtypes = [
        ctypes.c_char_p,
        ctypes.c_size_t,
        i,
        i,
        i,
        i,
        i,
        i,
        i,
        i,
        ctypes.c_void_p,
        ctypes.c_char_p,
    ]
    lib.vk_jpeg_region.restype = i


def info(data: bytes) -> tuple[int, int, str]:
    """(width, height, colour space) of the stored image, from its header; JpegError if libjpeg cannot read it."""
    width, height, components, colorspace = (ctypes.c_int() for _ in range(4))
    message = ctypes.create_string_buffer(_MESSAGE)
    if (
        _lib.vk_jpeg_info(data, len(data), *(ctypes.byref(v) for v in (width, height, components, colorspace)), message)
        != 0
    ):
        raise JpegError(message.value.decode(errors="replace"))
    return width.value, height.value, COLORSPACES.get(colorspace.value, "unknown")


def scaled(size: int, scale: int) -> int:
    """libjpeg's output length of `size` stored pixels decoded at 1/scale."""
    return -(-size // scale)


def decode(
    data: bytes, box: tuple[int, int, int, int], *, width: int, scale: int = 1, gray: bool = False
) -> np.ndarray:
    """(bottom - top, right - left, 1 or 3) uint8: the box (left, top, right, bottom), in pixels of the image decoded
    at 1/scale, of a JPEG as stored (no EXIF orientation; `width`: that decoded image's width); JpegError on bad data."""
    left, top, right, bottom = box
    start, stop = max(0, left - 1), min(width, right + 1)  # the margin column that keeps the edges exact
    if stop - start < MIN_SPAN:  # libjpeg upsamples a region only 1-2 chroma columns wide without its fancy filter
        stop = min(width, start + MIN_SPAN)
        start = max(0, stop - MIN_SPAN)
    channels = 1 if gray else 3
    out = np.empty((bottom - top, right - left, channels), np.uint8)
    message = ctypes.create_string_buffer(_MESSAGE)
    status = _lib.vk_jpeg_region(
        data,
        len(data),
        scale,
        int(gray),
        left,
        top,
        right - left,
        bottom - top,
        start,
        stop - start,
        out.ctypes.data,
        message,
    )
    if status != 0:
        raise (JpegError if status == -1 else ValueError)(message.value.decode(errors="replace"))
    return out
