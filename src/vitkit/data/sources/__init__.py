"""Where images come from: IDX files, an image-folder tree, a CSV/JSONL list, shards (tar, Parquet) or synthetic data
(which `DataSpec` makes by name), one module per kind; this module is the one dispatcher over a path.

`open_split(path, split)` returns a `Split`: labels, class names, and either the pixels already in
memory (IDX, synthetic) or the files to read (folders, lists). A "val" split a source does not have on
disk is cut from its training images with a seeded, reproducible permutation, each class keeping its share
(split.stratified_split). "test" is only ever data
the source keeps apart (IDX test files, a test/ folder): a source without one raises MissingSplit.
"""

from __future__ import annotations

import os
from pathlib import Path

from vitkit.errors import DataError
from vitkit.files import open_regular

from ..images import IMAGE_SUFFIXES
from ..split import SPLITS, MissingSplit, Split, held_out, split_folders, warn_groups_apart
from . import idx
from .folder import class_dirs, folder_classes, read_folder
from .lists import (
    METADATA_LISTS,
    Labelling,
    UnlabelledList,
    list_parts,
    listed_split,
    metadata_file,
    on_train_classes,
    read_list,
    refuse_labelling,
    split_lists,
)
from .shards import is_sharded, names_splits, open_sharded, refuse_compressed
from .tar import finish_writing, write_tar_shards, written_by_shards


def data_root(path: str | os.PathLike) -> Path:
    """Where the data at `path` is read from: `path`, or the one list in a folder whose folders name no classes
    (Kaggle's layout: train.csv or labels.csv beside train/ or train_images/, which hold the images without class
    folders). Several such lists are an error naming them."""
    root = Path(path)
    if not root.is_dir() or idx.is_idx_dir(root) or split_lists(root) or not _unlabelled(root):
        return root
    listed = metadata_file(root)
    # Hugging Face's metadata.csv labels the folder it is in, which reads as a folder
    return listed if listed is not None and listed.name not in METADATA_LISTS else root


def _unlabelled(root: Path) -> bool:
    """Whether a folder's images are in fewer than two classes as a folder: its training folder (or itself) holds
    one class folder or none and no list labelling its images."""
    train = split_folders(root).get("train", root)
    return len(class_dirs(train)) < 2 and (train == root or metadata_file(train) is None)


def available_splits(path: str | os.PathLike | None, val_fraction: float) -> list[str]:
    """The splits `open_split` can open for the data at `path`, in SPLITS order."""
    root = idx.default_dir() if path is None else data_root(path)
    held = ["val"] if val_fraction > 0.0 else []
    if root.is_dir() and idx.is_idx_dir(root):
        return ["train", "val", "test"]
    on_disk = list_parts(root) if root.is_file() else list(split_folders(root))
    if not on_disk and (lists := split_lists(root)):
        on_disk = list(lists)
    if not on_disk:
        return ["train", *held]
    if "train" in on_disk and "val" not in on_disk:
        on_disk += held
    return [s for s in SPLITS if s in on_disk]


def is_flat(path: str | os.PathLike) -> bool:
    """Whether the data at `path` is one set of images without splits of its own: a list file, a folder with no split
    folders, lists by split or IDX files, or shards none of which is named for a split."""
    if is_sharded(path):
        return not names_splits(path)
    root = data_root(path)
    if root.is_file():
        return not list_parts(root)
    return not (root.is_dir() and (idx.is_idx_dir(root) or split_folders(root) or split_lists(root)))


def _missing(root: Path, split: str, val_fraction: float) -> MissingSplit:
    available = available_splits(root, val_fraction)
    return MissingSplit(f"{root}: has no {split!r} split (it has {', '.join(available)})", available)


def open_split(
    path: str | os.PathLike | None,
    split: str,
    *,
    channels: int,
    val_fraction: float = 0.1,
    seed: int = 0,
    rule: str = "stratified",
    labelling: Labelling = Labelling(),
) -> Split:
    """Open `split` ("train", "val" or "test") of the dataset at `path` (None: Fashion-MNIST's default place); a val
    split the data does not have is held out of its training images by `rule` (split.SPLIT_RULES). `labelling`:
    how the data config says to read labels and groups the data does not tell (data.label_column, data.group_column,
    data.name_pattern)."""
    if split not in SPLITS:
        raise DataError(f"data split {split!r}: expected one of {', '.join(SPLITS)}")
    if path is not None and is_sharded(path):
        return open_sharded(path, split, val_fraction=val_fraction, seed=seed, rule=rule, labelling=labelling)
    if path is not None:
        refuse_compressed(path)
    root = idx.default_dir() if path is None else Path(path)
    if not root.exists():
        raise DataError(idx.missing_message(root) if path is None else f"{root}: no such file or directory (data.path)")
    root = root if path is None else data_root(root)
    if root.is_file():
        _refuse_archive(root)
        if parts := list_parts(root):
            return _listed_part(root, parts, split, (val_fraction, seed, rule), labelling)
        if split == "test":
            raise _missing(root, split, val_fraction)
        return held_out(read_list(root, alone=True, labelling=labelling), split, val_fraction, seed, rule)
    if idx.is_idx_dir(root):
        refuse_labelling(root, "IDX files, labelled their own way", labelling)
        return idx.open_idx(root, split, channels, val_fraction, seed, rule)
    split_dirs = split_folders(root)
    if split_dirs:
        return _folder_split(root, split_dirs, split, (val_fraction, seed, rule), labelling)
    if lists := split_lists(root):
        return _split_of_lists(root, lists, split, (val_fraction, seed, rule), labelling)
    if path is None:
        raise DataError(idx.missing_message(root))
    if split == "test":  # a flat folder or a list has no images kept apart for testing
        raise _missing(root, split, val_fraction)
    return held_out(read_folder(root, labelling=labelling), split, val_fraction, seed, rule)


def _split_of_lists(
    root: Path, lists: dict[str, Path], split: str, cut: tuple[float, int, str], labelling: Labelling
) -> Split:
    """`split` of a folder of lists by split (train.csv, val.csv ...); `cut`: (val_fraction, seed, rule) of a val
    held out of train's."""
    try:
        part = listed_split(lists, split, *cut, labelling=labelling)
    except UnlabelledList:
        if split == "train":
            raise
        raise MissingSplit(
            f"{root}: has no labelled {split!r} split ({lists[split].name} names images without labels, as a "
            "competition's test list does; vitkit predict classifies them)",
            [s for s in available_splits(root, cut[0]) if s != split],
        ) from None
    if part is None:
        raise _missing(root, split, cut[0])
    return part


def _listed_part(root: Path, parts: list[str], split: str, cut: tuple[float, int, str], labelling: Labelling) -> Split:
    """`split` of a list with a split column (`parts`: the splits it names): its rows of that split, val held out of
    train's where it names no val, val and test labelled by train's classes."""
    if "train" not in parts:
        raise DataError(f"{root}: its split column names no training image; mark the images to train on train")
    holds_out = "val" not in parts and cut[0] > 0.0
    train = read_list(root, part="train", labelling=labelling)
    if split == "train" or split == "val" and holds_out:
        return held_out(train, split, *cut) if holds_out else train
    if split not in parts:
        raise _missing(root, split, cut[0])
    listed = read_list(root, train.class_names, part=split, labelling=labelling)
    warn_groups_apart(train, listed, f"mark each {listed.group_column}'s images with one split")
    return on_train_classes(listed, train.class_names, str(root))


def _folder_split(
    root: Path, split_dirs: dict[str, Path], split: str, cut: tuple[float, int, str], labelling: Labelling
) -> Split:
    """`split` of a folder of split folders (train/, val/, test/): its own folder, or held out of train/; `cut`:
    (val_fraction, seed, rule) of that hold-out."""
    # without a val/ folder, val is held out of train/ and "train" is the rest, as for IDX files
    holds_out = "train" in split_dirs and "val" not in split_dirs and cut[0] > 0.0
    if split in split_dirs and not (split == "train" and holds_out):
        reference = split_dirs.get("train") if split != "train" else None  # val/test must hold train's classes
        classes = folder_classes(reference, labelling) if reference else None
        return read_folder(split_dirs[split], classes=classes, labelling=labelling)
    if "train" in split_dirs and split != "test":
        return held_out(read_folder(split_dirs["train"], labelling=labelling), split, *cut)
    raise _missing(root, split, cut[0])


CHECKPOINT_SUFFIXES = (".npz", ".safetensors", ".pth", ".pt", ".bin", ".ckpt", ".onnx")

ARCHIVES = (  # (first bytes, what, how to unpack it): archives of an image folder, which vitkit reads unpacked
    (b"PK\x03\x04", "a zip archive", "unzip {path} -d DIR"),
    (b"\x1f\x8b", "a gzip-compressed file", "tar -xzf {path} -C DIR"),
    (b"BZh", "a bzip2-compressed file", "tar -xjf {path} -C DIR"),
    (b"\xfd7zXZ\x00", "an xz-compressed file", "tar -xJf {path} -C DIR"),
    (b"(\xb5/\xfd", "a zstd-compressed file", "tar --zstd -xf {path} -C DIR"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive", "7z x {path} -oDIR"),
)


def _refuse_archive(path: Path) -> None:
    """One error for an archive given as data (before: "cannot read the list (utf-8 codec ...)")."""
    try:
        with open_regular(path, DataError) as f:
            head = f.read(8)
    except OSError:
        return  # reading it as a list says why
    data = "data is an image folder, a .csv/.jsonl list, tar shards or Parquet files"
    if path.suffix.lower() in CHECKPOINT_SUFFIXES:  # an .npz is a zip too
        raise DataError(f"{path}: a model checkpoint ({path.suffix}), not data; {data} (vitkit info reads checkpoints)")
    if head.startswith((b"\xff\xd8\xff", b"\x89PNG\r\n")) or path.suffix.lower() in IMAGE_SUFFIXES:
        raise DataError(f"{path}: one image, not data; {data} (vitkit predict classifies one image)")
    for magic, what, unpack in ARCHIVES:
        if head.startswith(magic):
            raise DataError(
                f"{path}: {what}, which vitkit does not read; unpack it ({unpack.format(path=path)}) and give the "
                "folder, or write tar shards from that folder with vitkit data DIR --to-shards SHARDS"
            )


__all__ = [
    "available_splits",
    "data_root",
    "finish_writing",
    "is_flat",
    "open_sharded",
    "open_split",
    "write_tar_shards",
    "written_by_shards",
]
