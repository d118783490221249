"""Bounds on what a small input may make vitkit allocate: compressed data (a .npz, a gzipped IDX file) that
expands far beyond its size, and headers that promise more than the file holds, are refused from their
declared sizes, before anything is allocated or decompressed."""

from __future__ import annotations

import os

MAX_EXPANSION = 64  # weights and pixels compress a few times at most; a decompression bomb, thousands of times
MIN_BUDGET = 256 << 20  # any file may expand to this much (small files of zeros compress well and are harmless)


def check_expansion(path: str | os.PathLike, declared: int, stored: int, error: type[Exception], what: str) -> None:
    """Raise `error` naming `path` if `declared` uncompressed bytes are more than `stored` bytes can legitimately hold."""
    budget = max(MAX_EXPANSION * stored, MIN_BUDGET)
    if declared > budget:
        raise error(
            f"{path}: {what} declares {declared:,} bytes uncompressed from {stored:,} bytes on disk, more than "
            f"{MAX_EXPANSION}x (a decompression bomb, or a damaged file); vitkit refuses it before decompressing"
        )
