"""Lists of images: a CSV (path,label) or JSONL ({"path": ..., "label": ...}) file, a folder holding one list per
split (train.csv, val.jsonl, test.csv ...), and the metadata.csv / metadata.jsonl that labels a folder of images
(Hugging Face's imagefolder). Paths are relative to the list; labels are class names or integers.

Kaggle's and Roboflow's lists read as they ship: an id column (image_id, id) naming a file without its suffix in a
folder beside the list (`located.find_listed`), a label column of another name where it is the only other column, or a column a
class of 0 and 1 (one-hot); a list of any name labelling the images of its folder (`metadata_file`). The Split's
`read_as` says how, for the plan.

A `labels` (or `tags`) column gives each image a set of classes (multi-label): a JSON list in JSONL
({"path": "a.jpg", "labels": ["cat", "dog"]}), labels joined by ';' in CSV (a.jpg,cat;dog); where no cell holds ';', by
'|' or ',' where cells hold them, else by spaces where the cells are sets of a few words (`_label_separator`); an
empty set is allowed."""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from vitkit.errors import DataError, first_line
from vitkit.files import read_regular

from ..images import IMAGE_SUFFIXES
from ..split import (
    SPLITS,
    Split,
    class_name,
    held_out,
    label_order,
    multi_hot,
    on_classes,
    split_folders,
    warn_groups_apart,
)
from .located import find_listed
from .parts import group_cells, split_column, split_tags

LIST_SUFFIXES = (".csv", ".jsonl", ".ndjson", ".tsv", ".txt")

# a list labelling a folder's images, whatever its name (not .txt: a README, a licence)
LISTS_BESIDE = tuple(suffix for suffix in LIST_SUFFIXES if suffix != ".txt")

METADATA_LISTS = (
    "metadata.csv",
    "metadata.jsonl",
)  # Hugging Face's imagefolder: a split's images and their labels beside them

MAX_LABEL = 1000  # characters in a class name

MAX_LIST_BYTES = 1 << 30  # a .csv/.jsonl list (ImageNet's 1.28M lines take ~60 MB)

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
    # Kaggle's lists name the image by an id (image_id, id_code ...), often without its file's suffix
    "image_id",
    "image_name",
    "fname",  # fastai's
    "img_id",
    "id_code",
    "id",
)

LABEL_COLUMNS = ("label", "class", "class_name", "category", "target", "y")

MULTI_LABEL_COLUMNS = ("labels", "tags")  # each image's set of classes

# the cells of a one-hot column (ISIC's, Plant Pathology's: a column a class): a class's mark, and its absence
MARKED, UNMARKED = ("1", "1.0"), ("0", "0.0")
ONE_HOT = MARKED + UNMARKED

LABEL_SEPARATOR = ";"  # between the labels of one CSV cell
OTHER_SEPARATORS = ("|", ",")  # where no cell holds LABEL_SEPARATOR, the first of these any cell holds joins them

_COLUMN_NAMES = (
    "'path' (or file_name, filename, image ...) and 'label' (or class, category, target; text or integer), or "
    "'labels' for several"
)


@dataclass(frozen=True)
class Labelling:
    """How the data config says to read labels and groups that the data does not tell."""

    label_column: str | None = None  # a list's column of each image's class (HAM10000's dx)
    group_column: str | None = None  # a list's column of images that belong together, held out whole (lesion_id)
    # a regular expression whose first group in an image file's name is its class (fastai's from_name_re), for images
    # without class folders or a list: Oxford-IIIT Pet's Abyssinian_12.jpg
    name_pattern: str | None = None


class UnlabelledList(DataError):
    """A list that names images without labels (a competition's test.csv): no split to train on or score."""


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


def listed_split(
    lists: dict[str, Path],
    split: str,
    val_fraction: float,
    seed: int,
    rule: str = "stratified",
    labelling: Labelling = Labelling(),
) -> Split | None:
    """`split` of a dataset held as one list per split: train.csv (val held out of it where there is no val list)
    and, for val and test, their lists with labels numbered by train's classes (a class train lacks is an error).
    None where the dataset has no such split (a test split without its list)."""
    train = read_list(lists["train"], labelling=labelling)
    if split == "train" and "val" in lists:
        return train
    if split == "train" or split == "val" and "val" not in lists:
        return held_out(train, split, val_fraction, seed, rule)
    if split not in lists:
        return None
    listed = read_list(lists[split], train.class_names, labelling=labelling)
    warn_groups_apart(train, listed, f"move each {listed.group_column}'s images into one list")
    trained = {os.path.normpath(p) for p in train.paths}
    shared = [p for p in listed.paths if os.path.normpath(p) in trained]
    if shared:
        raise DataError(
            f"{lists[split]}: {len(shared)} of its {len(listed)} images {'is' if len(shared) == 1 else 'are'} also in {lists['train'].name} (e.g. {shared[0]}); "
            f"the {split} split must hold images the model does not train on: list each in one of them"
        )
    return on_train_classes(listed, train.class_names, train.source)


def on_train_classes(listed: Split, names: list[str], train_source: str) -> Split:
    """A listed val or test split labelled by train's classes `names`; a class train lacks is an error."""
    unknown = [name for name in listed.class_names if name not in names]
    if unknown:
        raise DataError(
            f"{listed.source}: class {unknown[0]!r} is not one of the {len(names)} classes of {train_source}"
        )
    return on_classes(listed, names)


def metadata_file(root: Path) -> Path | None:
    """A folder's list of its images and their labels: metadata.csv or metadata.jsonl (Hugging Face's imagefolder),
    else the one list in it that reads as one (Roboflow's train/_classes.csv, Kaggle's labels.csv beside train/);
    None where there is none. Two are one error naming both."""
    found = [root / name for name in METADATA_LISTS if (root / name).is_file()]
    if len(found) > 1:
        raise DataError(f"{root}: {found[0].name} and {found[1].name} both label its images; keep one")
    return found[0] if found else _one_list_in(root)


def _one_list_in(root: Path) -> Path | None:
    """The one file in `root` that reads as a list of images with labels (`read_list`); a submission of
    probabilities, a table of something else, a list of images that are not there, is none."""
    found = []
    for candidate in sorted(f for f in root.iterdir() if f.suffix.lower() in LISTS_BESIDE and f.is_file()):
        try:
            read_list(candidate, part="train" if list_parts(candidate) else None)
        except DataError:
            continue
        found.append(candidate)
    if len(found) > 1:
        raise DataError(
            f"{root}: {found[0].name} and {found[1].name} both list its images with labels; give one as the data "
            f"(--data {found[0]})"
        )
    return found[0] if found else None


def refuse_labelling(path: str | os.PathLike, kind: str, labelling: Labelling, fix: str | None = None) -> None:
    """data.label_column and data.group_column name a list's columns, data.name_pattern the classes in the names of
    loose images: data of another `kind`, which labels and groups its images its own way, refuses them, saying `fix`
    (by default: drop the key, or give a list)."""
    for key in ("label_column", "group_column", "name_pattern"):
        value = getattr(labelling, key)
        if value is not None:
            what = "the classes in file names" if key == "name_pattern" else "a list's column"
            how = fix or (
                "drop the key"
                if key == "name_pattern"
                else "drop the key, or give a list as the data (--data FILE.csv)"
            )
            raise DataError(f"{path}: data.{key}={value} names {what}, but this data is {kind}; {how}")


def list_naming(root: Path, images: list[Path], sample: int = 16) -> tuple[Path, list[str], bool] | None:
    """A list in `root` (a CSV with a header naming an image column) whose first `sample` images are at least half
    among `images`, by name or by name without its suffix: the list, its header's names, and whether they name a
    label column; None where none is. For class folders that may be parts of one set a list labels."""
    candidates = sorted(f for f in root.iterdir() if f.suffix.lower() in (".csv", ".tsv") and f.is_file())
    names = {p.name for p in images} | {p.stem for p in images} if candidates else set()
    for candidate in candidates:
        try:
            head = _list_text(candidate).splitlines()[: sample + 1]
            rows = list(csv.reader(head, delimiter="\t" if candidate.suffix.lower() == ".tsv" else ","))
        except (DataError, csv.Error):
            continue
        where = _path_column(rows[0]) if rows else None
        looked = [
            Path(row[where].strip().replace("\\", "/")).name
            for row in rows[1:]
            if where is not None and where < len(row)
        ]
        if looked and 2 * sum(name in names for name in looked) >= len(looked):
            return candidate, [c.strip() for c in rows[0]], _columns(rows[0]) is not None
    return None


def read_list(
    path: Path,
    classes: list[str] | None = None,
    part: str | None = None,
    alone: bool = False,
    labelling: Labelling = Labelling(),
) -> Split:
    """A CSV (path,label, with or without header) or JSONL ({"path": ..., "label": ...}) list; paths relative to the
    file. `classes`: train's, where this list is of another split (a CSV labels column's labels are told apart by
    them). `part`: of a list with a split column (`parts.split_tags`), the rows of that split; such a list read whole
    is an error. A list holding every split (`alone`, or with a split column) whose labels column gives each image
    one label is one class an image (fastai's `labels`), as no other list can label a split otherwise.
    `labelling` names the column of the labels where the header's names do not tell it, and that of each image's
    group."""
    refuse_labelling(path, "a list, which labels its images", Labelling(name_pattern=labelling.name_pattern))
    text = _list_text(path)
    rows, lines, joined, told = _list_rows(path, text, classes, labelling.label_column)
    if not rows:
        raise DataError(f"{path}: the list is empty")
    if (alone or part) and isinstance(rows[0][1], tuple) and all(len(labels) == 1 for _, labels in rows):
        rows, told = (
            [(p, labels[0]) for p, labels in rows],
            told or "its labels column holds one label an image: single-label",
        )
    located, found = find_listed(path, [p for p, _ in rows])
    _refuse_repeats(path, located, lines)
    keep = _rows_of(path, part, split_tags(path, text, lines), len(rows))
    rows, paths = [rows[i] for i in keep], [located[i] for i in keep]
    grouped = group_cells(path, text, [lines[i] for i in keep], labelling.group_column)
    sets = [[class_name(label) for label in (labels if isinstance(labels, tuple) else [labels])] for _, labels in rows]
    sets, named = _named_indices(path, sets)
    names = sorted({label for labels in sets for label in labels}, key=label_order)
    index = {name: i for i, name in enumerate(names)}
    if isinstance(rows[0][1], tuple):  # a labels column: each image's set of classes
        if not names:
            raise DataError(f"{path}: no image has a label; list at least one class in the labels column")
        labels = multi_hot([[index[label] for label in labels] for labels in sets], len(names))
    else:
        labels = torch.tensor([index[labels[0]] for labels in sets], dtype=torch.long)
    by = "spaces" if joined is None else f"'{joined}'"
    said = (
        f"joined by {by} in the labels column of {path.name}, as no cell holds ';'" if joined != LABEL_SEPARATOR else ""
    )
    column, groups, given = grouped or ("", None, False)
    by = f"{len(set(groups))} {column!r} groups (data.group_column)" if given else ""
    read_as = (
        f"{path.name}: {'; '.join(filter(None, (told, found, named, by)))}" if told or found or named or by else ""
    )
    return Split(
        labels=labels,
        class_names=names,
        paths=paths,
        source=str(path),
        selection="all" if part is None else f"the {part} rows of its split column",
        labels_read=said,
        read_as=read_as,
        groups=None if groups is None else np.array(groups),
        group_column=column,
        grouped=given,
    )


def _list_rows(
    path: Path, text: str, classes: list[str] | None, label_column: str | None
) -> tuple[list[tuple[str, str | tuple]], list[int], str | None, str]:
    """(path, label) of each row of a CSV or JSONL list, the line each is on, what joins a CSV labels column's labels
    and how its columns were told (`_csv_rows`)."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return (*_jsonl_rows(path, text, label_column), LABEL_SEPARATOR, "")
    if suffix == ".txt" and (spaced := _spaced(text)) is not None:
        rows, lines, joined, told = _csv_rows(path, spaced, "\t", classes, label_column, guess_header=False)
        skipped = ", '#' lines skipped" if any(line.lstrip().startswith("#") for line in text.splitlines()) else ""
        return rows, lines, joined, ", ".join(filter(None, (told, f"fields split at spaces{skipped}")))
    if suffix in (".csv", ".tsv", ".txt"):
        return _csv_rows(path, text, "\t" if suffix == ".tsv" else ",", classes, label_column)
    raise DataError(f"{path}: unknown list format {suffix!r}; use .csv (path,label) or .jsonl")


def _spaced(text: str) -> str | None:
    """A .txt list of fields split at spaces (Caffe's `n01440764/n01440764_10026.JPEG 0`, Oxford-IIIT Pet's
    `Abyssinian_100 1 1 1`) as tab-separated text, its '#' comment lines blank (the lines keep their numbers); None
    where its first line of fields holds a comma or one field (a CSV list)."""
    lines = text.splitlines()
    first = next((line for line in lines if line.strip() and not line.lstrip().startswith("#")), None)
    if first is None or "," in first or len(first.split()) < 2:
        return None
    return "\n".join("" if line.lstrip().startswith("#") else "\t".join(line.split()) for line in lines)


CLASS_NAMES_FILE = "classes.txt"  # a class name a line, as beside tar shards: label i is line i
MAX_NAMES_BYTES = 1 << 20  # a file of class names beside a list


def _named_indices(path: Path, sets: list[list[str]]) -> tuple[list[list[str]], str]:
    """Integer labels named by a file beside the list: classes.txt (label i on line i) or a JSON object of label to
    name (Cassava's label_num_to_disease_map.json), where it names every label, each differently; the labels as they
    are elsewhere. Also what named them, for the plan."""
    labels = {label for labels in sets for label in labels}
    if not labels or not all(label.isdigit() and len(label) < 10 for label in labels):
        return sets, ""
    for file in [path.parent / CLASS_NAMES_FILE, *sorted(path.parent.glob("*.json"))[:16]]:
        names = _names_in(file)
        if names and labels <= set(names) and len({names[label] for label in labels}) == len(labels):
            return [[names[label] for label in labels_of] for labels_of in sets], f"class names from {file.name}"
    return sets, ""


def _names_in(file: Path) -> dict[str, str] | None:
    """label -> class name of classes.txt (a name a line) or of a JSON object of them; None where it holds none."""
    try:
        text = read_regular(file, MAX_NAMES_BYTES, DataError, what="a file of class names").decode("utf-8-sig")
        found = (
            {str(i): line.strip() for i, line in enumerate(text.splitlines()) if line.strip()}
            if file.suffix == ".txt"
            else json.loads(text)
        )
    except (OSError, DataError, ValueError, RecursionError):
        return None
    if not isinstance(found, dict) or not all(isinstance(v, str) and _is_label(v.strip()) for v in found.values()):
        return None
    return {str(k).strip(): class_name(v.strip()) for k, v in found.items()}


def _rows_of(path: Path, part: str | None, tags: list[str] | None, n: int) -> list[int]:
    """The indices of the rows of split `part` of a list with a split column (`tags`, each row's), all `n` of a list
    without one. A list with one read whole would train on its val and test images: one error."""
    if tags is None and part is None:
        return list(range(n))
    if tags is None:
        raise DataError(f"{path}: has no split column; it cannot give the {part} split")
    if part is None:
        raise DataError(
            f"{path}: has a split column; give the list itself as the data (--data {path}), which reads its splits, or "
            "drop the column"
        )
    keep = [i for i, tag in enumerate(tags) if tag == part]
    if not keep:
        raise DataError(f"{path}: no line of its split column names {part}")
    return keep


def list_parts(path: Path) -> list[str]:
    """The splits a list's split column holds, in SPLITS order; [] for a list without one."""
    try:
        text = _list_text(path)
    except DataError:
        return []  # reading it as a list says why
    tags = split_tags(path, text)
    return [split for split in SPLITS if tags is not None and split in tags]


def _list_text(path: Path) -> str:
    """The text of a list, of at most MAX_LIST_BYTES."""
    try:
        data = read_regular(path, MAX_LIST_BYTES, DataError, what="a list of images")
        return data.decode("utf-8-sig")  # a byte-order mark (Excel's "CSV UTF-8") is not part of the header
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: cannot read the list ({first_line(err)})") from None


def _jsonl_rows(
    path: Path, text: str, label_column: str | None = None
) -> tuple[list[tuple[str, str | tuple]], list[int]]:
    """(path, label) of each object of a JSONL list, and the line each is on; the first object names the keys (the
    label's: `label_column` where given). The label of a `labels` key, or a list under `label_column`, is a tuple: the
    image's classes."""
    rows: list[tuple[str, str | tuple]] = []
    lines: list[int] = []  # each row's line in the file
    keys: tuple[str, str] | None = None
    multi = False
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
        if keys is None and isinstance(row, dict) and (found := _columns(list(row), label_column)) is not None:
            keys = tuple(list(row)[i] for i in found[:2])  # the first object's names hold for every line
            multi = found[2] or label_column is not None and isinstance(row[keys[1]], list)
            split_column(list(row), str(path))
        elif keys is None and label_column is not None:
            raise DataError(
                f"{path}:{line_no}: {_no_named_column(list(row) if isinstance(row, dict) else [], label_column)}"
            )
        value = row.get(keys[1]) if keys is not None and isinstance(row, dict) else None
        _refuse_negative_index(value, f"{path}:{line_no}")
        if multi and isinstance(row, dict) and isinstance(row.get(keys[0]), str):
            rows.append((row[keys[0]], _label_set(value, f"{path}:{line_no}")))
            lines.append(line_no)
            continue
        if keys is None or not isinstance(row, dict) or not isinstance(row.get(keys[0]), str) or not _is_label(value):
            raise DataError(f"{path}:{line_no}: expected a JSON object with {_COLUMN_NAMES}")
        rows.append((row[keys[0]], str(value)))
        lines.append(line_no)
    return rows, lines


def _csv_rows(
    path: Path,
    text: str,
    delimiter: str,
    classes: list[str] | None = None,
    label_column: str | None = None,
    guess_header: bool = True,
) -> tuple[list[tuple[str, str | tuple]], list[int], str | None, str]:
    """(path, label) of each line of a CSV list, the line each is on, what joins a labels column's labels
    (`_label_separator`, with train's `classes` where given; ';' where there is none), and how the columns were told
    where the header names no label column (`_header_columns`); a header, where there is one, names the columns, else
    they are path,label. `label_column` names the header's label column. Without `guess_header`, a first line is a
    header only where it names known columns."""
    reader, table = csv.reader(text.splitlines(), delimiter=delimiter), []
    try:
        table += [(line_no, row) for line_no, row in enumerate(reader, 1) if row]
    except csv.Error as err:  # a field over csv's size limit, a NUL byte, an unclosed quote
        raise DataError(f"{path}:{reader.line_num}: not a valid CSV line ({first_line(err)})") from None
    columns, multi, told = (0, 1), False, ""
    if table and label_column is not None:
        *columns, multi, told = _named_columns(path, table, label_column)
        header, table = table[0][1], table[1:]
    elif table and _csv_header(path, table, guess_header):
        *columns, multi, told = _header_columns(path, table)
        header, table = table[0][1], table[1:]
    if isinstance(columns[1], list):
        rows = _one_hot_rows(path, header, table, columns[0], columns[1])
        return rows, [line_no for line_no, _ in table], LABEL_SEPARATOR, told
    rows: list[tuple[str, str | tuple]] = []
    # where no cell of a labels column holds ';', spaces may join its labels (Kaggle's lists: "clear primary water")
    separator = _label_separator([row[columns[1]] for _, row in table if multi and len(row) > max(columns)], classes)
    for line_no, row in table:
        if multi and len(row) > max(columns) and row[columns[0]].strip():
            cell = [label.strip() for label in row[columns[1]].split(separator) if label.strip()]
            rows.append((row[columns[0]].strip(), _label_set(cell, f"{path}:{line_no}")))
            continue
        if len(row) <= max(columns) or not row[columns[0]].strip() or not _is_label(row[columns[1]].strip()):
            shown = repr(row) if len(repr(row)) < 80 else repr(row)[:77] + "..."
            raise DataError(
                f"{path}:{line_no}: expected 'path,label' (a label of at most {MAX_LABEL} characters), got {shown}"
            )
        rows.append((row[columns[0]].strip(), row[columns[1]].strip()))
    return rows, [line_no for line_no, _ in table], separator if multi else LABEL_SEPARATOR, told


def _one_hot_rows(
    path: Path, header: list[str], body: list[tuple[int, list[str]]], where: int, others: list[int]
) -> list[tuple[str, str | tuple]]:
    """(path, label) of each line of a list with a column a class (0 or 1): the class of its 1 where every line has
    one 1, else each image's set of classes (multi-label)."""
    names = [header[i].strip() for i in others]
    empty = next((line_no for line_no, row in body if len(row) <= where or not row[where].strip()), None)
    if empty is not None:
        raise DataError(f"{path}:{empty}: no image in the {header[where].strip()!r} column; name one, or drop the line")
    sets = [tuple(n for n, i in zip(names, others) if i < len(row) and row[i].strip() in MARKED) for _, row in body]
    if all(len(labels) == 1 for labels in sets):
        return [(row[where].strip(), labels[0]) for (_, row), labels in zip(body, sets)]
    return [(row[where].strip(), labels) for (_, row), labels in zip(body, sets)]


def _header_columns(path: Path, table: list[tuple[int, list[str]]]) -> tuple[int, int | list[int], bool, str]:
    """(path column, label column, whether it is a labels column, how they were told) a CSV list's header names. A
    header naming the path but no label column: the other column of two is the label (Kaggle's `id,breed`), and
    columns of 0 and 1 only are one-hot classes (`image,MEL,NV,...`): their indices; other headers are an error."""
    header = table[0][1]
    columns = _columns(header)
    marked = split_column(header, str(path))
    if columns is not None:
        return (*columns, "")
    names = [c.strip() for c in header]
    where = _path_column(header)
    # the split column tells where an image is, not its class
    others = [i for i in range(len(header)) if i != where and (marked is None or names[i] != marked[0].strip())]
    cells = [row[i].strip() for _, row in table[1:] for i in others if i < len(row)]
    if where is not None and len(others) > 1 and cells and all(cell in ONE_HOT for cell in cells):
        return where, others, True, f"{names[where]!r} the image, one-hot columns {', '.join(names[i] for i in others)}"
    if where is not None and len(others) == 1 and not _all_differ(table[1:], others[0]):
        return where, others[0], False, f"{names[where]!r} the image, {names[others[0]]!r} its label"
    if where is not None and not others:
        raise UnlabelledList(
            f"{path}: names images ({names[where]!r}) without labels, as a competition's test list does; training and "
            "scoring need a label column (vitkit predict classifies unlabelled images)"
        )
    if where is not None and len(others) == 1:
        raise DataError(
            f"{path}:1: {names[where]!r} names the images, but {names[others[0]]!r} holds another value on every line "
            "(a caption or an id, no class); add a column 'label' (or class, category, target) of their classes"
        )
    if where is not None:
        shown = ", ".join(names[i] for i in others[:6]) + (" ..." if len(others) > 6 else "")
        raise DataError(
            f"{path}:1: {names[where]!r} names the images; which of the other {len(others)} columns ({shown}) is the "
            "label? name it with data.label_column=COLUMN, or rename it 'label' (or 'labels' for several an image)"
        )
    raise DataError(
        f"{path}:1: {','.join(names)[:60]!r} reads as a header, but names no path and label columns; name them "
        f"{_COLUMN_NAMES}, or remove the line"
    )


def _named_columns(path: Path, table: list[tuple[int, list[str]]], label_column: str) -> tuple[int, int, bool, str]:
    """(path column, label column, whether it is a labels column, how they were told) of a CSV list whose label column
    data.label_column names (any case): a labels column where its name is one (labels, tags) or a cell holds ';' or
    '|' (ChestX-ray14's "Effusion|Mass"). The first line is the header."""
    header = table[0][1]
    split_column(header, str(path))
    found = _columns(header, label_column)
    if found is None:
        raise DataError(f"{path}:1: {_no_named_column(header, label_column)}")
    where, column, multi = found
    names = [c.strip() for c in header]
    cells = [row[column] for _, row in table[1:] if column < len(row)]
    multi = multi or any(mark in cell for cell in cells for mark in (LABEL_SEPARATOR, "|"))
    return (
        where,
        column,
        multi,
        f"{names[where]!r} the image, {names[column]!r} its label{'s' * multi} (data.label_column)",
    )


def _no_named_column(names: list, label_column: str) -> str:
    """Why a header (or a JSON object's keys) has no label column `label_column` beside an image column."""
    given = ", ".join(str(n).strip() for n in names)
    shown = given if len(given) <= 120 else given[:117] + "..."
    if _path_column(names) is None:
        return (
            f"names no image column (path, file_name, image, image_id ...) beside {label_column!r}; its names: {shown}"
        )
    if label_column.strip().lower() == str(names[_path_column(names)]).strip().lower():
        return f"data.label_column={label_column} names its image column; name the column of the labels"
    return f"no column {label_column!r} (data.label_column); its names: {shown}"


def _all_differ(body: list[tuple[int, list[str]]], column: int, least: int = 20) -> bool:
    """Whether a column holds another value on each of at least `least` lines: a caption or an id, no class."""
    cells = [row[column].strip() for _, row in body if column < len(row)]
    return len(cells) >= least and len(set(cells)) == len(cells)


def _refuse_repeats(path: Path, paths: list[Path], lines: list[int]) -> None:
    """An image listed twice is one error naming both lines: a held-out cut could put one copy in train and the other
    in val, and two labels for one image cannot both be right."""
    seen: dict[str, int] = {}
    for file, line in zip(paths, lines):
        key = os.path.normpath(file)
        if key in seen:
            raise DataError(f"{path}:{line}: {file} is listed again (first on line {seen[key]}); list each image once")
        seen[key] = line


def _columns(names: list, label_column: str | None = None) -> tuple[int, int, bool] | None:
    """(path column, label column, whether it is a labels column: each image's set of classes) named in a CSV header
    or a JSON object's keys (any case), None unless both are; one label wins over a set where both are named.
    `label_column` (data.label_column) names the label column; it cannot be the path column."""
    lowered = [str(n).strip().lower() for n in names]
    if label_column is not None:
        path, named = _path_column(names), label_column.strip().lower()
        if path is None or named not in lowered or lowered.index(named) == path:
            return None
        return path, lowered.index(named), named in MULTI_LABEL_COLUMNS
    label, labels = (
        next((lowered.index(n) for n in group if n in lowered), None) for group in (LABEL_COLUMNS, MULTI_LABEL_COLUMNS)
    )
    path = _path_column(names)
    if path is None or label is None and labels is None:
        return None
    return (path, label, False) if label is not None else (path, labels, True)


def _path_column(names: list) -> int | None:
    """The column of a header (or key of a JSON object) naming the image, in PATH_COLUMNS order; None where none does."""
    lowered = [str(n).strip().lower() for n in names]
    return next((lowered.index(n) for n in PATH_COLUMNS if n in lowered), None)


def _label_separator(cells: list[str], classes: list[str] | None) -> str | None:
    """What joins the labels in the cells of a CSV labels column: ';' (LABEL_SEPARATOR); where no cell holds it, '|'
    or ',' where a cell holds one (OTHER_SEPARATORS), else spaces (None, as str.split takes it) where some cell holds
    words and the cells are sets of a few words (fewer different words than different cells: "red", "blue",
    "red blue", "blue green"), or, given train's `classes`, a cell that is no class is words that all are. "ankle
    boot", "bag" stay a label each."""
    cells = [cell.strip() for cell in cells]
    if any(LABEL_SEPARATOR in cell for cell in cells):
        return LABEL_SEPARATOR
    # MovieLens' "Action|Adventure", a list joined by commas in a quoted cell ("cat,dog"): no class name holds them
    joined = next((mark for mark in OTHER_SEPARATORS if any(mark in cell for cell in cells)), None)
    if joined is not None:
        return joined
    if not any(len(cell.split()) > 1 for cell in cells):
        return LABEL_SEPARATOR
    if classes is not None:
        known = set(classes)
        sets = [cell for cell in set(cells) if cell not in known and len(cell.split()) > 1]
        return None if sets and all(set(cell.split()) <= known for cell in sets) else LABEL_SEPARATOR
    words = {word for cell in cells for word in cell.split()}
    return None if len(words) < len(set(cells)) else LABEL_SEPARATOR


def _label_set(value, where: str) -> tuple[str, ...]:
    """The classes of one image in a labels column: a list of labels (JSONL) or a CSV cell's; none is allowed."""
    if not isinstance(value, list) or not all(_is_label(v) for v in value):
        raise DataError(
            f'{where}: expected a list of labels (JSON: "labels": ["cat", "dog"]; CSV: cat;dog), '
            f"each text of at most {MAX_LABEL} characters or an integer; [] or an empty cell for none"
        )
    if len(set(map(str, value))) != len(value):
        raise DataError(f"{where}: a label is given twice ({value!r}); list each class of an image once")
    return tuple(map(str, value))


def _csv_header(path: Path, table: list[tuple[int, list[str]]], guess: bool = True) -> bool:
    """Whether a CSV list's first line is a header: it names known columns, or (`guess`) its first field is no file and
    not an image's name and its second is a label no other line has (a header of unknown names, which would otherwise
    become a class)."""
    first = table[0][1]
    try:
        if (path.parent / first[0].strip()).is_file():
            return False
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte: no file, and no header name either
        return False
    if _columns(first) is not None or _path_column(first) is not None:
        return True
    # a line of a missing image: found missing later, by name
    if not guess or Path(first[0].strip()).suffix.lower() in IMAGE_SUFFIXES:
        return False
    return (
        len(first) >= 2
        and len(table) > 1
        and all(len(row) < 2 or row[1].strip() != first[1].strip() for _, row in table[1:])
    )


def _refuse_negative_index(value, where: str) -> None:
    """A DataError naming `where` for a JSON integer label (or one of a labels list) below 0: a class index is a whole
    number >= 0, and -1 would otherwise become a class named "-1"."""
    negative = next((v for v in (value if isinstance(value, list) else [value]) if _is_index(v) and v < 0), None)
    if negative is not None:
        raise DataError(
            f'{where}: label {negative}: a class index is a whole number >= 0 (a class name is text, e.g. "{negative}"); '
            "fix the line, or leave the image out"
        )


def _is_index(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_label(value) -> bool:
    """A class label of a list: non-empty text of at most MAX_LABEL characters, or an integer (not a bool)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return len(str(value)) <= MAX_LABEL
    return isinstance(value, str) and 0 < len(value) <= MAX_LABEL and value.isprintable()
