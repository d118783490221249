"""Reading one image file as uint8 pixels with the model's number of channels.

`open_image` is the one place an image file is decoded: every data source, `vitkit predict` and
`vitkit inspect` go through it. Whatever is wrong with a file (missing, empty, truncated, corrupt,
not an image, larger than the decompression-bomb limit) ends as one DataError naming the file;
the EXIF orientation tag is applied, so photos come upright. Every PIL mode a dataset may hold ends up as 8-bit L (1 channel) or RGB (3 channels): palette
images go through RGB(A); alpha is composited onto white; 16-bit and 32-bit integer images are
scaled down to 8 bits by their range; float images are read as [0, 1] (or [0, 255] when larger).
"""

from __future__ import annotations

import functools
import importlib.util
import io
import os
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from vitkit.errors import DataError, first_line

MAX_PIXELS = 89_478_485  # larger images are refused before decoding (a decompression bomb); Pillow's own default
_BOMB = "a decompression bomb, or an image far too large to train on; downscale it"
ORIENTATION = 0x0112  # the EXIF tag
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".ppm", ".pgm")


def is_image_file(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES and not path.name.startswith(".")


def find_images(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Image files named by `paths`: files as given, folders searched recursively in sorted order."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if is_image_file(p) and p.is_file())
        elif path.is_file():
            found.append(path)
        else:
            raise DataError(f"{path}: no such file or folder; pass image files or a folder of images")
    if not found:
        raise DataError(f"{', '.join(map(str, paths))}: no images found (looked for {', '.join(IMAGE_SUFFIXES)})")
    return found


def spread_over_folders(paths: list[Path]) -> list[Path]:
    """`paths` reordered round-robin over their folders (first image of each class folder, then the second ...),
    so the first few of a class-sorted dataset show every class, not the first class alone."""
    groups: dict[Path, list[Path]] = {}
    for path in paths:
        groups.setdefault(path.parent, []).append(path)
    columns = list(groups.values())
    return [column[i] for i in range(max(map(len, columns), default=0)) for column in columns if i < len(column)]


JPEG_DECODERS = ("simplejpeg", "pillow")


def jpeg_decoder() -> str:
    """The JPEG decoder in use: simplejpeg where installed (vitkit[jpeg]; the same pixels as Pillow's, about
    1.7x faster, benchmarks/RESULTS.md), else Pillow; $VITKIT_JPEG_DECODER=pillow picks Pillow."""
    wanted = os.environ.get("VITKIT_JPEG_DECODER", "simplejpeg")
    if wanted not in JPEG_DECODERS:
        raise DataError(f"$VITKIT_JPEG_DECODER: expected one of {', '.join(JPEG_DECODERS)}, got {wanted!r}")
    return wanted if wanted == "pillow" or _installed("simplejpeg") else "pillow"


@functools.lru_cache(maxsize=None)
def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _simplejpeg(data: bytes, size: tuple[int, int], need: tuple[int, int] | None, gray: bool) -> np.ndarray | None:
    """A JPEG decoded by simplejpeg at the DCT scale Pillow's `draft` would pick for `need` (the largest of
    1/2, 1/4, 1/8 that keeps at least `need`); None where simplejpeg cannot (CMYK, damaged data)."""
    import simplejpeg

    w, h = size
    most = max(1, min(w // need[0], h // need[1])) if need else 1
    scale = next(s for s in (8, 4, 2, 1) if most >= s)
    try:
        array = simplejpeg.decode_jpeg(data, colorspace="GRAY" if gray else "RGB", min_width=-(-w // scale), min_height=-(-h // scale))
    except ValueError:
        return None
    return array


def _needed(draft, width: int, height: int, orientation: int) -> tuple[int, int] | None:
    """The stored (width, height) a caller's `draft(upright width, upright height)` asks for; None without one."""
    if draft is None:
        return None
    turned = orientation in (5, 6, 7, 8)  # stored on its side
    need = draft(height, width) if turned else draft(width, height)
    return need[::-1] if turned else need


def _fast_jpeg(data: bytes, path: Path, channels: int, max_pixels: int, draft) -> np.ndarray | None:
    """(H, W, channels) pixels of a JPEG by simplejpeg (header, EXIF orientation and pixels without Pillow);
    None where it cannot (CMYK, damaged data, RGB pixels wanted as Pillow's luminance)."""
    import simplejpeg

    try:
        h, w, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None
    if colorspace not in ("Gray", "YCbCr", "RGB"):
        return None
    if w * h > max_pixels:  # checked on the header, before any pixel is decoded
        raise DataError(f"{path}: {w}x{h} pixels is over the limit of {max_pixels:,} ({_BOMB})")
    orientation = _exif_orientation(data)
    need = _needed(draft, w, h, orientation)
    gray = colorspace == "Gray" or (channels == 1 and need is not None)  # with DCT scaling Pillow's draft decodes luminance too
    if channels == 1 and not gray:
        return None
    pixels = _simplejpeg(data, (w, h), need, gray)
    if pixels is None:
        return None
    pixels = _upright(pixels, orientation)
    return np.repeat(pixels, 3, axis=2) if channels == 3 and gray else pixels


def _exif_orientation(data: bytes) -> int:
    """The EXIF orientation tag of a JPEG (1 when absent), read from its APP1 segment."""
    i = 2
    while i + 4 <= len(data) and data[i] == 0xFF:
        marker, length = data[i + 1], int.from_bytes(data[i + 2 : i + 4], "big")
        if marker == 0xDA:  # start of scan: no more header segments
            break
        if marker == 0xE1 and data[i + 4 : i + 10] == b"Exif\0\0":
            tiff = data[i + 10 : i + 2 + length]
            order = "little" if tiff[:2] == b"II" else "big"
            ifd = int.from_bytes(tiff[4:8], order)
            for k in range(int.from_bytes(tiff[ifd : ifd + 2], order)):
                entry = tiff[ifd + 2 + 12 * k : ifd + 14 + 12 * k]
                if int.from_bytes(entry[:2], order) == ORIENTATION:
                    value = int.from_bytes(entry[8:10], order)
                    return value if 1 <= value <= 8 else 1
            return 1
        i += 2 + length
    return 1


def _upright(array: np.ndarray, orientation: int) -> np.ndarray:
    """(H, W, C) pixels stored with EXIF `orientation`, turned upright (as ImageOps.exif_transpose does)."""
    turned = {2: lambda a: a[:, ::-1], 3: lambda a: a[::-1, ::-1], 4: lambda a: a[::-1], 5: lambda a: a.transpose(1, 0, 2),
              6: lambda a: np.rot90(a, -1), 7: lambda a: a.transpose(1, 0, 2)[::-1, ::-1], 8: lambda a: np.rot90(a, 1)}
    return np.ascontiguousarray(turned[orientation](array)) if orientation in turned else array


class Record:
    """An image stored inside a larger file (a tar shard's member, a Parquet row): str() names it, read() gives its bytes."""

    def read(self) -> bytes:
        raise NotImplementedError


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


def open_image(source, channels: int, *, max_pixels: int = MAX_PIXELS, name: str | None = None, draft=None) -> Image.Image:
    """The decoded image of a file (a path, or its bytes named `name`) as L (channels=1) or RGB (channels=3),
    upright by its EXIF tag.

    `draft(width, height)`, given the upright size, returns the smallest upright size the caller needs: a
    JPEG is then decoded with DCT scaling at the smallest scale that still gives at least that size.
    Raises DataError naming the file for anything but a readable image of at most `max_pixels` pixels.
    """
    image = _decode(source, channels, max_pixels, name, draft)
    return image if isinstance(image, Image.Image) else Image.fromarray(image[..., 0] if channels == 1 else image)


def load_pixels(source, channels: int, *, max_pixels: int = MAX_PIXELS, name: str | None = None, draft=None) -> np.ndarray:
    """`open_image`'s pixels as an (H, W, channels) uint8 array (without a copy through PIL where simplejpeg decodes)."""
    image = _decode(source, channels, max_pixels, name, draft)
    if isinstance(image, Image.Image):
        image = np.array(image)  # writable (torch.from_numpy wants that)
        return image[..., None] if image.ndim == 2 else image
    return image


def _decode(source, channels: int, max_pixels: int, name: str | None, draft) -> Image.Image | np.ndarray:
    path = Path(name or str(source))
    try:
        if isinstance(source, Record):  # a member of a shard: its bytes
            source = source.read()
        in_memory = isinstance(source, (bytes, bytearray, memoryview))
        if (len(source) if in_memory else path.stat().st_size) == 0:
            raise DataError(f"{path}: empty file (0 bytes); remove it or replace it with the image")
        if jpeg_decoder() == "simplejpeg":
            source, in_memory = (source if in_memory else path.read_bytes()), True
            if source[:2] == b"\xff\xd8":
                fast = _fast_jpeg(source, path, channels, max_pixels, draft)
                if fast is not None:  # else Pillow decodes it (and says what is wrong)
                    return fast
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the limit below is ours
            image = Image.open(io.BytesIO(source) if in_memory else path)
        with image:
            w, h = image.size
            if w * h > max_pixels:  # checked on the header, before any pixel is decoded
                raise DataError(f"{path}: {w}x{h} pixels is over the limit of {max_pixels:,} ({_BOMB})")
            need = _needed(draft, w, h, image.getexif().get(ORIENTATION, 1))
            gray = image.mode == "L" or (channels == 1 and need is not None)
            if need is not None and image.format == "JPEG":
                image.draft("L" if gray else "RGB", need)
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
        image = resize_center_crop(image, size, crop_pct)
    array = np.asarray(image, dtype=np.uint8)
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
