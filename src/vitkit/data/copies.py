"""Byte-identical copies of training images among other files and tar shard members (and in memory, by pixels), and
copies labelled otherwise: one image filed under two classes.

Splits are kept apart by folder, list or shard, not by content: an image copied from train/ into test/ is scored as
unseen. An image is read (and hashed) only where a training image has its size, so the check costs a `stat` per file
(a tar member's size is in its header). A Parquet row's size is not known without reading its row group: rows match
only themselves.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

import torch

from vitkit.errors import DataError
from vitkit.files import open_regular

from .images import Record, read_image_file
from .sources.tar import TarMember

CHECK_FILES = 200_000  # training files looked at; beyond that, not checked


def training_twins(training: list, files: list) -> list | None:
    """For each of `files` (paths or shard records), a training image byte-identical to it (itself, where it is one),
    else None; None for all: not checked (more than CHECK_FILES training images, or a Parquet row among them: not
    `comparable`). Missing or unreadable images match nothing."""
    if not files:  # nothing to compare: no training image is looked at
        return []
    if len(training) > CHECK_FILES or not all(map(comparable, (*training, *files))):
        return None
    training, files = ([p if isinstance(p, Record) else str(p) for p in images] for images in (training, files))
    digest = functools.cache(_digest)
    by_size: dict[int, list] = {}
    for item in training:
        if (n := _size(item)) is not None:
            by_size.setdefault(n, []).append(item)
    same = {_identity(item) for item in training}
    twins: list = []
    for item in files:
        if _identity(item) in same:
            twins.append(item)
            continue
        same_size = by_size.get(_size(item), [])
        key = digest(item) if same_size else None  # read only where a training image has its size
        twins.append(next((t for t in same_size if digest(t) == key), None) if key else None)
    return twins


def relabelled(items: list, labels: list) -> list[list[int]] | None:
    """Groups of indices of `items` (paths or shard records) that are byte-identical images with different `labels`
    (hashable, one per item): one image filed under two classes. Narrowed by size, then by the first HEAD_BYTES, then
    by every byte, each step only among images that share the last with one labelled otherwise. None: not checked
    (more than CHECK_FILES images, or a Parquet row among them)."""
    if len(items) > CHECK_FILES or not all(map(comparable, items)):
        return None
    groups = [list(range(len(items)))]
    for key in (_size, _head, _digest):
        groups = [same for group in groups for same in _labelled_otherwise(_by(key, items, group), labels)]
    return groups


def _by(key, items: list, group) -> list[list[int]]:
    """`group` (indices of `items`) by `key` of each item, those without one (unreadable) left out."""
    found: dict = {}
    for i in group:
        if (k := key(items[i])) is not None:
            found.setdefault(k, []).append(i)
    return list(found.values())


def relabelled_pixels(images: torch.Tensor, labels: list) -> list[list[int]]:
    """`relabelled` for images in memory (N, ...): the same pixels with different labels."""
    digests = _pixel_digests(images)
    return _labelled_otherwise(_by(lambda digest: digest, digests, range(len(digests))), labels)


def _labelled_otherwise(groups, labels: list) -> list[list[int]]:
    return [group for group in groups if len({labels[i] for i in group}) > 1]


def _pixel_digests(batch: torch.Tensor) -> list[bytes]:
    rows = batch.reshape(len(batch), -1).contiguous().numpy()
    return [hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in rows]


HEAD_BYTES = 4096  # two images of one size rarely share their first 4 KiB: the rest is read only where they do


def _head(item) -> bytes | None:
    """An image's first HEAD_BYTES (a shard member's, read whole: one image); None where it cannot be read."""
    try:
        if isinstance(item, Record):
            return item.read()[:HEAD_BYTES]
        with open_regular(item, DataError) as f:
            return f.read(HEAD_BYTES)
    except (OSError, DataError):
        return None


def _digest(item) -> str | None:
    """A digest of an image's bytes; None where it cannot be read (training's data.on_error deals with it)."""
    try:
        data = item.read() if isinstance(item, Record) else read_image_file(Path(item))
    except (OSError, DataError):
        return None
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def pixel_twins(training: torch.Tensor, images: torch.Tensor) -> list[int | None]:
    """For each of `images` (N, ...) in memory, the index of a training image with the same pixels, else None."""
    index = {d: i for i, d in enumerate(_pixel_digests(training))}
    return [index.get(d) for d in _pixel_digests(images)]


def comparable(item) -> bool:
    """Whether a copy of `item` can be found by its bytes: a file or a tar member, not a Parquet row."""
    return isinstance(item, TarMember) or not isinstance(item, Record)


def _size(item) -> int | None:
    """Bytes of an image known without reading it: a file's from stat, a tar member's from its header."""
    if isinstance(item, TarMember):
        return item.size
    if isinstance(item, Record):
        return None
    try:
        return os.stat(item).st_size
    except OSError:  # a missing file: training's data.on_error deals with it
        return None


def _identity(item):
    """The same image, however the path to it is spelt."""
    if isinstance(item, TarMember):
        return _realpath(item.shard), item.name
    return item if isinstance(item, Record) else os.path.realpath(item)


@functools.lru_cache(maxsize=4096)
def _realpath(shard: str) -> str:  # one per shard, not one per member
    return os.path.realpath(shard)
