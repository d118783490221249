"""Paths a user gives: local files, never URLs (a model hub name, hf-hub:ORG/NAME, is the checkpoint readers' own:
vitkit.checkpoint.hub). A URL is refused in one line saying so, instead of a "missing file" that `Path` has already
mangled ('https://host/x' folds into 'https:/host/x'); a missing ORG/NAME gets the hub name's spelling."""

from __future__ import annotations

import os
import re
from pathlib import Path

from vitkit.errors import VitkitError

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def local_path(text: str | os.PathLike, error: type[VitkitError] = VitkitError) -> Path:
    """`text` as a path; a URL is an `error` naming it."""
    if _URL.match(str(text)):
        dataset = re.search(r"huggingface\.co/datasets/([^/?#]+/[^/?#]+)", str(text))
        hub = (
            f"a dataset on the Hub: hf://datasets/{dataset.group(1)}"
            if dataset
            else "a model on the Hugging Face hub: hf-hub:ORG/NAME"
        )
        raise error(f"{text}: a URL; vitkit reads local files, never URLs: save the file and pass its path ({hub})")
    return Path(text)


def cache_root() -> Path:
    """vitkit's cache folder on this machine: $VITKIT_CACHE, else $XDG_CACHE_HOME/vitkit (~/.cache/vitkit): native
    code built at first use (vitkit.kernels), measurements kept per machine (vitkit.train.precision)."""
    root = os.environ.get("VITKIT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"), "vitkit"
    )
    return Path(root)


def missing(text: str | os.PathLike) -> str:
    """The message for a path that is not there, with a hint where it reads as a model hub name ('owner/name')."""
    parts = Path(text).parts
    if (
        len(parts) == 2
        and not Path(parts[0]).exists()
        and not str(text).startswith((".", "/", "~"))
        and "." not in parts[0]
    ):
        return f"{text}: no such file or directory; for the model on the Hugging Face hub, write hf-hub:{text}"
    return f"{text}: no such file or directory"
