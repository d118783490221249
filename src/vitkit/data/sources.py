"""Where images come from: IDX files, an image-folder tree, a CSV/JSONL list, shards (tar, Parquet: shards.py) or synthetic data.

`open_split(path, split)` returns a `Split`: labels, class names, and either the pixels already in
memory (IDX, synthetic) or the files to read (folders, lists). A "val" split a source does not have on
disk is cut from its training images with a seeded, reproducible permutation. "test" is only ever data
the source keeps apart (IDX test files, a test/ folder): a source without one raises MissingSplit.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import unicodedata
import warnings
from dataclasses import dataclass, replace
from itertools import zip_longest
from pathlib import Path

import numpy as np
import torch

from vitkit.errors import DataError, first_line, has_control_characters

from . import idx
from .images import IMAGE_SUFFIXES, image_files, is_hidden, is_image_file

SPLITS = ("train", "val", "test")
SPLIT_NAMES = {
    "train": ("train",),
    "val": ("val", "validation", "valid", "dev"),
    "test": ("test",),
}  # folders, files; any case


@dataclass
class Split:
    """One split of a dataset. `images` is (N, C, H, W) uint8 when in memory, else `paths` are read on use:
    image files, or records inside shards (`images.Record`: a tar member, a Parquet row)."""

    labels: torch.Tensor  # (N,) int64
    class_names: list[str]
    images: torch.Tensor | None = None
    paths: list[Path] | None = None
    source: str = ""
    selection: str = "all"  # which of the source's images: "all", or the part of a seeded held-out cut
    held_out: bool = False  # the part of a seeded cut kept apart as "val" (not "all", not "the rest")

    def __post_init__(self) -> None:
        bad = next((name for name in self.class_names if has_control_characters(name)), None)
        if (
            bad is not None
        ):  # printed raw, a folder named "a\x1b[31mb" recoloured the terminal and a newline split lines
            raise DataError(
                f"{self.source or 'the data'}: class name {bad!r} holds control characters (a newline, tab or "
                "terminal escape); rename it"
            )

    def describe(self) -> dict:
        """Exactly which images these are: where from, which part, how many, and a digest of the images themselves."""
        return {"source": self.source, "selection": self.selection, "n": len(self), "digest": self.digest()}

    def digest(self) -> str:
        """A fingerprint of these images and their classes: the files' names below `source` (so the same data moved
        elsewhere matches), or the pixels where they are in memory. Two cuts of a folder that changed differ."""
        h = hashlib.blake2b(digest_size=8)
        h.update("\n".join(self.class_names).encode(errors="surrogateescape") + b"\0")
        h.update(self.labels.numpy().astype("<i8").tobytes())
        if self.images is not None:
            h.update(self.images.numpy().tobytes())
        elif self.paths is not None:
            prefix = self.source.rstrip(os.sep) + os.sep
            names = (n[len(prefix) :] if n.startswith(prefix) else n for n in map(str, self.paths))
            h.update("\n".join(names).encode(errors="surrogateescape"))
        return h.hexdigest()

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index: np.ndarray) -> Split:
        t = torch.as_tensor(index, dtype=torch.long)
        return Split(
            labels=self.labels[t],
            class_names=self.class_names,
            images=None if self.images is None else self.images[t],
            paths=None if self.paths is None else [self.paths[i] for i in index],
            source=self.source,
            selection=self.selection,
            held_out=self.held_out,
        )


def where_from(record: dict, *, all_said: bool = True) -> str:
    """ "SOURCE (SELECTION)" of a split's `describe()` record, in one parenthesis where the source already ends in one
    (shards named by their split: "DIR (train)"); just "SOURCE" for all of it unless `all_said`."""
    source, selection = record["source"], record.get("selection", "all")
    if selection == "all" and not all_said:
        return source
    return f"{source[:-1]}, {selection})" if source.endswith(")") else f"{source} ({selection})"


def described(record: dict) -> str:
    """ "N images (source, selection)": a split's `describe()` record as reports and errors print it."""
    return f"{record['n']:,} images ({record['source']}, {record['selection']})"


def same_images(before, now: dict) -> bool:
    """Whether a recorded `describe()` and today's name the same images: source, cut and count, and the digest where
    both have one (records written before vitkit kept digests have none)."""
    if not isinstance(before, dict):
        return False
    keys = ("source", "selection", "n") + (("digest",) if "digest" in before and "digest" in now else ())
    return all(before.get(k) == now.get(k) for k in keys)


def seeded_split(n: int, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, val) indices: a seeded permutation of range(n), the last val_fraction of it for val."""
    order = np.random.default_rng(seed).permutation(n)
    n_val = int(round(n * val_fraction))
    return np.sort(order[: n - n_val]), np.sort(order[n - n_val :])


def synthetic(
    num_classes: int, size: int, channels: int, image_size: int, seed: int = 0, split: str = "train"
) -> Split:
    """A learnable toy dataset: each class is a fixed random pattern (from `seed`) plus pixel noise (per split)."""
    patterns = (
        torch.rand(num_classes, channels, image_size, image_size, generator=torch.Generator().manual_seed(seed)) * 255
    )
    g = torch.Generator().manual_seed(seed + 1 + SPLITS.index(split))
    labels = torch.arange(size) % num_classes
    labels = labels[torch.randperm(size, generator=g)]
    noise = torch.randn(size, channels, image_size, image_size, generator=g) * 40
    images = (patterns[labels] + noise).clamp(0, 255).round().to(torch.uint8)
    return Split(
        labels=labels, class_names=[f"class_{i}" for i in range(num_classes)], images=images, source="synthetic"
    )


class MissingSplit(DataError):
    """The data has no such split (e.g. no test split); `available` names the splits it has."""

    def __init__(self, message: str, available: list[str]):
        super().__init__(message)
        self.available = available


def split_folders(root: Path) -> dict[str, Path]:
    """root's folders named for a split, by split in SPLITS order: train/, val/ (or validation/, Hugging Face's name,
    valid/, dev/), test/, each in lower case, Capitalised or UPPER case (Train/ is the train split, not a class). Two
    folders for one split are one error."""
    found: dict[str, Path] = {}
    if not root.is_dir():
        return found
    for split, names in SPLIT_NAMES.items():
        folders = [
            root / n
            for name in names
            for n in dict.fromkeys((name, name.capitalize(), name.upper()))
            if (root / n).is_dir()
        ]
        folders = list(
            {os.path.normcase(os.path.realpath(f)): f for f in folders}.values()
        )  # one folder on a case-blind disk
        if len(folders) > 1:
            raise DataError(f"{root}: {folders[0].name}/ and {folders[1].name}/ are both the {split} split; keep one")
        if folders:
            found[split] = folders[0]
    return found


def available_splits(path: str | os.PathLike | None, val_fraction: float) -> list[str]:
    """The splits `open_split` can open for the data at `path`, in SPLITS order."""
    root = idx.default_dir() if path is None else Path(path)
    held_out = ["val"] if val_fraction > 0.0 else []
    if root.is_dir() and idx.is_idx_dir(root):
        return ["train", "val", "test"]
    on_disk = list(split_folders(root))
    if not on_disk and (lists := split_lists(root)):
        on_disk = list(lists)
    if not on_disk:
        return ["train", *held_out]
    if "train" in on_disk and "val" not in on_disk:
        on_disk += held_out
    return [s for s in SPLITS if s in on_disk]


def is_flat(path: str | os.PathLike) -> bool:
    """Whether the data at `path` is one set of images without splits of its own: a list file, a folder with no split
    folders, lists by split or IDX files, or shards none of which is named for a split."""
    from .shards import is_sharded, names_splits

    if is_sharded(path):
        return not names_splits(path)
    root = Path(path)
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
) -> Split:
    """Open `split` ("train", "val" or "test") of the dataset at `path` (None: Fashion-MNIST's default place)."""
    if split not in SPLITS:
        raise DataError(f"data split {split!r}: expected one of {', '.join(SPLITS)}")
    from .shards import is_sharded, open_sharded, refuse_compressed  # tar shards and Parquet files

    if path is not None and is_sharded(path):
        return open_sharded(path, split, val_fraction=val_fraction, seed=seed)
    if path is not None:
        refuse_compressed(path)
    root = idx.default_dir() if path is None else Path(path)
    if not root.exists():
        raise DataError(idx.missing_message(root) if path is None else f"{root}: no such file or directory (data.path)")
    if root.is_file():
        _refuse_archive(root)
        if split == "test":
            raise _missing(root, split, val_fraction)
        return _held_out(_read_list(root), split, val_fraction, seed)
    if idx.is_idx_dir(root):
        return _idx_split(root, split, channels, val_fraction, seed)
    split_dirs = split_folders(root)
    if split_dirs:
        # without a val/ folder, val is held out of train/ and "train" is the rest, as for IDX files
        holds_out = "train" in split_dirs and "val" not in split_dirs and val_fraction > 0.0
        if split in split_dirs and not (split == "train" and holds_out):
            reference = split_dirs.get("train") if split != "train" else None  # val/test must hold train's classes
            return _read_folder(split_dirs[split], classes=_folder_classes(reference) if reference else None)
        if "train" in split_dirs and split != "test":
            return _held_out(_read_folder(split_dirs["train"]), split, val_fraction, seed)
        raise _missing(root, split, val_fraction)
    lists = split_lists(root)
    if lists:
        return _listed_split(lists, split, val_fraction, seed)
    if path is None:
        raise DataError(idx.missing_message(root))
    if split == "test":  # a flat folder or a list has no images kept apart for testing
        raise _missing(root, split, val_fraction)
    return _held_out(_read_folder(root), split, val_fraction, seed)


LIST_SUFFIXES = (".csv", ".jsonl", ".ndjson", ".tsv", ".txt")
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
        with open(path, "rb") as f:
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


def split_lists(root: Path) -> dict[str, Path]:
    """A folder's lists named by split (train.csv, val.jsonl, test.csv ...), in SPLITS order: a dataset held as one list
    per split, where it has a train list and no folders of images named train/, val/, test/ (those come first); else {}."""
    if not root.is_dir() or split_folders(root):
        return {}
    found = {}
    for split in SPLITS:
        named = [root / f"{split}{suffix}" for suffix in LIST_SUFFIXES if (root / f"{split}{suffix}").is_file()]
        if len(named) > 1:
            raise DataError(f"{root}: {named[0].name} and {named[1].name} both list the {split} split; keep one")
        if named:
            found[split] = named[0]
    return found if "train" in found else {}


def _listed_split(lists: dict[str, Path], split: str, val_fraction: float, seed: int) -> Split:
    """`split` of a dataset held as one list per split: train.csv (val held out of it where there is no val list)
    and, for val and test, their lists with labels numbered by train's classes (a class train lacks is an error)."""
    train = _read_list(lists["train"])
    if split == "train" and "val" in lists:
        return train
    if split == "train" or split == "val" and "val" not in lists:
        return _held_out(train, split, val_fraction, seed)
    if split not in lists:
        raise _missing(lists["train"].parent, split, val_fraction)
    listed = _read_list(lists[split])
    trained = {os.path.normpath(p) for p in train.paths}
    shared = [p for p in listed.paths if os.path.normpath(p) in trained]
    if shared:
        raise DataError(
            f"{lists[split]}: {len(shared)} of its {len(listed)} images {'is' if len(shared) == 1 else 'are'} also in {lists['train'].name} (e.g. {shared[0]}); "
            f"the {split} split must hold images the model does not train on: list each in one of them"
        )
    return _on_train_classes(listed, train.class_names, train.source)


def _on_train_classes(listed: Split, names: list[str], train_source: str) -> Split:
    """A listed val or test split labelled by train's classes `names`; a class train lacks is an error."""
    unknown = [name for name in listed.class_names if name not in names]
    if unknown:
        raise DataError(
            f"{listed.source}: class {unknown[0]!r} is not one of the {len(names)} classes of {train_source}"
        )
    return on_classes(listed, names)


def on_classes(split: Split, names: list[str]) -> Split:
    """`split` with its labels numbered as the classes `names` (which hold every class of `split`), matched by name: a
    split that lacks some classes, or orders them otherwise, keeps each image's class."""
    number = torch.tensor([names.index(name) for name in split.class_names], dtype=torch.long)
    return replace(split, labels=number[split.labels], class_names=list(names))


def _held_out(full: Split, split: str, val_fraction: float, seed: int) -> Split:
    """train (the rest) or val (the held-out part) of a source stored as one set; never "test"."""
    if split == "test":  # a held-out part is validation data: a test split must be kept apart on disk
        raise MissingSplit(
            f"{full.source}: has no 'test' split (it has train{', val' if val_fraction > 0 else ''})",
            ["train", *(["val"] if val_fraction > 0 else [])],
        )
    if split == "train" and val_fraction == 0.0:
        return full
    if not 0.0 < val_fraction < 1.0:
        raise MissingSplit(
            f"{full.source}: has no separate {split!r} split; set data.val_fraction in (0, 1) to hold one out",
            ["train"],
        )
    rest, held = hold_out(full, val_fraction, seed)
    return held if split == "val" else rest


def hold_out(split: Split, fraction: float, seed: int) -> tuple[Split, Split]:
    """(the rest, the held-out part) of `split`: a seeded cut of `fraction` of its images, each part's
    `selection` saying which it is (within what `split` already was)."""
    rest, held = (split.subset(index) for index in seeded_split(len(split), fraction, seed))
    part = f"{fraction:g} held out (seed {seed})" + ("" if split.selection == "all" else f" of {split.selection}")
    held.selection, rest.selection = part, f"all but the {part}"
    held.held_out = True
    return rest, held


def first_of(split: Split, n: int, seed: int) -> Split:
    """The first `n` images of a seeded order of `split`: for one seed, a smaller n is a subset of a larger one (the
    nested training sets of the paper's Fig. 3-4); kept in the split's order. `selection` says which they are."""
    if n > len(split):
        raise DataError(
            f"data.train_images: {n:,} is more than the training split holds ({described(split.describe())}); "
            f"give at most {len(split):,}"
        )
    order = np.random.default_rng([seed, 1]).permutation(len(split))  # not hold_out's order: a cut within its part
    part = split.subset(np.sort(order[:n]))
    part.selection = f"first {n:,} of a seeded order (seed {seed})" + (
        "" if split.selection == "all" else f" of {split.selection}"
    )
    return part


def _idx_split(root: Path, split: str, channels: int, val_fraction: float, seed: int) -> Split:
    on_disk = "test" if split == "test" or (split == "val" and val_fraction == 0.0) else "train"
    images, labels = idx.load_idx_split(root, on_disk)
    pixels = torch.from_numpy(images)[:, None]  # (N, 1, H, W)
    if channels == 3:
        pixels = pixels.expand(-1, 3, -1, -1).contiguous()
    n_classes = int(labels.max()) + 1
    fashion = n_classes <= 10 and ("fashion" in str(root).lower() or idx.is_fashion_mnist(str(root)))
    names = list(idx.FASHION_MNIST_CLASSES[:n_classes]) if fashion else [str(i) for i in range(n_classes)]
    full = Split(labels=torch.from_numpy(labels), class_names=names, images=pixels, source=str(root))
    if on_disk == "train" and val_fraction > 0.0:
        return _held_out(full, split, val_fraction, seed)
    return full


def class_name(text: str) -> str:
    """A class name as vitkit keeps it: Unicode NFC, so that a folder macOS named in NFD ("blu\u0308") is the class
    a checkpoint or another split names in NFC ("bl\u00fc")."""
    return unicodedata.normalize("NFC", text)


def _class_dirs(root: Path) -> list[str]:
    """The class folders' names as on disk, in the order of their NFC names (one order whichever form a disk keeps)."""
    return sorted(
        (d.name for d in root.iterdir() if d.is_dir() and not is_hidden(d.name)), key=lambda n: (class_name(n), n)
    )


METADATA_LISTS = (
    "metadata.csv",
    "metadata.jsonl",
)  # Hugging Face's imagefolder: a split's images and their labels beside them


def metadata_list(root: Path) -> Path | None:
    """A folder's metadata.csv or metadata.jsonl (file_name,label), where it has no class folders; else None."""
    return None if _class_dirs(root) else _metadata_file(root)


def _metadata_file(root: Path) -> Path | None:
    found = [root / name for name in METADATA_LISTS if (root / name).is_file()]
    if len(found) > 1:
        raise DataError(f"{root}: {found[0].name} and {found[1].name} both label its images; keep one")
    return found[0] if found else None


def _folder_classes(root: Path) -> list[str]:
    """The classes of a training folder: its class folders, or the labels of its metadata list."""
    metadata = metadata_list(root)
    return _read_list(metadata).class_names if metadata else [class_name(n) for n in _class_dirs(root)]


def _read_folder(root: Path, classes: list[str] | None = None) -> Split:
    """root/<class>/**/<image>; classes in sorted order. `classes` (train's) must be exactly the folders found.

    Images directly in root, without class folders, are labelled by a metadata.csv or metadata.jsonl beside them
    (file_name,label: Hugging Face's imagefolder), else are one class "unlabeled" (self-supervised pre-training,
    train.objective=masked_patch, needs no labels)."""
    found = _class_dirs(root)
    if not found and (metadata := _metadata_file(root)):
        listed = _read_list(metadata)
        named = {os.path.abspath(p) for p in listed.paths}
        unlisted = [p for p in root.iterdir() if p.is_file() and is_image_file(p) and os.path.abspath(p) not in named]
        if unlisted:  # as Hugging Face's imagefolder reads it: only what the list labels; said, not silent
            warnings.warn(
                f"{root}: {len(unlisted)} image file{'s' * (len(unlisted) != 1)} not in {metadata.name} left out "
                f"(e.g. {unlisted[0].name}); label {'them' if len(unlisted) != 1 else 'it'} there to use {'them' if len(unlisted) != 1 else 'it'}"
            )
        return listed if classes is None else _on_train_classes(listed, classes, str(root.parent / "train"))
    if not found:
        loose = sorted(p for p in root.iterdir() if p.is_file() and is_image_file(p))
        if loose and classes:
            raise DataError(
                f"{root}: images without class folders, where {root.parent / 'train'} has classes "
                f"{', '.join(classes[:3])}{', ...' * (len(classes) > 3)}; put them in class folders, or label them in "
                f"{root / 'metadata.csv'} (file_name,label)"
            )
        if loose:
            return Split(
                labels=torch.zeros(len(loose), dtype=torch.long),
                class_names=["unlabeled"],
                paths=loose,
                source=str(root),
            )
    names = [class_name(n) for n in found]
    loose = [p for p in root.iterdir() if p.is_file() and is_image_file(p)]
    if loose:  # beside class folders: in no class, so in no split (left out unsaid, a folder of 46 images read as 5)
        warnings.warn(
            f"{root}: {len(loose)} image file{'s' * (len(loose) != 1)} directly in it, in no class folder, left out "
            f"(e.g. {sorted(loose)[0].name}); "
            + ("put them in class folders to use them" if len(loose) != 1 else "put it in a class folder to use it")
        )
    if classes is not None and names != classes:
        extra, missing = sorted(set(names) - set(classes)), sorted(set(classes) - set(names))
        what = f"class {missing[0]!r} of train/ is missing here" if missing else f"class {extra[0]!r} is not in train/"
        raise DataError(f"{root}: {what}; every split needs the same class folders (labels follow their sorted names)")
    paths, labels, empty = [], [], []
    for label, name in enumerate(found):
        files = image_files(root / name)
        empty += [] if files else [name]
        paths += files
        labels += [label] * len(files)
    if not paths:
        from .shards import is_sharded  # a dataset one folder down, as the Hugging Face Hub lays out a config's files

        inner = next((root / name for name in found if is_sharded(root / name)), None)
        hint = f"; {inner} holds tar or Parquet shards: give that folder" if inner else ""
        raise DataError(
            f"{root}: no images found; expected root/<class>/<image>.jpg|png|webp ... (or IDX files, a .csv/.jsonl "
            f"list, tar shards or Parquet files){hint}"
        )
    if empty and classes is None:  # an empty training class could never be learned (in val it is only unscored)
        raise DataError(f"{root / empty[0]}: empty class folder (no image files); add images or remove the folder")
    return Split(labels=torch.tensor(labels, dtype=torch.long), class_names=names, paths=paths, source=str(root))


def check_compatible(train: Split, val: Split) -> None:
    """Both splits of a run must share their classes, and every label must name one of them."""
    if val.class_names != train.class_names:
        i, (a, b) = next((i, p) for i, p in enumerate(zip_longest(train.class_names, val.class_names)) if p[0] != p[1])
        if b is None:
            what = f"class {a!r} (label {i}) of {train.source} is missing here"
        elif a is None:
            what = f"class {b!r} (label {i}) is not one of the {len(train.class_names)} classes of {train.source}"
        else:
            what = f"label {i} is class {b!r} here but {a!r} in {train.source}"
        raise DataError(f"{val.source}: {what}; the training and validation splits need the same classes")
    for split in (train, val):
        if len(split) and not 0 <= int(split.labels.min()) <= int(split.labels.max()) < len(train.class_names):
            raise DataError(
                f"{split.source}: labels run from {int(split.labels.min())} to {int(split.labels.max())}, "
                f"but there are {len(train.class_names)} classes; labels must be 0 .. {len(train.class_names) - 1}"
            )


def _read_list(path: Path) -> Split:
    """A CSV (path,label, with or without header) or JSONL ({"path": ..., "label": ...}) list; paths relative to the file."""
    rows: list[tuple[str, str]] = []
    lines: list[int] = []  # each row's line in the file
    suffix = path.suffix.lower()
    try:
        if path.stat().st_size > MAX_LIST_BYTES:
            raise DataError(
                f"{path}: {path.stat().st_size:,} bytes; a list of images is at most {MAX_LIST_BYTES:,} bytes"
            )
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark (Excel's "CSV UTF-8") is not part of the header
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: cannot read the list ({first_line(err)})") from None
    if suffix in (".jsonl", ".ndjson"):
        keys: tuple[str, str] | None = None
        for line_no, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(
                    f"{path}:{line_no}: not valid JSON ({err.msg} at column {err.colno}); each line is one JSON object "
                    f"with {_COLUMN_NAMES}"
                ) from None
            except RecursionError:
                row = None
            if keys is None and isinstance(row, dict) and (found := _columns(list(row))) is not None:
                keys = tuple(list(row)[i] for i in found)  # the first object's names hold for every line
                _refuse_split_column(path, list(row))
            if (
                keys is None
                or not isinstance(row, dict)
                or not isinstance(row.get(keys[0]), str)
                or not _is_label(row.get(keys[1]))
            ):
                raise DataError(f"{path}:{line_no}: expected a JSON object with {_COLUMN_NAMES}")
            rows.append((row[keys[0]], str(row[keys[1]])))
            lines.append(line_no)
    elif suffix in (".csv", ".tsv", ".txt"):
        reader, table = csv.reader(text.splitlines(), delimiter="\t" if suffix == ".tsv" else ","), []
        try:
            table += [(line_no, row) for line_no, row in enumerate(reader, 1) if row]
        except csv.Error as err:  # a field over csv's size limit, a NUL byte, an unclosed quote
            raise DataError(f"{path}:{reader.line_num}: not a valid CSV line ({first_line(err)})") from None
        columns = (0, 1)
        if table and _csv_header(path, table):
            columns = _columns(table[0][1])
            _refuse_split_column(path, table[0][1])
            if columns is None:
                header = ",".join(c.strip() for c in table[0][1])
                raise DataError(
                    f"{path}:1: {header[:60]!r} reads as a header, but names no path and label columns; name them "
                    f"{_COLUMN_NAMES}, or remove the line"
                )
            table = table[1:]
        for line_no, row in table:
            if len(row) <= max(columns) or not row[columns[0]].strip() or not _is_label(row[columns[1]].strip()):
                shown = repr(row) if len(repr(row)) < 80 else repr(row)[:77] + "..."
                raise DataError(
                    f"{path}:{line_no}: expected 'path,label' (a label of at most {MAX_LABEL} characters), got {shown}"
                )
            rows.append((row[columns[0]].strip(), row[columns[1]].strip()))
            lines.append(line_no)
    else:
        raise DataError(f"{path}: unknown list format {suffix!r}; use .csv (path,label) or .jsonl")
    if not rows:
        raise DataError(f"{path}: the list is empty")
    rows = [(p, class_name(label)) for p, label in rows]
    names = sorted({label for _, label in rows}, key=_label_order)
    index = {name: i for i, name in enumerate(names)}
    paths = [(path.parent / p) if not os.path.isabs(p) else Path(p) for p, _ in rows]
    _refuse_repeats(path, paths, lines)
    labels = torch.tensor([index[label] for _, label in rows], dtype=torch.long)
    return Split(labels=labels, class_names=names, paths=paths, source=str(path))


def _refuse_repeats(path: Path, paths: list[Path], lines: list[int]) -> None:
    """An image listed twice is one error naming both lines: a held-out cut could put one copy in train and the other
    in val, and two labels for one image cannot both be right."""
    seen: dict[str, int] = {}
    for file, line in zip(paths, lines):
        key = os.path.normpath(file)
        if key in seen:
            raise DataError(f"{path}:{line}: {file} is listed again (first on line {seen[key]}); list each image once")
        seen[key] = line


def _refuse_split_column(path: Path, names: list) -> None:
    """A list saying which split each image is in would be read as one set, its val and test images trained on: one
    error saying how vitkit takes splits from lists."""
    if any(str(n).strip().lower() in ("split", "subset", "fold") for n in names):
        raise DataError(
            f"{path}: has a split column, which vitkit does not read (its val and test images would be trained on); "
            "write one list per split (train.csv, val.csv, test.csv) in a folder and give the folder, or drop the "
            "column to hold val out of all of the images (data.val_fraction)"
        )


PATH_COLUMNS = (
    "path",
    "file_name",
    "filename",
    "file",
    "filepath",
    "file_path",
    "image",
    "image_path",
    "img",
    "img_path",
)
LABEL_COLUMNS = ("label", "class", "class_name", "category", "target", "y")
_COLUMN_NAMES = "'path' (or file_name, filename, image ...) and 'label' (or class, category, target; text or integer)"


def _columns(names: list) -> tuple[int, int] | None:
    """(path column, label column) named in a CSV header or a JSON object's keys (any case), None unless both are."""
    lowered = [str(n).strip().lower() for n in names]
    found = tuple(
        next((lowered.index(n) for n in group if n in lowered), None) for group in (PATH_COLUMNS, LABEL_COLUMNS)
    )
    return None if None in found else found


def _csv_header(path: Path, table: list[tuple[int, list[str]]]) -> bool:
    """Whether a CSV list's first line is a header: it names known columns, or its first field is no file and not an
    image's name and its second is a label no other line has (a header of unknown names, which would otherwise become
    a class)."""
    first = table[0][1]
    try:
        if (path.parent / first[0].strip()).is_file():
            return False
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte: no file, and no header name either
        return False
    if _columns(first) is not None:
        return True
    if (
        Path(first[0].strip()).suffix.lower() in IMAGE_SUFFIXES
    ):  # a line of a missing image: found missing later, by name
        return False
    return (
        len(first) >= 2
        and len(table) > 1
        and all(len(row) < 2 or row[1].strip() != first[1].strip() for _, row in table[1:])
    )


MAX_LABEL = 1000  # characters in a class name
MAX_LIST_BYTES = 1 << 30  # a .csv/.jsonl list (ImageNet's 1.28M lines take ~60 MB)


def _is_label(value) -> bool:
    """A class label of a list: non-empty text of at most MAX_LABEL characters, or an integer (not a bool)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return len(str(value)) <= MAX_LABEL
    return isinstance(value, str) and 0 < len(value) <= MAX_LABEL and value.isprintable()


def _label_order(label: str) -> tuple:
    """Integer labels in numeric order (2 before 10), then names alphabetically."""
    number = re.fullmatch(r"-?[0-9]{1,18}", label) is not None
    return (not number, int(label) if number else 0, label)
