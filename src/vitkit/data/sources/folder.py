"""Image folders: root/<class>/**/<image>, the classes in sorted order; or images directly in root, labelled by a
metadata.csv / metadata.jsonl beside them (Hugging Face's imagefolder), else one class "unlabeled"."""

from __future__ import annotations

import os
import re
import warnings
from collections import Counter
from pathlib import Path

import torch

from vitkit.errors import DataError

from ..images import image_files, is_hidden, is_image_file
from ..split import Split, class_name
from .lists import Columns, list_naming, metadata_file, on_train_classes, read_list, refuse_columns
from .shards import is_sharded


def class_dirs(root: Path) -> list[str]:
    """The class folders' names as on disk, in the order of their NFC names (one order whichever form a disk keeps).
    Two folders of one NFC name (café composed and decomposed) would be two classes of one name: a DataError names both."""
    found = sorted(
        (d.name for d in root.iterdir() if d.is_dir() and not is_hidden(d.name)), key=lambda n: (class_name(n), n)
    )
    for first, second in zip(found, found[1:]):
        if class_name(first) == class_name(second):
            raise DataError(
                f"{root}: class folders {first!r} and {second!r} are one name in different Unicode forms "
                f"({ascii(first)} and {ascii(second)}); rename one, or merge them"
            )
    return found


def metadata_list(root: Path) -> Path | None:
    """A folder's metadata.csv or metadata.jsonl (file_name,label), where it has no class folders; else None."""
    return None if class_dirs(root) else metadata_file(root)


def folder_classes(root: Path, columns: Columns = Columns()) -> list[str]:
    """The classes of a training folder: its class folders, or the labels of its metadata list."""
    metadata = metadata_list(root)
    if metadata:
        return read_list(metadata, columns=columns).class_names
    return [class_name(n) for n in class_dirs(root)]


def read_folder(root: Path, classes: list[str] | None = None, columns: Columns = Columns()) -> Split:
    """root/<class>/**/<image>; classes in sorted order. `classes` (train's) must be exactly the folders found.

    Images directly in root, without class folders, are labelled by a metadata.csv or metadata.jsonl beside them
    (file_name,label: Hugging Face's imagefolder; its columns as `columns` names them), else are one class
    "unlabeled" (self-supervised pre-training, train.objective=masked_patch, needs no labels)."""
    found = class_dirs(root)
    if not found and (metadata := metadata_file(root)):
        return _read_metadata(root, metadata, classes, columns)
    if columns != Columns():
        _refuse_columns(root, columns, found)
    if not found and (loose := _loose_images(root, classes)):
        return loose
    names = [class_name(n) for n in found]
    _warn_loose(root)
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
        _refuse_no_images(root, found)
    if empty and classes is None:  # an empty training class could never be learned (in val it is only unscored)
        raise DataError(f"{root / empty[0]}: empty class folder (no image files); add images or remove the folder")
    if classes is None:
        _warn_listed(root, names, paths)
    return Split(labels=torch.tensor(labels, dtype=torch.long), class_names=names, paths=paths, source=str(root))


def _read_metadata(root: Path, metadata: Path, classes: list[str] | None, columns: Columns) -> Split:
    """The images of a folder without class folders that its metadata list labels, on train's `classes` if given."""
    listed = read_list(metadata, classes, columns=columns)
    named = {os.path.abspath(p) for p in listed.paths}
    unlisted = [p for p in root.iterdir() if p.is_file() and is_image_file(p) and os.path.abspath(p) not in named]
    if unlisted:  # as Hugging Face's imagefolder reads it: only what the list labels; said, not silent
        them = "them" if len(unlisted) != 1 else "it"
        warnings.warn(
            f"{root}: {len(unlisted)} image file{'s' * (len(unlisted) != 1)} not in {metadata.name} left out "
            f"(e.g. {unlisted[0].name}); label {them} there to use {them}"
        )
    return listed if classes is None else on_train_classes(listed, classes, str(root.parent / "train"))


def _loose_images(root: Path, classes: list[str] | None) -> Split | None:
    """The images directly in a folder without class folders, as one class "unlabeled"; None if it has none. Where
    train has classes (`classes`), they are an error."""
    loose = sorted(p for p in root.iterdir() if p.is_file() and is_image_file(p))
    if loose and classes:
        raise DataError(
            f"{root}: images without class folders, where {root.parent / 'train'} has classes "
            f"{', '.join(classes[:3])}{', ...' * (len(classes) > 3)}; put them in class folders, or label them in "
            f"{root / 'metadata.csv'} (file_name,label)"
        )
    if not loose:
        return None
    return Split(
        labels=torch.zeros(len(loose), dtype=torch.long), class_names=["unlabeled"], paths=loose, source=str(root)
    )


def _refuse_columns(root: Path, columns: Columns, found: list[str]) -> None:
    """data.label_column and data.group_column name a list's columns: a folder read without a list refuses them,
    naming the list beside its class folders that names their images, where one does."""
    beside = list_naming(root, [p for name in found for p in image_files(root / name)]) if found else None
    refuse_columns(
        root,
        "class folders" if found else "images without a list",
        columns,
        f"give the list as the data (--data {beside[0] if beside else 'FILE.csv'})",
    )


def _warn_listed(root: Path, names: list[str], paths: list[Path]) -> None:
    """Class folders whose images a list beside them names (HAM10000's metadata CSV beside HAM10000_images_part_1/
    and _part_2/) may be parts of one set that the list labels: read as classes, and said, with how to read the list."""
    beside = list_naming(root, paths)
    if beside is None:
        return
    listed, header, labelled = beside
    how = "" if labelled else " data.label_column=COLUMN"
    warnings.warn(
        f"{root}: its {len(names)} folders ({', '.join(names[:3])}{', ...' * (len(names) > 3)}) are read as the "
        f"classes, and {listed.name} beside them names their images ({', '.join(header)[:80]}); to label them by it, "
        f"--data {listed}{how}"
    )


def _warn_loose(root: Path) -> None:
    """Images beside class folders are in no class, so in no split: left out, and said (unsaid, a folder of 46 images
    read as 5)."""
    loose = [p for p in root.iterdir() if p.is_file() and is_image_file(p)]
    if loose:
        warnings.warn(
            f"{root}: {len(loose)} image file{'s' * (len(loose) != 1)} directly in it, in no class folder, left out "
            f"(e.g. {sorted(loose)[0].name}); "
            + ("put them in class folders to use them" if len(loose) != 1 else "put it in a class folder to use it")
        )


def _refuse_no_images(root: Path, found: list[str]) -> None:
    """One error for class folders without images, naming a folder one down that holds shards (as the Hugging Face
    Hub lays out a config's files)."""
    inner = next((root / name for name in found if is_sharded(root / name)), None)
    hint = f"; {inner} holds tar or Parquet shards: give that folder" if inner else ""
    raise DataError(
        f"{root}: no images found; expected root/<class>/<image>.jpg|png|webp ... (or IDX files, a .csv/.jsonl "
        f"list, tar shards or Parquet files){hint}"
    )


def classes_in_names(paths: list[Path], most: int = 100) -> str:
    """Where images without class folders are named by class (Kaggle's cat.0.jpg, dog.1.jpg): a hint that says so and
    how to make the folders; "" where their names start with one word, with more than `most` words, or with a word
    only one image has."""
    if not all(isinstance(p, (str, os.PathLike)) for p in paths):  # records of shards name no files
        return ""
    words = Counter(re.split(r"[._\- ]", Path(p).stem, maxsplit=1)[0].lower() for p in paths)
    if not 2 <= len(words) <= most or min(words.values()) < 2 or any(word.isdigit() for word in words):
        return ""
    first = sorted(words)[0]
    folder = Path(paths[0]).parent
    shown = ", ".join(sorted(words)[:4]) + (" ..." if len(words) > 4 else "")
    return (
        f"; their names start with {len(words)} words ({shown}): to use them as classes, put each image in a folder "
        f"of its word (mkdir {folder / first} && mv {folder}/{first}.* {folder / first}/, and so for each)"
    )
