"""Datasets shipped as shards: WebDataset-style tar files (tar.py), and Parquet files as Hugging Face `datasets`
writes them (parquet.py). This module finds a set's files, numbers its labels and cuts its splits.

    data.path=/data/imagenet/shard-{000000..001281}.tar     brace patterns, single files, or a folder of shards
    data.path=/data/cifar10/                                 train-*.parquet, test-*.parquet (or train/, data/ ...)

Files whose name starts with a split (`train-*`, `val-*`/`validation-*`, `test-*`), or that sit in a
split folder, form that split; otherwise a held-out part is cut as for image folders (data.val_fraction).
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

import numpy as np
import torch

from vitkit.errors import DataError
from vitkit.limits import check_class_index, is_class_index

from ..split import SPLIT_NAMES, MissingSplit, Split, held_out, label_order, multi_hot, split_folders
from .lists import Labelling, refuse_labelling
from .parquet import NO_LABEL, read_parquet
from .tar import TarMember, read_tars, refuse_unfinished

SHARD_SUFFIXES = (".tar", ".parquet")


# -- finding the shard files ---------------------------------------------------------------------
MAX_SHARD_NAMES = 100_000  # names a brace pattern may make: a billion samples at ten thousand a shard

MAX_RANGE_DIGITS = 18  # digits of a {FIRST..LAST} bound


def expand_braces(pattern: str) -> list[str]:
    """`shard-{000..002}.tar` -> shard-000.tar, shard-001.tar, shard-002.tar (zero padding kept); `{a,b}` lists too. A
    pattern naming more than MAX_SHARD_NAMES files is a DataError, found before they are all made."""
    names = []
    for name in _expand(pattern):
        if len(names) == MAX_SHARD_NAMES:
            raise DataError(_too_many(pattern))
        names.append(name)
    return names


def _too_many(pattern: str) -> str:
    return (
        f"{pattern[:120]}: the brace pattern names more than {MAX_SHARD_NAMES:,} shards; "
        "name fewer, or give the folder that holds them"
    )


def _expand(pattern: str):
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        yield pattern
        return
    head, tail, body = pattern[: match.start()], pattern[match.end() :], match.group(1)
    numbers = re.fullmatch(r"(\d+)\.\.(\d+)", body, flags=re.ASCII)
    if numbers:
        first, last = numbers.groups()
        if max(len(first), len(last)) > MAX_RANGE_DIGITS or int(last) - int(first) >= MAX_SHARD_NAMES:
            raise DataError(_too_many(pattern))
        width = len(first) if first.startswith("0") else 0
        options = (str(i).zfill(width) for i in range(int(first), int(last) + 1))
    else:
        options = body.split(",")
    for option in options:
        yield from _expand(head + option + tail)


COMPRESSED_SHARDS = (".tar.gz", ".tgz", ".tar.zst", ".tar.xz", ".tar.bz2")


def refuse_compressed(path: str | os.PathLike) -> None:
    """A DataError for compressed tar shards (a pattern naming them, or a folder holding them and no others): vitkit
    reads a sample by seeking into a plain tar, which a compressed one does not allow."""
    text = str(path)
    if "{" in text or "*" in text:
        names = expand_braces(text)
    elif Path(text).is_dir() and not _shard_files(Path(text)):
        names = [str(f) for f in Path(text).iterdir() if f.is_file()]
    else:
        return
    packed = [n for n in names if n.lower().endswith(COMPRESSED_SHARDS)]
    if packed:
        raise DataError(
            f"{path}: compressed tar shards ({Path(packed[0]).name}{', ...' * (len(packed) > 1)}), which vitkit does not "
            "read (it seeks to each sample); decompress them in place (e.g. gunzip *.tar.gz) and give the .tar files"
        )


def is_sharded(path: str | os.PathLike) -> bool:
    """Whether `path` names shards: a brace pattern or glob, a .tar / .parquet file, or a folder of them."""
    text = str(path)
    if "{" in text or "*" in text:
        return any(name.endswith(SHARD_SUFFIXES) for name in expand_braces(text))
    p = Path(text)
    if p.is_file():
        return p.suffix.lower() in SHARD_SUFFIXES
    return p.is_dir() and bool(_shard_files(p))


def _shard_files(root: Path) -> list[Path]:
    """Shard files of a folder: directly in it, in data/, or in split folders (train/, val/, test/ ...)."""
    found = []
    for folder in [root, root / "data", *split_folders(root).values()]:
        if folder.is_dir():
            found += sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in SHARD_SUFFIXES)
    return found


def _split_of(path: Path) -> str | None:
    """The split a shard belongs to by its folder or name prefix (train-00000-of-00004.parquet), if any."""
    for split, names in SPLIT_NAMES.items():
        if path.parent.name.lower() in names or re.match(rf"({'|'.join(names)})[-_.]", path.name.lower()):
            return split
    return None


def names_splits(path: str | os.PathLike) -> bool:
    """Whether the shards at `path` say which split they belong to (by folder or name prefix), else they are one set."""
    return any(_split_of(f) for f in shard_files(path))


def shard_files(path: str | os.PathLike) -> list[Path]:
    text = str(path)
    if "{" in text or "*" in text:
        files = [Path(f) for name in expand_braces(text) for f in (sorted(glob.glob(name)) if "*" in name else [name])]
        missing = [f for f in files if not f.is_file()]
        if missing:
            raise DataError(
                f"{missing[0]}: no such shard ({len(missing)} of the {len(files)} files of {text} are missing)"
            )
    else:
        p = Path(text)
        files = [p] if p.is_file() else _shard_files(p)
    for folder in sorted({f.parent for f in files}):
        refuse_unfinished(folder)
    return files


# -- the split ------------------------------------------------------------------------------------
def _labels(
    raw: list[str], known: list[str] | None, source: str, records: list, origin: str = "classes.txt"
) -> tuple[torch.Tensor, list[str]]:
    """Class indices and names. With `known` (classes.txt) an integer label is an index into it and a name one of its
    names; without it integer labels are indices named by their numbers, and names are sorted. A label that fits
    neither, labels that mix indices and names with no classes.txt, or a sample without a label among labelled ones,
    is one error naming the sample (`records[i]`)."""
    if all(r == "" for r in raw):
        return torch.zeros(len(raw), dtype=torch.long), ["unlabeled"]
    if any(isinstance(r, tuple) for r in raw):  # lists of labels: a multi-label set
        return _label_sets(raw, known, source, records, origin)
    if "" in raw:  # one shard without labels among labelled ones
        raise DataError(
            f"{records[raw.index('')]}: has no .cls or .json label, where other samples have one; every sample "
            "needs one (or none has)"
        )
    numeric = [is_class_index(r) for r in raw]
    for r, record, number in zip(raw, records, numeric):
        if number:  # before a list of names is made up to the largest index
            check_class_index(r, str(record), DataError)
    if all(numeric) or known:
        names = list(known) if known else [str(i) for i in range(max(int(r) for r in raw) + 1)]
        index = {name: i for i, name in enumerate(names)}
        values = [int(r) if number else index.get(r, -2) for r, number in zip(raw, numeric)]
        # -1: no label (Hugging Face's)
        bad = next((i for i, v in enumerate(values) if v < -1 or v >= len(names)), None)
        if bad is not None:
            shown = ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")
            what = (
                f"class index {raw[bad]}, outside 0 .. {len(names) - 1}"
                if numeric[bad]
                else f"class {raw[bad]!r}, not one of"
            )
            raise DataError(
                f"{records[bad]}: label {what} the {len(names)} classes{f' of {origin}' if known else ''} ({shown}); "
                "fix the label" + ("" if known else ", or list the class names in classes.txt beside the shards")
            )
        return torch.tensor(values, dtype=torch.long), names
    if any(numeric):
        i, j = numeric.index(True), numeric.index(False)
        raise DataError(
            f"{source}: labels mix class indices ({raw[i]!r} at {records[i]}) and class names ({raw[j]!r} at "
            f"{records[j]}); use one kind, or list the class names in classes.txt beside the shards (an index "
            "then counts in it)"
        )
    names = sorted(set(raw), key=label_order)
    index = {name: i for i, name in enumerate(names)}
    return torch.tensor([index[r] for r in raw], dtype=torch.long), names


def _label_sets(
    raw: list, known: list[str] | None, source: str, records: list, origin: str
) -> tuple[torch.Tensor, list[str]]:
    """(N, K) multi-hot labels and class names of samples that each have a list of labels (a .json "labels" list, a
    Parquet Sequence(ClassLabel) column); indices and names read as `_labels` reads one label."""
    single = next((i for i, r in enumerate(raw) if not isinstance(r, tuple)), None)
    if single is not None:
        several = next(i for i, r in enumerate(raw) if isinstance(r, tuple))
        what = "no label" if raw[single] in ("", NO_LABEL) else f"one label ({raw[single]!r})"
        raise DataError(
            f"{records[single]}: has {what}, where {records[several]} has a list of labels; give every sample a list "
            "of its labels ([] for none)"
        )
    flat = [label for labels in raw for label in labels]
    if not known and not all(map(is_class_index, flat)) and any(map(is_class_index, flat)):
        raise DataError(
            f"{source}: labels mix class indices and class names; use one kind, or list the class names in "
            "classes.txt beside the shards (an index then counts in it)"
        )
    if known:
        names = list(known)
    elif flat and all(map(is_class_index, flat)):
        names = [str(i) for i in range(max(int(label) for label in flat) + 1)]
    else:
        names = sorted(set(flat), key=label_order)
    index = {name: i for i, name in enumerate(names)}
    rows = []
    for labels, record in zip(raw, records):
        row = [int(label) if is_class_index(label) else index.get(label, -1) for label in labels]
        bad = next((label for label, i in zip(labels, row) if not 0 <= i < len(names)), None)
        if bad is not None:
            raise DataError(
                f"{record}: label {bad!r} is not one of the {len(names)} classes"
                f"{f' of {origin}' if known else ''}; fix the label"
            )
        rows.append(row)
    return multi_hot(rows, len(names)), names


def open_sharded(
    path: str | os.PathLike,
    split: str,
    *,
    val_fraction: float = 0.1,
    seed: int = 0,
    rule: str = "stratified",
    labelling: Labelling = Labelling(),
) -> Split:
    """`split` of the shards at `path` (a pattern, a file or a folder); val held out by `rule` where none is named.
    `labelling.label_column`: a Parquet file's column of the labels (CIFAR-100's coarse_label), where not the first it holds."""
    files = shard_files(path)
    if not files:
        raise DataError(f"{path}: no .tar or .parquet shards found")
    kinds = {f.suffix.lower() for f in files}
    if len(kinds) > 1:
        raise DataError(f"{path}: holds both tar and Parquet shards; point data.path at one kind")
    if ".parquet" in kinds:
        grouping = Labelling(group_column=labelling.group_column, name_pattern=labelling.name_pattern)
        refuse_labelling(path, "Parquet files, which hold no group column and label their images", grouping)
        # every file: the classes are the same in every split
        records, raw, known = read_parquet(files, labelling.label_column)
        origin = "the Parquet schema's class names (ClassLabel)"
    else:
        refuse_labelling(path, "tar shards, labelled their own way", labelling)
        records, raw, known = read_tars(files)
        origin = "classes.txt"
    labels, names = _labels(raw, known, str(path), records, origin)
    return _labelled(_open_split(path, split, files, records, labels, names, (val_fraction, seed, rule)), split)


def _labelled(part: Split, split: str) -> Split:
    """`part` where every sample has a label; an unlabelled split (Hugging Face's -1, or null, for every row of a
    test split) or an unlabelled sample is one error naming it."""
    missing = (part.labels < 0).nonzero().flatten()
    if not len(missing):
        return part
    if len(missing) == len(part):
        raise DataError(
            f"{part.source}: the {split} split has no labels (every label is -1 or null, as Hugging Face writes an "
            "unlabelled test split); score a labelled split instead (eval: --split val; fewshot, knn, linear-probe: --test-split val)"
        )
    raise DataError(
        f"{part.paths[int(missing[0])]}: has no label (-1 or null; {len(missing)} of the {len(part)} samples of the "
        f"{split} split); label them, or leave them out of the files"
    )


def _open_split(
    path,
    split: str,
    files: list[Path],
    records: list,
    labels: torch.Tensor,
    names: list[str],
    cut: tuple[float, int, str],
) -> Split:
    """`split` of the samples `records` of shard `files`, cut by their file names, folders or a held-out part (`cut`:
    its val_fraction, seed and rule)."""
    val_fraction = cut[0]
    by_split = {s: [f for f in files if _split_of(f) == s] for s in SPLIT_NAMES}
    named = {s: fs for s, fs in by_split.items() if fs}
    owner = np.array([str(Path(r.shard if isinstance(r, TarMember) else r.file)) for r in records])
    source = str(path)
    full = Split(labels=labels, class_names=names, paths=records, source=source)
    if not named:  # one set: val (and test) held out of it, unless val_fraction=0 asks to train on all of it
        return full if split == "train" and val_fraction == 0.0 else held_out(full, split, *cut)
    holds_out = "train" in named and "val" not in named and val_fraction > 0.0
    if split in named and not (split == "train" and holds_out):
        return _files_subset(full, owner, named[split], f"{source} ({split})")
    if "train" in named and split in ("train", "val"):
        train = _files_subset(full, owner, named["train"], f"{source} (train)")
        return held_out(train, split, *cut)
    available = [s for s in SPLIT_NAMES if s in named or (s == "val" and "train" in named and val_fraction > 0.0)]
    raise MissingSplit(
        f"{path}: has no {split!r} shards (it has {', '.join(available)}); name them {split}-*.tar|parquet or put them "
        f"in {split}/",
        available,
    )


def _files_subset(full: Split, owner: np.ndarray, files: list[Path], source: str) -> Split:
    wanted = {str(f) for f in files}
    part = full.subset(np.array([i for i, o in enumerate(owner) if o in wanted], dtype=np.int64))
    part.source = source
    return part
