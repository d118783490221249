"""Reading one image file as uint8 pixels with the model's number of channels.

`open_image` is the one place an image file is decoded: every data source, `vitkit predict` and
`vitkit inspect` go through it. Whatever is wrong with a file (missing, empty, truncated, corrupt,
not an image, larger than the decompression-bomb limit) ends as one DataError naming the file;
the EXIF orientation tag is applied, so photos come upright. Every PIL mode a dataset may hold ends up as 8-bit L (1 channel) or RGB (3 channels): palette
images go through RGB(A); transparent pixels (alpha, a palette's or one colour's transparency) are composited on the
model's background (`model.background`, white by default); 16-bit and 32-bit integer images are
scaled down to 8 bits by their range; float images are read as [0, 1] (or [0, 255] when larger).
"""

from __future__ import annotations

import errno
import functools
import importlib.util
import io
import math
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from vitkit.errors import DataError, first_line
from vitkit.files import read_regular, too_large
from vitkit.kernels import jpeg_region
from vitkit.paths import local_path

MAX_PIXELS = 89_478_485  # larger images are refused before decoding (a decompression bomb); Pillow's own default
# larger image files are refused before reading: MAX_PIXELS at 8 bytes a pixel (16-bit RGBA) fit
MAX_FILE_BYTES = 1 << 30
BOMB_ADVICE = "a decompression bomb, or an image far too large to train on; downscale it"
ORIENTATION = 0x0112  # the EXIF tag
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".ppm", ".pgm")


def is_image_file(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES and not path.name.startswith(".")


def is_hidden(name: str) -> bool:
    """A file or folder name no dataset means: hidden (.ipynb_checkpoints/, macOS's ._x.jpg resource forks) or the
    __MACOSX/ folder a zip made on a Mac carries."""
    return name.startswith(".") or name == "__MACOSX"


def image_files(folder: Path) -> list[Path]:
    """The image files under `folder`, recursively, in sorted order; nothing inside hidden folders (`is_hidden`), such
    as Jupyter's checkpoint copies, which would be duplicates. A symbolic link named as an image is one of them even
    where it points nowhere: reading it fails, and data.on_error counts and lists it (it was left out unsaid)."""
    return sorted(
        p
        for p in folder.rglob("*")
        if is_image_file(p) and not any(map(is_hidden, p.relative_to(folder).parts)) and (p.is_file() or p.is_symlink())
    )


def find_images(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Image files named by `paths`: files as given, folders searched recursively in sorted order."""
    found: list[Path] = []
    for path in (local_path(p, DataError) for p in paths):
        if path.is_dir():
            found += image_files(path)
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


JPEG_DECODERS = ("libjpeg", "simplejpeg", "pillow")


def jpeg_decoder() -> str:
    """The JPEG decoder in use, the first that works of: "libjpeg" (the system's libjpeg-turbo through vitkit's C
    helper, kernels/jpeg_region.c: decodes only a crop's box), "simplejpeg" (vitkit[jpeg]), "pillow". All give the
    same pixels (tests/data/test_decode.py); $VITKIT_JPEG_DECODER starts the list further down."""
    wanted = os.environ.get("VITKIT_JPEG_DECODER", JPEG_DECODERS[0])
    if wanted not in JPEG_DECODERS:
        raise DataError(f"$VITKIT_JPEG_DECODER: expected one of {', '.join(JPEG_DECODERS)}, got {wanted!r}")
    if wanted == "libjpeg" and jpeg_region.load():
        return wanted
    return "simplejpeg" if wanted != "pillow" and _installed("simplejpeg") else "pillow"


@functools.cache
def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _dct_scale(size: tuple[int, int], need: tuple[int, int] | None) -> int:
    """The DCT scaling Pillow's `draft` picks for `need`: the largest of 1/2, 1/4, 1/8 that keeps at least `need`."""
    most = max(1, min(size[0] // need[0], size[1] // need[1])) if need else 1
    return next(s for s in (8, 4, 2, 1) if most >= s)


def _simplejpeg(data: bytes, size: tuple[int, int], need: tuple[int, int] | None, gray: bool) -> np.ndarray | None:
    """A JPEG decoded by simplejpeg at `_dct_scale`; None where simplejpeg cannot (CMYK, damaged data)."""
    import simplejpeg

    (w, h), scale = size, _dct_scale(size, need)
    try:
        array = simplejpeg.decode_jpeg(
            data, colorspace="GRAY" if gray else "RGB", min_width=-(-w // scale), min_height=-(-h // scale)
        )
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


def _fast_jpeg(data: bytes, path: Path, channels: int, max_pixels: int, draft, crop, decoder: str) -> np.ndarray | None:
    """(H, W, channels) pixels of a JPEG by `decoder`, libjpeg or simplejpeg (header, EXIF orientation and pixels
    without Pillow), only `crop`'s box where one is given; None where it cannot (CMYK, damaged data, RGB pixels wanted
    as Pillow's luminance): Pillow then decodes the file, and says what is wrong with it."""
    libjpeg = decoder == "libjpeg"
    try:
        if libjpeg:
            w, h, colorspace = jpeg_region.info(data)
        else:
            import simplejpeg

            h, w, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None
    if colorspace not in ("Gray", "YCbCr", "RGB"):
        return None
    if w * h > max_pixels:  # checked on the header, before any pixel is decoded
        raise DataError(f"{path}: {w}x{h} pixels is over the limit of {max_pixels:,} ({BOMB_ADVICE})")
    orientation = _exif_orientation(data)
    need = _needed(draft, w, h, orientation)
    # with DCT scaling Pillow's draft decodes luminance too
    gray = colorspace == "Gray" or (channels == 1 and need is not None)
    if channels == 1 and not gray:
        return None
    if libjpeg:
        pixels = _libjpeg(data, (w, h), need, gray, orientation, crop)
    else:
        pixels = _simplejpeg(data, (w, h), need, gray)
        pixels = None if pixels is None else _cut(_upright(pixels, orientation), crop)
    if pixels is None:
        return None
    return np.repeat(pixels, 3, axis=2) if channels == 3 and gray else pixels


def _libjpeg(data: bytes, size: tuple[int, int], need, gray: bool, orientation: int, crop) -> np.ndarray | None:
    """The upright box `crop` asks for (all of the image without one), decoded by libjpeg at `_dct_scale`; None on
    damaged data. A file that does not end in an end-of-image marker is decoded whole, so that a truncated file
    fails whatever its crop."""
    scale = _dct_scale(size, need)
    sw, sh = jpeg_region.scaled(size[0], scale), jpeg_region.scaled(size[1], scale)
    upright = (sh, sw) if orientation in (5, 6, 7, 8) else (sw, sh)
    whole = crop is None or not data.endswith(b"\xff\xd9")
    stored = (0, 0, sw, sh) if whole else _STORED_BOX[orientation](*crop(*upright), sw, sh)
    try:
        pixels = _upright(jpeg_region.decode(data, stored, width=sw, scale=scale, gray=gray), orientation)
    except jpeg_region.JpegError:
        return None
    return _cut(pixels, crop) if whole else pixels


# The (left, top, right, bottom) box of the stored width x height image that `_upright` turns into the upright box
# (l, t, r, b), by EXIF orientation.
_STORED_BOX = {
    1: lambda l, t, r, b, width, height: (l, t, r, b),
    2: lambda l, t, r, b, width, height: (width - r, t, width - l, b),
    3: lambda l, t, r, b, width, height: (width - r, height - b, width - l, height - t),
    4: lambda l, t, r, b, width, height: (l, height - b, r, height - t),
    5: lambda l, t, r, b, width, height: (t, l, b, r),
    6: lambda l, t, r, b, width, height: (t, height - r, b, height - l),
    7: lambda l, t, r, b, width, height: (width - b, height - r, width - t, height - l),
    8: lambda l, t, r, b, width, height: (width - b, l, width - t, r),
}


def _cut(pixels, crop):
    """The box `crop(width, height)` of an (H, W, C) array or a PIL image; all of it without `crop`."""
    if crop is None:
        return pixels
    if isinstance(pixels, Image.Image):
        return pixels.crop(crop(*pixels.size))
    left, top, right, bottom = crop(pixels.shape[1], pixels.shape[0])
    return pixels[top:bottom, left:right]


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
    turned = {
        2: lambda a: a[:, ::-1],
        3: lambda a: a[::-1, ::-1],
        4: lambda a: a[::-1],
        5: lambda a: a.transpose(1, 0, 2),
        6: lambda a: np.rot90(a, -1),
        7: lambda a: a.transpose(1, 0, 2)[::-1, ::-1],
        8: lambda a: np.rot90(a, 1),
    }
    return np.ascontiguousarray(turned[orientation](array)) if orientation in turned else array


class Record:
    """An image stored inside a larger file (a tar shard's member, a Parquet row): str() names it, read() gives its bytes."""

    def read(self) -> bytes:
        raise NotImplementedError


def to_8bit(image: Image.Image) -> Image.Image:
    """An 8-bit L, LA, RGB or RGBA image from any PIL mode (palette, 16-bit, 32-bit, float, CMYK ...); an L or RGB
    image with one colour marked transparent (a PNG's tRNS) gets that as its alpha."""
    if image.mode in ("L", "RGB") and "transparency" in image.info:
        return image.convert(image.mode + "A")
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


def to_channels(image: Image.Image, channels: int, background: Sequence[float] | None = None) -> Image.Image:
    """`image` as L (channels=1) or RGB (channels=3); transparent pixels are composited on `background` (the model
    config's: one value in [0, 1] per channel, or one for all; None: white)."""
    if channels not in (1, 3):
        raise DataError(f"model.in_chans: images can be read with 1 or 3 channels, not {channels}")
    image = to_8bit(image)
    if image.mode in ("LA", "RGBA"):
        image = on_background(image, background)
    return image.convert("L" if channels == 1 else "RGB")


def background_bytes(background: Sequence[float] | None) -> tuple[int, ...]:
    """The uint8 value per channel of a background in [0, 1] (None: white), as decoding composites on it."""
    return tuple(round(255 * float(v)) for v in (background if background is not None else (1.0,)))


def on_background(image: Image.Image, background: Sequence[float] | None = None) -> Image.Image:
    """An LA or RGBA image composited on `background` (`to_channels`): L where both are gray, else RGB."""
    fill = background_bytes(background)
    if image.mode == "LA" and len(set(fill)) == 1:
        return Image.alpha_composite(Image.new("LA", image.size, (fill[0], 255)), image).convert("L")
    fill = fill * 3 if len(fill) == 1 else fill
    image = image.convert("RGBA")
    return Image.alpha_composite(Image.new("RGBA", image.size, (*fill, 255)), image).convert("RGB")


def as_hw(size: int | tuple[int, int]) -> tuple[int, int]:
    """(height, width) of a model input size given as one side or as (H, W)."""
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


CROP_MODES = ("center", "squash")


class Crop(float):
    """A crop_pct that also says how an image is brought to size / crop_pct before the centre crop of size: `mode`
    "center" keeps the aspect ratio (timm's crop_mode center, HF's shortest_edge), "squash" resizes both sides to
    it (timm's squash, HF's height and width); `interpolation` names PIL's filter (bilinear, bicubic, nearest,
    lanczos, box, hamming). A float, so every reader that passes crop_pct along passes all three."""

    mode: str
    interpolation: str

    def __new__(cls, crop_pct: float = 1.0, mode: str = "center", interpolation: str = "bilinear") -> Crop:
        if mode not in CROP_MODES:
            raise DataError(f"preprocess.crop_mode: {mode!r} is not one of {', '.join(CROP_MODES)}")
        if not hasattr(Image.Resampling, str(interpolation).upper()):
            raise DataError(f"preprocess.interpolation: {interpolation!r} is not a filter PIL has")
        crop = super().__new__(cls, crop_pct)
        crop.mode, crop.interpolation = mode, str(interpolation).lower()
        return crop

    def __reduce__(self):  # data loader workers receive it pickled
        return Crop, (float(self), self.mode, self.interpolation)

    def __repr__(self) -> str:
        return f"Crop({float(self)!r}, {self.mode!r}, {self.interpolation!r})"

    def __str__(self) -> str:  # in messages, the number
        return float.__repr__(self)


def crop_of(metadata: dict) -> Crop:
    """The preprocessing a checkpoint's metadata records (its "preprocess": crop_pct, crop_mode, interpolation)."""
    given = metadata.get("preprocess") or {}
    pct = given.get("crop_pct")
    return Crop(1.0 if pct is None else pct, given.get("crop_mode", "center"), given.get("interpolation", "bilinear"))


def _filter(crop_pct: float):
    """The PIL filter `crop_pct` names (a `Crop`'s interpolation; bilinear for a plain number)."""
    return getattr(Image.Resampling, getattr(crop_pct, "interpolation", "bilinear").upper())


def scaled_size(width: int, height: int, size: int | tuple[int, int], crop_pct: float = 1.0) -> tuple[int, int]:
    """(w, h) of an image resized to cover the box `size` / crop_pct (before the centre crop of `size`): keeping its
    aspect ratio (for a square `size`, its shorter side to size / crop_pct), or to the box itself where `crop_pct` is
    a `Crop` of mode "squash". Sides rounded down, as timm's and torchvision's Resize and Hugging Face's image
    processors round them."""
    box_h, box_w = (shorter_side(side, crop_pct) for side in as_hw(size))
    if getattr(crop_pct, "mode", "center") == "squash":
        return box_w, box_h
    if width * box_h >= height * box_w:  # wider than the box: the height decides
        return (width, height) if height == box_h else (max(box_w, int(box_h * width / height)), box_h)
    return (width, height) if width == box_w else (box_w, max(box_h, int(box_w * height / width)))


def aspect_size(width: int, height: int, size: int | tuple[int, int], step: tuple[int, int]) -> tuple[int, int]:
    """(H, W) for a `width` x `height` image on a model of any input size (`dynamic_img_size`): the image's aspect
    ratio at about the area of `size`, each side rounded to a multiple of `step` (the patch size), at least one."""
    h, w = as_hw(size)
    scale = math.sqrt(h * w / max(width * height, 1))
    return tuple(max(s, round(side * scale / s) * s) for side, s in zip((height, width), step))  # type: ignore[return-value]


def shorter_side(size: int, crop_pct: float) -> int:
    """The shorter side an image is resized to before its centre size x size crop (timm: floor(size / crop_pct))."""
    return max(size, math.floor(size / crop_pct))


def resize_center_crop(image: Image.Image, size: int | tuple[int, int], crop_pct: float = 1.0) -> Image.Image:
    """Resize the image to cover `size` / crop_pct (`scaled_size`; with a `Crop`'s filter, else bilinear), then cut
    the central `size` (one side, or (H, W))."""
    if scaled_size(*image.size, size, crop_pct) != image.size:
        image = image.resize(scaled_size(*image.size, size, crop_pct), _filter(crop_pct), reducing_gap=None)
    (height, width), (w, h) = as_hw(size), image.size
    left, top = (w - width) // 2, (h - height) // 2
    return image.crop((left, top, left + width, top + height))


def read_image_file(path: Path) -> bytes:
    """The bytes of an image file, refused (DataError) before reading where it is no regular file (a device reads
    without end, a FIFO waits) or larger than any image vitkit reads can need: a 3 GB file (a sparse one, or a small
    image with gigabytes appended) was read whole into memory."""
    return read_regular(path, MAX_FILE_BYTES, DataError, what=ONE_IMAGE)


ONE_IMAGE = "one image"


def check_file_size(name, size: int) -> None:
    if size > MAX_FILE_BYTES:
        raise DataError(too_large(name, size, MAX_FILE_BYTES, ONE_IMAGE))


def open_image(
    source, channels: int, *, max_pixels: int = MAX_PIXELS, name: str | None = None, draft=None, background=None
) -> Image.Image:
    """The decoded image of a file (a path, or its bytes named `name`) as L (channels=1) or RGB (channels=3),
    upright by its EXIF tag, transparent pixels composited on `background` (`to_channels`).

    `draft(width, height)`, given the upright size, returns the smallest upright size the caller needs: a
    JPEG is then decoded with DCT scaling at the smallest scale that still gives at least that size.
    Raises DataError naming the file for anything but a readable image of at most `max_pixels` pixels.
    """
    image = _decode(source, channels, max_pixels, name, draft, None, background)
    return image if isinstance(image, Image.Image) else Image.fromarray(image[..., 0] if channels == 1 else image)


def load_pixels(
    source,
    channels: int,
    *,
    max_pixels: int = MAX_PIXELS,
    name: str | None = None,
    draft=None,
    crop=None,
    background=None,
) -> np.ndarray:
    """`open_image`'s pixels as an (H, W, channels) uint8 array (without a copy through PIL where libjpeg or simplejpeg
    decodes). `crop(width, height)`, given the decoded upright size, returns the (left, top, right, bottom) box to
    keep: only that box is returned, and libjpeg decodes little more than it."""
    image = _decode(source, channels, max_pixels, name, draft, crop, background)
    if isinstance(image, Image.Image):
        image = np.array(image)  # writable (torch.from_numpy wants that)
        return image[..., None] if image.ndim == 2 else image
    return image


def _decode(
    source, channels: int, max_pixels: int, name: str | None, draft, crop, background
) -> Image.Image | np.ndarray:
    path = Path(name or str(source))
    try:
        if isinstance(source, Record):  # a member of a shard: its bytes
            source = source.read()
        if not isinstance(source, (bytes, bytearray, memoryview)):  # read once, checked and decoded from memory
            source = read_image_file(path)
        decoder = jpeg_decoder()
        if len(source) == 0:
            raise DataError(f"{path}: empty file (0 bytes); remove it or replace it with the image")
        if decoder != "pillow" and source[:2] == b"\xff\xd8":
            fast = _fast_jpeg(source, path, channels, max_pixels, draft, crop, decoder)
            if fast is not None:  # else Pillow decodes it (and says what is wrong)
                return fast
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the limit below is ours
            image = Image.open(io.BytesIO(source))
        with image:
            w, h = image.size
            if w * h > max_pixels:  # checked on the header, before any pixel is decoded
                raise DataError(f"{path}: {w}x{h} pixels is over the limit of {max_pixels:,} ({BOMB_ADVICE})")
            need = _needed(draft, w, h, image.getexif().get(ORIENTATION, 1))
            gray = image.mode == "L" or (channels == 1 and need is not None)
            if need is not None and image.format == "JPEG":
                image.draft("L" if gray else "RGB", need)
            image.load()
            return _cut(to_channels(ImageOps.exif_transpose(image), channels, background), crop)
    except DataError:
        raise
    except Image.DecompressionBombError:
        # Pillow refused it first
        raise DataError(f"{path}: more pixels than the limit of {max_pixels:,} ({BOMB_ADVICE})") from None
    except FileNotFoundError:
        raise DataError(
            f"{path}: image file not found" + (" (a symbolic link to a file that is gone)" if path.is_symlink() else "")
        ) from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, not an image file") from None
    except PermissionError:
        raise DataError(f"{path}: permission denied; make the file readable") from None
    except UnidentifiedImageError:
        raise DataError(f"{path}: not an image (or in a format Pillow cannot read); remove it or convert it") from None
    # Pillow's decoders raise many types (OSError, SyntaxError, struct.error ...) on damaged files
    except Exception as err:
        if isinstance(err, OSError) and err.errno == errno.ELOOP:
            raise DataError(f"{path}: a symbolic link that loops; remove it or point it at the image") from None
        raise DataError(
            f"{path}: cannot decode the image ({first_line(err)}); the file is truncated or corrupt"
        ) from None


def load_image(
    path: str | os.PathLike,
    channels: int,
    size: int | tuple[int, int] | None = None,
    crop_pct: float = 1.0,
    *,
    max_pixels: int = MAX_PIXELS,
    background=None,
) -> np.ndarray:
    """(C, H, W) uint8 pixels of one file, transparent pixels on `background` (the model config's; None: white);
    resized and centre-cropped to `size` (one side, or (H, W)) when given."""
    image = open_image(path, channels, max_pixels=max_pixels, background=background)
    return image_pixels(image, channels, size, crop_pct, max_pixels=max_pixels, name=path)


def image_pixels(
    image: Image.Image,
    channels: int,
    size: int | tuple[int, int] | None = None,
    crop_pct: float = 1.0,
    *,
    max_pixels: int = MAX_PIXELS,
    name="image",
    background=None,
) -> np.ndarray:
    """(C, H, W) uint8 pixels of a PIL image of any mode (`name` says which in errors), as `load_image` makes them
    (transparent pixels on `background`)."""
    if image.width * image.height > max_pixels:
        raise DataError(
            f"{name}: {image.width}x{image.height} pixels is over the limit of {max_pixels:,} ({BOMB_ADVICE})"
        )
    image = to_channels(image, channels, background)
    if size is not None:
        w, h = scaled_size(*image.size, size, crop_pct)
        if w * h > max_pixels:  # a thin image (1 x 5,000,000) grows with its shorter side: refused before resizing
            raise DataError(
                f"{name}: {image.size[0]}x{image.size[1]} pixels would become {w}x{h} when resized for the model's "
                f"{'x'.join(map(str, as_hw(size)[::-1]))} input, over the limit of {max_pixels:,} pixels; crop it to a "
                "less extreme aspect ratio"
            )
        image = resize_center_crop(image, size, crop_pct)
    array = np.asarray(image, dtype=np.uint8)
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
