"""Byte-identical copies of training images among other files.

Splits are kept apart by folder or list, not by content: an image copied from train/ into test/ is scored as unseen.
A file is read (and hashed) only where a training file has its size, so the check costs a `stat` per file.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

CHECK_FILES = 200_000  # training files looked at; beyond that, not checked


def training_twins(training: list[str], files: list[str]) -> list[str | None] | None:
    """For each of `files`, a training file byte-identical to it (itself, where it is one), else None; None for all:
    not checked (more than CHECK_FILES training files). Missing or unreadable files match nothing."""
    if not files:  # nothing to compare: no training file is looked at
        return []
    if len(training) > CHECK_FILES:
        return None

    def size(path: str) -> int | None:
        try:
            return os.stat(path).st_size
        except OSError:  # a missing file: training's data.on_error deals with it
            return None

    @functools.lru_cache(maxsize=None)
    def digest(path: str) -> str | None:
        try:
            return hashlib.blake2b(Path(path).read_bytes(), digest_size=16).hexdigest()
        except OSError:
            return None

    by_size: dict[int, list[str]] = {}
    for path in training:
        if (n := size(path)) is not None:
            by_size.setdefault(n, []).append(path)
    same_path = {os.path.realpath(p) for p in training}
    twins: list[str | None] = []
    for path in files:
        if os.path.realpath(path) in same_path:
            twins.append(path)
            continue
        same_size = by_size.get(size(path), [])
        key = digest(path) if same_size else None  # read only where a training file has its size
        twins.append(next((t for t in same_size if digest(t) == key), None) if key else None)
    return twins
