"""A list's split and group columns: which split each image of one list is in, and which images belong together.

`split` or `subset` names the split column (train; val, validation, valid or dev; test; any case), as datasets
exported with their splits hold it; fastai's `is_valid` (`is_val`) marks validation images true. A `fold` column
(k-fold cross-validation) names no split and is refused. A group column (data.group_column, or one named as
GROUP_COLUMNS are) names what images belong together: HAM10000's lesion_id, ChestX-ray14's Patient ID.

`split_tags` and `group_cells` read a column of a list's text, line by line as the list's rows are; `lists.read_list`
keeps the rows of one split and each image's group, and `open_split` serves a list with a split column as a dataset
with those splits."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from vitkit.errors import DataError

from ..split import SPLIT_NAMES

SPLIT_COLUMNS = ("split", "subset")  # each line's split by name
VALID_COLUMNS = ("is_valid", "is_val")  # fastai's: true for a validation image, false for a training one
FOLD_COLUMNS = ("fold",)
TRUE, FALSE = ("true", "1", "yes", "1.0"), ("false", "0", "no", "0.0", "")
# columns that name an image's group where no key does (any case, spaces as _): a held-out cut by image puts images of
# one group on both sides, which is warned of
GROUP_COLUMNS = (
    "lesion_id",
    "patient_id",
    "patientid",
    "patient",
    "subject_id",
    "participant_id",
    "case_id",
    "study_id",
    "person_id",
    "individual_id",
    "animal_id",
    "specimen_id",
    "group_id",
)


def split_column(names: list, where: str = "the list") -> tuple[str, bool] | None:
    """(the split column's name as written, whether it marks validation images true) of a header or a JSON object's
    keys; None where none is named. A fold column is one error naming `where`."""
    lowered = {str(n).strip().lower(): str(n) for n in names}
    fold = next((lowered[n] for n in FOLD_COLUMNS if n in lowered), None)
    if fold is not None:
        raise DataError(
            f"{where}: {fold!r}: a fold column names no split; write the fold to hold out as a split column (split: train or "
            "val), or one list per split (train.csv, val.csv) in a folder and give the folder"
        )
    for group, marks in ((SPLIT_COLUMNS, False), (VALID_COLUMNS, True)):
        found = next((lowered[n] for n in group if n in lowered), None)
        if found is not None:
            return found, marks
    return None


def split_tags(path: Path, text: str, lines: list[int] | None = None) -> list[str] | None:
    """The split (SPLIT_NAMES' key) of each row of a list, the rows on `lines` of its `text` (None: every row); None
    where the list has no split column (a CSV's header or the first JSON object names none)."""
    cells = _column_cells(path, text, lambda names: split_column(names, str(path)))
    if cells is None:
        return None
    (name, marks), by_line = cells
    return [_split_of(by_line.get(line, ""), name, marks, f"{path}:{line}") for line in lines or sorted(by_line)]


def group_cells(path: Path, text: str, lines: list[int], column: str | None) -> tuple[str, list[str], bool] | None:
    """(the group column's name, each row's group, whether `column` named it) of the rows on `lines` of a list:
    the column `column` names (data.group_column, any case; a list without it is one error), else one named as
    GROUP_COLUMNS are where its rows are not all of one group; None otherwise. An empty cell is a group of its image."""

    def named(names: list) -> tuple[str] | None:
        return next(((str(n),) for n in names if str(n).strip().lower() == column.strip().lower()), None)

    cells = _column_cells(path, text, named if column is not None else _group_column)
    if cells is None and column is not None:
        raise DataError(f"{path}:1: no column {column!r} (data.group_column) in its header; name one it has")
    if cells is None:
        return None
    (name, *_), by_line = cells
    groups = [str(by_line.get(line, "")).strip() or f"\0line {line}" for line in lines]
    if column is None and len(set(groups)) == 1 and len(groups) > 1:
        return None  # all one group ("n/a"): no group the column tells apart
    return name.strip(), groups, column is not None


def _group_column(names: list) -> tuple[str] | None:
    """The first of a header's names that is one of GROUP_COLUMNS (any case, spaces as _), as a 1-tuple."""
    return next(
        ((str(n),) for n in names if str(n).strip().lower().replace(" ", "_") in GROUP_COLUMNS),
        None,
    )


def _column_cells(path: Path, text: str, find) -> tuple[tuple, dict[int, object]] | None:
    """A column of a list that `find` picks from its header's names (or the first JSON object's keys): what `find`
    returned (the column's name first), and each line's cell in it; None where `find` picks none."""
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        return _jsonl_cells(text, find)
    return _csv_cells(text, "\t" if path.suffix.lower() == ".tsv" else ",", find)


def _csv_cells(text: str, delimiter: str, find) -> tuple[tuple, dict[int, str]] | None:
    """The column of a CSV list `find` picks from its header, and each line's cell in it; None without one, told
    from the header alone (a list of a million lines is parsed whole only where it has one)."""
    try:
        header = next((row for row in csv.reader(text.splitlines()[:64], delimiter=delimiter) if row), None)
        found = find(header) if header else None
        if found is None:
            return None
        rows = [(n, row) for n, row in enumerate(csv.reader(text.splitlines(), delimiter=delimiter), 1) if row]
    except csv.Error:  # reading the list names the line
        return None
    column = [c.strip() for c in rows[0][1]].index(found[0].strip())
    return found, {n: row[column] if column < len(row) else "" for n, row in rows[1:]}


def _jsonl_cells(text: str, find) -> tuple[tuple, dict[int, object]] | None:
    found, cells = None, {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):  # reading the list names the line
            continue
        if found is None:
            found = find(list(row)) if isinstance(row, dict) else None
            if found is None:
                return None
        if isinstance(row, dict):  # other lines: reading the list names them
            cells[n] = row.get(found[0], "")
    return (found, cells) if found else None


def _split_of(value, column: str, marks: bool, where: str) -> str:
    """The split a cell names: train, val or test by any of its names; for a column marking validation images,
    val where true and train where false."""
    text = str(value).strip().lower()
    if marks and text in TRUE + FALSE:
        return "val" if text in TRUE else "train"
    if not marks:
        named = next((split for split, names in SPLIT_NAMES.items() if text in names), None)
        named = named or {"training": "train", "testing": "test"}.get(text)
        if named is not None:
            return named
    expected = "true or false" if marks else "train, val (validation, valid, dev) or test"
    raise DataError(f"{where}: {column} {value!r}: expected {expected}")
