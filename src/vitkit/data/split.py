"""The split: what every data source returns (`Split`), the names of splits, and the seeded cuts of one (a held-out
validation part, the first n of a seeded order). Every reader in `sources/` builds on this module, which imports none
of them; `BadFiles` says what to do with a file that cannot be read, whoever reads it.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import unicodedata
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import zip_longest
from pathlib import Path

import numpy as np
import torch

from vitkit.errors import DataError, has_control_characters

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

    # (N,) int64 class indices, or (N, K) uint8 multi-hot rows where an image has any number of classes
    labels: torch.Tensor
    class_names: list[str]
    images: torch.Tensor | None = None
    paths: list[Path] | None = None
    source: str = ""
    selection: str = "all"  # which of the source's images: "all", or the part of a seeded held-out cut
    held_out: bool = False  # the part of a seeded cut kept apart as "val" (not "all", not "the rest")
    rows: np.ndarray | None = None  # (N,) each image's row in the source as read; None: rows 0 .. N-1
    labels_read: str = ""  # how a list's labels were told apart, where the plan says it (spaces joining them)
    # how a list's columns and files were told where its header or paths did not say (the plan says it)
    read_as: str = ""
    groups: np.ndarray | None = None  # (N,) each image's group, where a list has a group column (parts.group_cells)
    group_column: str = ""  # that column's name
    grouped: bool = False  # whether a held-out cut keeps each group whole (data.group_column named the column)

    def __post_init__(self) -> None:
        bad = next((name for name in self.class_names if has_control_characters(name)), None)
        # printed raw, a folder named "a\x1b[31mb" recoloured the terminal and a newline split lines
        if bad is not None:
            raise DataError(
                f"{self.source or 'the data'}: class name {bad!r} holds control characters (a newline, tab or "
                "terminal escape); rename it"
            )

    @property
    def multi_label(self) -> bool:
        """Whether each image has a set of classes (several, one or none: `labels` multi-hot), not one class."""
        return self.labels.ndim == 2

    def class_counts(self) -> np.ndarray:
        """(K,) images of each class; with several labels an image counts once for each of its classes."""
        if self.multi_label:
            return self.labels.sum(0, dtype=torch.long).numpy()
        return np.bincount(self.labels.numpy(), minlength=len(self.class_names))

    def label_text(self, label: torch.Tensor) -> str:
        return label_text(label, self.class_names)

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
            h.update("\n".join(self.names(self.source)).encode(errors="surrogateescape"))
        return h.hexdigest()

    def names(self, below: str) -> list[str]:
        """Each image's file (or record: "SHARD:MEMBER") named from the folder `below`, as it is where outside it;
        [] for images in memory."""
        prefix = below.rstrip(os.sep) + os.sep
        return [n[len(prefix) :] if n.startswith(prefix) else n for n in map(str, self.paths or [])]

    def __len__(self) -> int:
        return len(self.labels)

    def source_rows(self) -> np.ndarray:
        """(N,) int64: each image's row (from 0) in the source as read, through every cut and subset since."""
        return np.arange(len(self), dtype=np.int64) if self.rows is None else self.rows

    def subset(self, index: np.ndarray) -> Split:
        index = np.asarray(index, dtype=np.int64)
        t = torch.as_tensor(index, dtype=torch.long)
        return replace(
            self,
            labels=self.labels[t],
            images=None if self.images is None else self.images[t],
            paths=None if self.paths is None else [self.paths[i] for i in index],
            rows=self.source_rows()[index],
            groups=None if self.groups is None else self.groups[index],
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
    return f"{record['n']:,} image{'s' * (record['n'] != 1)} ({record['source']}, {record['selection']})"


def same_images(before, now: dict) -> bool:
    """Whether a recorded `describe()` and today's name the same images: source, cut and count, and the digest where
    both have one (records written before vitkit kept digests have none)."""
    if not isinstance(before, dict):
        return False
    keys = ("selection", "n") + (("digest",) if "digest" in before and "digest" in now else ())
    return all(before.get(k) == now.get(k) for k in keys) and _same_source(before, now)


def _same_source(before: dict, now: dict) -> bool:
    """The recorded source is today's; an export's record names it below the data folder, or by its last part
    (`checkpoint.card.publishable`), and is then today's where it ends today's path and the digests agree."""
    was, is_ = before.get("source"), now.get("source")
    if was == is_:
        return True
    if (
        not (isinstance(was, str) and isinstance(is_, str))
        or os.path.isabs(was)
        or not ("digest" in before and "digest" in now)
    ):
        return False
    tail = Path(was).parts
    return was == "." or Path(is_).parts[-len(tail) :] == tail


# How val is held out of the training images: "stratified" (each class its share) or "random" (a seeded cut blind to
# the classes: vitkit's only rule before checkpoints named theirs, so a record naming none was cut by it)
SPLIT_RULES = ("stratified", "random")


def seeded_split(n: int, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, val) indices: a seeded permutation of range(n), the last val_fraction of it for val (the "random" rule)."""
    order = np.random.default_rng(seed).permutation(n)
    n_val = int(round(n * val_fraction))
    return np.sort(order[: n - n_val]), np.sort(order[n - n_val :])


def stratified_split(strata: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, val) indices of range(len(strata)), each stratum (an image's class) holding out its share of val: the
    round(n x val_fraction) images of the random rule, shared among the strata by largest remainder (ties to the
    lower stratum), where a stratum of k >= 2 images keeps at least one in train and a stratum of one image stays whole
    in train (a class never trained on could not be learned). Within a stratum the last of one seeded permutation of
    all images are held out, so a seed picks the same images on every run of the same data."""
    n = len(strata)
    order = np.random.default_rng(seed).permutation(n)
    values, counts = np.unique(strata, return_counts=True)
    share, room = counts * val_fraction, np.maximum(counts - 1, 0)
    take = np.minimum(np.floor(share).astype(np.int64), room)
    left = int(round(n * val_fraction)) - int(take.sum())
    for i in sorted(range(len(values)), key=lambda i: (take[i] - share[i], i)):
        if left > 0 and take[i] < room[i]:
            take[i], left = take[i] + 1, left - 1
    ranked, held = strata[order], [np.zeros(0, dtype=np.int64)]
    for value, k in zip(values, take):
        members = order[ranked == value]
        held.append(members[len(members) - k :])
    val = np.sort(np.concatenate(held))
    return np.setdiff1d(np.arange(n), val), val


def strata_of(labels: torch.Tensor) -> np.ndarray:
    """(N,) the stratum of each image a stratified cut keeps in proportion: its class; with several labels per image
    (multi-hot rows), its rarest class, so that a rare class keeps its share of val (K: an image without labels)."""
    if labels.ndim == 1:
        return labels.numpy()
    hot = labels.numpy().astype(bool)
    rarity = np.where(hot, hot.sum(0), np.iinfo(np.int64).max)
    return np.where(hot.any(1), rarity.argmin(1), hot.shape[1])


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
        # one folder on a case-blind disk
        folders = list({os.path.normcase(os.path.realpath(f)): f for f in folders}.values())
        if len(folders) > 1:
            raise DataError(f"{root}: {folders[0].name}/ and {folders[1].name}/ are both the {split} split; keep one")
        if folders:
            found[split] = folders[0]
    return found


def label_text(label: torch.Tensor, names: list[str]) -> str:
    """One image's label as words: its class name, or (a multi-hot row) its classes joined by '+', '(none)' for none."""
    if label.ndim == 1:
        return "+".join(names[int(k)] for k in label.nonzero().flatten()) or "(none)"
    return names[int(label)]


def multi_hot(rows: list[list[int]], num_classes: int) -> torch.Tensor:
    """(N, K) uint8 rows with a 1 at each class index of `rows` (an image's classes: several, one or none)."""
    hot = torch.zeros(len(rows), num_classes, dtype=torch.uint8)
    for i, row in enumerate(rows):
        hot[i, list(row)] = 1
    return hot


def check_compatible(train: Split, val: Split) -> None:
    """Both splits of a run must share their classes, and every label must name one of them."""
    if train.multi_label != val.multi_label:
        several, one = (train, val) if train.multi_label else (val, train)
        raise DataError(
            f"{one.source}: one label per image, where {several.source} gives each image a list of labels; "
            "label both splits the same way"
        )
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
        if split.multi_label:  # multi-hot rows hold one column per class, built with the split's own classes
            continue
        if len(split) and not 0 <= int(split.labels.min()) <= int(split.labels.max()) < len(train.class_names):
            raise DataError(
                f"{split.source}: labels run from {int(split.labels.min())} to {int(split.labels.max())}, "
                f"but there are {len(train.class_names)} classes; labels must be 0 .. {len(train.class_names) - 1}"
            )


def on_classes(split: Split, names: list[str]) -> Split:
    """`split` with its labels numbered as the classes `names` (which hold every class of `split`), matched by name: a
    split that lacks some classes, or orders them otherwise, keeps each image's class."""
    number = torch.tensor([names.index(name) for name in split.class_names], dtype=torch.long)
    if split.multi_label:  # each column moves to its class's place; classes the split lacks are 0 everywhere
        hot = torch.zeros(len(split), len(names), dtype=split.labels.dtype)
        hot[:, number] = split.labels
        return replace(split, labels=hot, class_names=list(names))
    return replace(split, labels=number[split.labels], class_names=list(names))


def held_out(full: Split, split: str, val_fraction: float, seed: int, rule: str = "stratified") -> Split:
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
    rest, held = hold_out(full, val_fraction, seed, rule)
    return held if split == "val" else rest


def hold_out(split: Split, fraction: float, seed: int, rule: str = "stratified") -> tuple[Split, Split]:
    """(the rest, the held-out part) of `split`: a seeded cut of `fraction` of its images by `rule` (SPLIT_RULES), each
    part's `selection` saying which it is (within what `split` already was) and, for a stratified cut, that it is one
    (a random cut says what it said before rules were named, so that an old checkpoint's record matches it)."""
    if rule not in SPLIT_RULES:
        raise DataError(f"data.split_rule: expected one of {', '.join(SPLIT_RULES)}, got {rule!r}")
    strata = strata_of(split.labels) if rule == "stratified" else None
    if split.grouped:
        index = grouped_split(split.groups, strata, fraction, seed)
    elif strata is not None:
        index = stratified_split(strata, fraction, seed)
    else:
        index = seeded_split(len(split), fraction, seed)
    rest, held = (split.subset(i) for i in index)
    by = (" by class" if rule == "stratified" else "") + (
        f", whole {split.group_column} groups" if split.grouped else ""
    )
    part = f"{fraction:g} held out{by} (seed {seed})" + ("" if split.selection == "all" else f" of {split.selection}")
    held.selection, rest.selection = part, f"all but the {part}"
    held.held_out = True
    if not split.grouped:
        warn_groups_apart(rest, held, f"data.group_column={split.group_column} holds out whole groups")
    return rest, held


def grouped_split(
    groups: np.ndarray, strata: np.ndarray | None, val_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(train, val) indices of range(len(groups)) that keep each group whole: the groups cut as images are cut
    (`stratified_split` on the stratum of each group's first image; `seeded_split` where `strata` is None), each
    image going where its group goes. val holds about `val_fraction` of the images, as groups differ in size."""
    _, first, inverse = np.unique(groups, return_index=True, return_inverse=True)
    if strata is None:
        _, held = seeded_split(len(first), val_fraction, seed)
    else:
        _, held = stratified_split(strata[first], val_fraction, seed)
    val = np.flatnonzero(np.isin(inverse, held))
    return np.setdiff1d(np.arange(len(groups)), val), val


def warn_groups_apart(train: Split, other: Split, fix: str) -> None:
    """Images of `other` (a held-out val, a list's val or test) in a group (one lesion, one patient: a list's group
    column) that also has images in `train`: said, with `fix`. They score images much like ones the model trained on."""
    if train.groups is None or other.groups is None:
        return
    shared = int(np.isin(other.groups, train.groups).sum())
    if shared:
        column = other.group_column
        what = "held-out val" if other.held_out else "val or test"
        warnings.warn(
            f"{other.source}: {shared} of the {len(other)} {what} images share their {column} with a training image "
            f"(several images of one {column}, split apart): they score images much like ones the model trained on; "
            f"{fix}"
        )


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


def class_name(text: str) -> str:
    """A class name as vitkit keeps it: Unicode NFC, so that a folder macOS named in NFD ("blu\u0308") is the class
    a checkpoint or another split names in NFC ("bl\u00fc")."""
    return unicodedata.normalize("NFC", text)


def label_order(label: str) -> tuple:
    """Integer labels in numeric order (2 before 10), then names alphabetically."""
    number = re.fullmatch(r"-?[0-9]{1,18}", label) is not None
    return (not number, int(label) if number else 0, label)


ON_ERROR = ("skip", "fail")


class BadFiles:
    """What to do with image files that cannot be decoded: "fail" (stop, naming the file) or "skip".

    Skipped files are counted, warned about once each on stderr (once for those that share one message), and handed to `save` (e.g. to be
    written to the run directory) whenever the list grows. Files go bad the same way every time they
    are read, so skipping keeps the data order, and with it an exact resume, reproducible.
    """

    def __init__(
        self,
        policy: str = "fail",
        save: Callable[[dict[str, str]], None] | None = None,
        known: dict[str, str] | None = None,
        hint: str = "",
    ):
        if policy not in ON_ERROR:
            raise DataError(f"data.on_error: expected one of {', '.join(ON_ERROR)}, got {policy!r}")
        self.policy, self.save, self.hint = policy, save, hint  # hint: appended to the error on "fail"
        self.files: dict[str, str] = dict(known or {})  # path -> the error message
        self._said: set[str] = set(self.files.values())  # messages warned about (or known from an earlier segment)

    def __len__(self) -> int:
        return len(self.files)

    def report(self, errors: list[tuple[int, str, str]]) -> None:
        """(index, path, message) of files that failed: raise on "fail", else record and warn."""
        if not errors:
            return
        if self.policy == "fail":
            raise DataError(errors[0][2] + self.hint)
        new = [(path, message) for _, path, message in errors if path not in self.files]
        for path, message in new:
            if message not in self._said:  # the rows of one unreadable Parquet row group share one message
                print(f"vitkit: skipping a bad image: {message}", file=sys.stderr)
                self._said.add(message)
            self.files[path] = message
        if new and self.save is not None:
            self.save(self.files)
