"""MNIST-format IDX files (.gz or raw): the format of MNIST and Fashion-MNIST.

An IDX file is a big-endian header (two zero bytes, a type code, the number of dimensions, one
uint32 per dimension) followed by the array. Fashion-MNIST's four files are
train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import math
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import torch

from vitkit.errors import DataError, first_line
from vitkit.limits import check_expansion

from ..split import Split, held_out

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
SPLIT_PREFIX = {"train": "train", "test": "t10k"}
_DTYPES = {
    0x08: np.uint8,
    0x09: np.int8,
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def default_dir() -> Path:
    """Where Fashion-MNIST is looked for: $VITKIT_DATA, else Debian's dataset-fashion-mnist path."""
    return Path(os.environ.get("VITKIT_DATA") or DEFAULT_DIR)


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file (gzip-compressed when its name ends in .gz).

    The header is checked before the body is read: its size must fit the file (raw) or a bounded expansion of
    it (gzip, see vitkit.limits), so a lying header or a gzip bomb is refused without allocating it.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        stored = path.stat().st_size
        with opener(path, "rb") as f:
            head = f.read(4)
            if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in _DTYPES:
                raise DataError(f"{path}: not an IDX file (bad magic number)")
            ndim = head[3]
            dims = f.read(4 * ndim)
            if len(dims) < 4 * ndim:
                raise DataError(
                    f"{path}: the header promises {ndim} dimensions but the file ends first; it is truncated"
                )
            shape = struct.unpack(f">{ndim}I", dims)
            dtype = np.dtype(_DTYPES[head[2]])
            need = math.prod(shape) * dtype.itemsize  # Python ints: no overflow
            if opener is open and need != stored - 4 - 4 * ndim:
                raise DataError(
                    f"{path}: header says shape {shape} ({need:,} bytes) but the file holds {stored - 4 - 4 * ndim:,}; "
                    "it is truncated or corrupt"
                )
            check_expansion(path, need, stored, DataError, f"its header (shape {shape})")
            body = f.read(need + 1)
    except (OSError, EOFError, zlib.error) as err:
        raise DataError(f"{path}: cannot read IDX file ({first_line(err)})") from None
    if len(body) != need:
        raise DataError(
            f"{path}: header says shape {shape} ({need:,} bytes) but the file holds {len(body):,}; it is truncated or corrupt"
        )
    return np.frombuffer(body, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))


def find_idx(directory: Path, split: str, kind: str) -> Path | None:
    """The images or labels file of `split` in `directory`, compressed or not; None if absent."""
    prefix = SPLIT_PREFIX.get(split, split)
    ndim = 3 if kind == "images" else 1
    for name in (
        f"{prefix}-{kind}-idx{ndim}-ubyte.gz",
        f"{prefix}-{kind}-idx{ndim}-ubyte",
        f"{prefix}-{kind}.idx{ndim}-ubyte",
    ):
        if (directory / name).is_file():
            return directory / name
    return None


# blake2b (8 bytes) of Fashion-MNIST's 10,000 test labels: the data by its content, wherever it is (a copy in a folder
# whose name does not say "fashion", $VITKIT_DATA); MNIST's files have the same names and shapes
FASHION_MNIST_TEST_LABELS = "91602d8c52e4381e"


@functools.lru_cache(maxsize=16)
def is_fashion_mnist(directory: str) -> bool:
    """Whether the IDX files in `directory` are Fashion-MNIST's (their test labels are); False where they cannot be read."""
    path = find_idx(Path(directory), "test", "labels")
    try:
        return (
            path is not None
            and hashlib.blake2b(read_idx(path).tobytes(), digest_size=8).hexdigest() == FASHION_MNIST_TEST_LABELS
        )
    except DataError:
        return False


def is_idx_dir(directory: Path) -> bool:
    return directory.is_dir() and find_idx(directory, "train", "images") is not None


def load_idx_split(directory: str | os.PathLike, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, H, W) uint8, labels (N,) int64) of one split ('train' or 'test')."""
    directory = Path(directory)
    images_path, labels_path = find_idx(directory, split, "images"), find_idx(directory, split, "labels")
    if images_path is None or labels_path is None:
        if not directory.exists():
            raise DataError(missing_message(directory))
        raise DataError(
            f"{directory}: no IDX files for split {split!r} "
            f"(expected {SPLIT_PREFIX.get(split, split)}-images-idx3-ubyte[.gz] and -labels-idx1-ubyte[.gz])"
        )
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise DataError(
            f"{directory}: {images_path.name} {images.shape} and {labels_path.name} {labels.shape} do not match "
            "(expected N images of H x W and N labels)"
        )
    if not len(images) or 0 in images.shape:
        raise DataError(f"{images_path}: holds no images (shape {images.shape}); the file is empty or damaged")
    if images.dtype != np.uint8 or labels.dtype.kind not in "iu":
        raise DataError(
            f"{directory}: expected uint8 images and integer labels, found {images.dtype} and {labels.dtype}"
        )
    if len(labels) and labels.min() < 0:
        raise DataError(
            f"{labels_path}: label {int(labels.min())} at index {int(labels.argmin())}; labels must be 0, 1, 2, ..."
        )
    return images, labels.astype(np.int64)


def missing_message(directory: Path) -> str:
    return (
        f"Fashion-MNIST not found in {directory}: run 'sudo apt-get install dataset-fashion-mnist' "
        "(or 'make data'), or put train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
        f"t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz in {directory} (or set VITKIT_DATA), "
        "or pass another dataset with --data PATH"
    )


def open_idx(root: Path, split: str, channels: int, val_fraction: float, seed: int, rule: str = "stratified") -> Split:
    """`split` of the IDX files in `root`: test from the test files, train and val from the training files (val held
    out of them, or the test files where val_fraction is 0); `channels` 3 repeats the grey channel."""
    on_disk = "test" if split == "test" or (split == "val" and val_fraction == 0.0) else "train"
    images, labels = load_idx_split(root, on_disk)
    pixels = torch.from_numpy(images)[:, None]  # (N, 1, H, W)
    if channels == 3:
        pixels = pixels.expand(-1, 3, -1, -1).contiguous()
    n_classes = int(labels.max()) + 1
    fashion = n_classes <= 10 and ("fashion" in str(root).lower() or is_fashion_mnist(str(root)))
    names = list(FASHION_MNIST_CLASSES[:n_classes]) if fashion else [str(i) for i in range(n_classes)]
    full = Split(labels=torch.from_numpy(labels), class_names=names, images=pixels, source=str(root))
    if on_disk == "train" and val_fraction > 0.0:
        return held_out(full, split, val_fraction, seed, rule)
    return full
