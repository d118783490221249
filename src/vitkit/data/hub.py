"""Datasets on the Hugging Face Hub, named as Hugging Face names them for pandas and DuckDB:

    hf://datasets/ORG/NAME                 its Parquet files (data/train-*.parquet ...), at main
    hf://datasets/ORG/NAME@REVISION        at a branch, tag or commit
    hf://datasets/ORG/NAME/CONFIG          one configuration's folder of a dataset that has several

huggingface_hub fetches only the Parquet files into its own cache (`vitkit.hfcache`), and the data is read from there
as a local folder of Parquet files. A dataset kept as images or a script at main is read from the Parquet files the
Hub converts it to (the refs/convert/parquet revision, CONFIG/SPLIT/NNNN.parquet).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from vitkit.errors import DataError
from vitkit.hfcache import require, snapshot

from .split import SPLIT_NAMES

PREFIX = "hf://datasets/"
CONVERTED = "refs/convert/parquet"  # the Hub's Parquet conversion of a dataset kept otherwise
_NAME = re.compile(r"([A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@([^/]+))?((?:/[\w.-]+)*)/?")


def is_hub_dataset(given: str | os.PathLike | None) -> bool:
    return given is not None and os.fspath(given).startswith(PREFIX)


def dataset_folder(given: str) -> Path:
    """The local folder of the Parquet files hub name `given` names, fetched into huggingface_hub's cache where online
    and missing: the one folder that holds them, or the folder of its split folders."""
    match = _NAME.fullmatch(given[len(PREFIX) :])
    if match is None:
        raise DataError(
            f"{given}: not a dataset hub name; write hf://datasets/ORG/NAME, with @REVISION or /CONFIG where needed"
        )
    repo, revision, sub = match.group(1), match.group(2), match.group(3).strip("/")
    require(given, "a dataset hub name", DataError)
    patterns = [f"{sub}/*.parquet" if sub else "*.parquet"]
    root = snapshot(given, repo, revision=revision, patterns=patterns, error=DataError, repo_type="dataset")
    if revision is None and not any((root / sub).rglob("*.parquet")):
        root = snapshot(given, repo, revision=CONVERTED, patterns=patterns, error=DataError, repo_type="dataset")
    files = sorted((root / sub).rglob("*.parquet"))
    if not files:
        raise DataError(
            f"{given}: {repo} holds no Parquet files{f' below {sub}/' if sub else ''}, at "
            f"{revision or f'main or {CONVERTED}'}; name a configuration's folder (hf://datasets/{repo}/CONFIG)"
        )
    return _holding(given, root / sub, {f.parent for f in files})


def _holding(given: str, top: Path, folders: set[Path]) -> Path:
    """The folder to read of the `folders` that hold a dataset's Parquet files below `top`: the one, or the folder
    whose folders are all named for splits (CONFIG/train/, CONFIG/test/); several configurations are one error."""
    if len(folders) == 1:
        return folders.pop()
    parents = {folder.parent for folder in folders}
    split_names = {name for names in SPLIT_NAMES.values() for name in names}
    if len(parents) == 1 and all(folder.name.lower() in split_names for folder in folders):
        return parents.pop()
    configs = sorted({folder.relative_to(top).parts[0] for folder in folders if folder != top})
    raise DataError(
        f"{given}: holds several configurations ({', '.join(configs[:6])}); name one: "
        f"{given.rstrip('/')}/{configs[0] if configs else 'CONFIG'}"
    )
