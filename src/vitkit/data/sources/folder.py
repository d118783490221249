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
from ..split import Split, class_name, label_order
from .lists import Labelling, list_naming, metadata_file, on_train_classes, read_list, refuse_labelling
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


def folder_classes(root: Path, labelling: Labelling = Labelling()) -> list[str]:
    """The classes of a training folder: its class folders, or the labels of its metadata list."""
    metadata = metadata_list(root)
    if metadata:
        return read_list(metadata, labelling=labelling).class_names
    if labelling.name_pattern is not None and not class_dirs(root):
        return _named_by_pattern(root, None, labelling.name_pattern).class_names
    return [class_name(n) for n in class_dirs(root)]


def read_folder(root: Path, classes: list[str] | None = None, labelling: Labelling = Labelling()) -> Split:
    """root/<class>/**/<image>; classes in sorted order. `classes` (train's) must be exactly the folders found.

    Images directly in root, without class folders, are labelled by a metadata.csv or metadata.jsonl beside them
    (file_name,label: Hugging Face's imagefolder; its columns as `labelling` names them), else by their names where
    `labelling.name_pattern` is given, else are one class "unlabeled" (self-supervised pre-training,
    train.objective=masked_patch, needs no labels)."""
    found = class_dirs(root)
    if not found and (metadata := metadata_file(root)):
        return _read_metadata(root, metadata, classes, labelling)
    if labelling.label_column is not None or labelling.group_column is not None:
        _refuse_columns(root, labelling, found)
    if labelling.name_pattern is not None:
        if found:
            pattern = Labelling(name_pattern=labelling.name_pattern)
            refuse_labelling(root, f"class folders ({', '.join(found[:3])})", pattern)
        return _named_by_pattern(root, classes, labelling.name_pattern)
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
        held = [name for name in found if name not in empty]
        if len(held) == 1:  # Oxford-IIIT Pet: images/ of loose images beside annotations/, not class folders
            raise DataError(
                f"{root}: read as class folders, but only {held[0]}/ of its {len(found)} folders holds images "
                f"({', '.join(f'{n}/' for n in empty[:3])} none): give {root / held[0]} as the data if those are the "
                "images"
            )
        raise DataError(f"{root / empty[0]}: empty class folder (no image files); add images or remove the folder")
    if classes is None:
        _warn_listed(root, names, paths)
    return Split(labels=torch.tensor(labels, dtype=torch.long), class_names=names, paths=paths, source=str(root))


def _read_metadata(root: Path, metadata: Path, classes: list[str] | None, labelling: Labelling) -> Split:
    """The images of a folder without class folders that its metadata list labels, on train's `classes` if given."""
    listed = read_list(metadata, classes, labelling=labelling)
    named = {os.path.abspath(p) for p in listed.paths}
    unlisted = [p for p in root.iterdir() if p.is_file() and is_image_file(p) and os.path.abspath(p) not in named]
    if unlisted:  # as Hugging Face's imagefolder reads it: only what the list labels; said, not silent
        them = "them" if len(unlisted) != 1 else "it"
        warnings.warn(
            f"{root}: {len(unlisted)} image file{'s' * (len(unlisted) != 1)} not in {metadata.name} left out "
            f"(e.g. {unlisted[0].name}); label {them} there to use {them}"
        )
    return listed if classes is None else on_train_classes(listed, classes, str(root.parent / "train"))


def _named_by_pattern(root: Path, classes: list[str] | None, pattern: str) -> Split:
    """The images directly in a folder without class folders, each of the class the first group of `pattern`
    (data.name_pattern) finds in its file's name (fastai's from_name_re); on train's `classes` where given. A name it
    does not match is one error, as is a pattern without a group."""
    try:
        compiled = re.compile(pattern)
    except re.error as err:
        raise DataError(
            f"data.name_pattern: '{pattern}' is no regular expression ({err}); e.g. '^(.*)_\\d+\\.'"
        ) from None
    if compiled.groups < 1:
        raise DataError(
            f"data.name_pattern: '{pattern}' has no group; put ( ) around the class in a name: '^(.*)_\\d+\\.'"
        )
    loose = sorted(p for p in root.iterdir() if p.is_file() and is_image_file(p))
    found = [compiled.search(p.name) for p in loose]
    missed = [p for p, match in zip(loose, found) if match is None or not match.group(1)]
    if not loose or missed:
        some = f"{len(missed)} of its {len(loose)} images" if loose else "no image directly in it"
        raise DataError(
            f"{root}: data.name_pattern='{pattern}' names no class in {some}"
            + (f" (e.g. {missed[0].name})" if missed else "")
            + "; fix the pattern, or move those images out"
        )
    named = [class_name(match.group(1)) for match in found]
    names = sorted(set(named), key=label_order)
    index = {name: i for i, name in enumerate(names)}
    split = Split(
        labels=torch.tensor([index[name] for name in named], dtype=torch.long),
        class_names=names,
        paths=loose,
        source=str(root),
        read_as=f"{root.name}/: {len(names)} classes from the file names by data.name_pattern='{pattern}'",
    )
    return split if classes is None else on_train_classes(split, classes, str(root.parent / "train"))


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


def _refuse_columns(root: Path, labelling: Labelling, found: list[str]) -> None:
    """data.label_column and data.group_column name a list's columns: a folder read without a list refuses them,
    naming the list beside its class folders that names their images, where one does."""
    beside = list_naming(root, [p for name in found for p in image_files(root / name)]) if found else None
    refuse_labelling(
        root,
        "class folders" if found else "images without a list",
        labelling,
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


NUMBERED = re.compile(r"^(.+?)([._\- ]?)\d+$")  # a file name's stem as <class><separator><number>: cat.0, Abyssinian_12


def classes_in_names(paths: list[Path], most: int = 100) -> str:
    """Where images without class folders are named by class (Kaggle's cat.0.jpg, Oxford-IIIT Pet's
    american_bulldog_10.jpg): a hint that says so and gives the data.name_pattern that reads them; "" where their
    names are not a class and a number each, start with one class or more than `most`, or with one only one image has."""
    if not all(isinstance(p, (str, os.PathLike)) for p in paths):  # records of shards name no files
        return ""
    found = [NUMBERED.match(Path(p).stem) for p in paths]
    if not found or any(match is None for match in found):
        return ""
    words = Counter(match.group(1) for match in found)
    marks = {match.group(2) for match in found}
    if not 2 <= len(words) <= most or min(words.values()) < 2 or len(marks) > 1 or any(w.isdigit() for w in words):
        return ""
    mark = re.escape(marks.pop())
    pattern = f"^(.*){mark}\\d+\\." if mark else "^(.*?)\\d+\\."
    shown = ", ".join(sorted(words)[:4]) + (" ..." if len(words) > 4 else "")
    return f"; their names start with {len(words)} classes ({shown}) and a number: data.name_pattern='{pattern}' reads them so"
