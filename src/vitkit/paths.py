"""Paths a user gives: local files only. vitkit never downloads (no model hubs, no dataset URLs), so a URL or a
hub name is refused in one line saying so, instead of a "missing file" that `Path` has already mangled
('https://host/x' folds into 'https:/host/x')."""

from __future__ import annotations

import os
import re
from pathlib import Path

from vitkit.errors import VitkitError

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def local_path(text: str | os.PathLike, error: type[VitkitError] = VitkitError) -> Path:
    """`text` as a path; a URL is an `error` naming it."""
    if _URL.match(str(text)):
        raise error(f"{text}: a URL; vitkit reads local files and never downloads: save the file and pass its path")
    return Path(text)


def missing(text: str | os.PathLike) -> str:
    """The message for a path that is not there, with a hint where it reads as a model hub name ('owner/name')."""
    parts = Path(text).parts
    if (
        len(parts) == 2
        and not Path(parts[0]).exists()
        and not str(text).startswith((".", "/", "~"))
        and "." not in parts[0]
    ):
        return (
            f"{text}: no such file or directory; vitkit never downloads, so a model hub name is not a checkpoint: "
            "download it first (e.g. huggingface-cli download NAME --local-dir DIR) and pass DIR or the file"
        )
    return f"{text}: no such file or directory"
