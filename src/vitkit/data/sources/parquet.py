"""Parquet files as Hugging Face `datasets` writes them, read through pyarrow (`pip install vitkit[parquet]`): an image
column of {bytes, path} structs, an integer label column, class names from the `ClassLabel` feature in the schema
metadata; a `Sequence(ClassLabel)` column (a list of class indices per row) makes a multi-label set. Their samples come in row-group windows (see `loader.block_order`) so a worker reads each row group once.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vitkit.errors import DataError
from vitkit.files import regular_file

from ..images import Record, read_image_file
from ..split import Split

NO_LABEL = "-1"  # a sample without a label, as Hugging Face writes an unlabelled split

ROW_GROUP_WINDOW = 16  # Parquet row groups whose samples are shuffled together (and cached per worker)

MAX_ROW_GROUP_BYTES = 2 << 30  # a row group's images, uncompressed: read whole, so a read holds this much at most

CACHED_BYTES = 1 << 30  # images of the row groups kept per process (the one read last is kept whatever its size)


@dataclass(frozen=True)
class ParquetRow(Record):
    file: str
    row_group: int
    row: int  # within the row group
    index: int  # within the file, for the name

    def __str__(self) -> str:
        return f"{self.file}:row {self.index}"

    def read(self) -> bytes:
        images = _row_group_images(self.file, self.row_group)
        data, path = images[self.row]
        if data is None and path:  # an image stored as a path, relative to the file
            return read_image_file(Path(self.file).parent / path)
        if data is None:
            raise DataError(f"{self}: the image is empty (no bytes and no path)")
        return data


# -- Parquet --------------------------------------------------------------------------------------
def _pyarrow():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError("reading Parquet files needs pyarrow: pip install 'vitkit[parquet]'") from None
    return pq


def _columns(file, path: Path, label_column: str | None = None) -> tuple[str, str | None, list[str] | None]:
    """(image column, label column or None, class names or None) of a Parquet file, from its Hugging Face features;
    the label column `label_column` names (any case) where given."""
    schema = file.schema_arrow
    features = {}
    meta = (schema.metadata or {}).get(b"huggingface")
    if meta:
        try:
            features = json.loads(meta).get("info", {}).get("features", {}) or {}
        except (ValueError, AttributeError):
            features = {}
    image = next((k for k, f in features.items() if isinstance(f, dict) and f.get("_type") == "Image"), None)
    if image is None:
        image = next((n for n in ("image", "img", "jpg", "png") if n in schema.names), None)
    if image is None or image not in schema.names:
        raise DataError(
            f"{path}: no image column (a Hugging Face Image feature, or a column named 'image'); found {', '.join(schema.names)}"
        )
    label = next((k for k, f in features.items() if _class_label(f) is not None), None)
    if label_column is not None:
        label = next((n for n in schema.names if n.lower() == label_column.strip().lower() and n != image), None)
        if label is None:
            raise DataError(
                f"{path}: no column {label_column!r} beside the images (data.label_column); its columns: "
                f"{', '.join(schema.names)}"
            )
    if label is None:
        label = next((n for n in ("label", "labels", "cls", "fine_label") if n in schema.names), None)
    names = _class_label(features.get(label)).get("names") if _class_label(features.get(label)) else None
    return image, label, names


def _class_label(feature) -> dict | None:
    """The ClassLabel of a Hugging Face feature: itself, or that of a sequence of them (Sequence(ClassLabel), List, or
    the [ClassLabel] list form: each row's classes); None for any other feature."""
    if isinstance(feature, list) and len(feature) == 1:
        feature = feature[0]
    elif isinstance(feature, dict) and feature.get("_type") in ("Sequence", "List", "LargeList"):
        feature = feature.get("feature")
    return feature if isinstance(feature, dict) and feature.get("_type") == "ClassLabel" else None


def read_parquet(files: list[Path], label_column: str | None = None) -> tuple[list, list[str], list[str] | None]:
    pq = _pyarrow()
    records, raw, names = [], [], None
    for path in files:
        try:
            regular_file(path, DataError)  # pyarrow opens it: no device, no FIFO
            file = pq.ParquetFile(path)
            image, label, found = _columns(file, path, label_column)
            values = file.read(columns=[label]).column(0).to_pylist() if label else [None] * file.metadata.num_rows
        except DataError:
            raise
        except Exception as err:  # pyarrow's errors: ArrowInvalid, OSError ...
            raise DataError(f"{path}: cannot read the Parquet file ({str(err).splitlines()[0]})") from None
        names = names or found
        index = 0
        for group in range(file.metadata.num_row_groups):
            _check_row_group(path, file.metadata.row_group(group), group, image)
            for row in range(file.metadata.row_group(group).num_rows):
                records.append(ParquetRow(str(path), group, row, index))
                index += 1
        # no label column: images alone ("" for all); a null in a label column: no label, as Hugging Face's -1
        raw += ["" if not label else NO_LABEL if v is None else _raw_label(v) for v in values]
    return records, raw, names


def _raw_label(value) -> str | tuple[str, ...]:
    """A row's label as the shard reader numbers it: text, or a tuple for a list of labels (a multi-label row)."""
    return tuple(str(v) for v in value) if isinstance(value, list) else str(value)


def _check_row_group(path: Path, group, index: int, image: str) -> None:
    """One error, before any is read, for a row group whose images are too large to read whole (pyarrow's default
    writer puts up to a million rows in one)."""
    held = sum(
        group.column(i).total_uncompressed_size
        for i in range(group.num_columns)
        if group.column(i).path_in_schema == image or group.column(i).path_in_schema.startswith(image + ".")
    )
    if held > MAX_ROW_GROUP_BYTES:
        raise DataError(
            f"{path}: row group {index} holds {held / 2**30:.1f} GiB of images ({group.num_rows:,} rows), over the "
            f"{MAX_ROW_GROUP_BYTES / 2**30:g} GiB vitkit reads at once (a row group is read whole); write the file "
            "again in smaller row groups, e.g. pyarrow.parquet.write_table(table, path, row_group_size=100), as "
            "Hugging Face datasets does for images"
        )


def _row_group_images(file: str, group: int) -> list[tuple[bytes | None, str | None]]:
    """(bytes, path) of every image of one row group; a few row groups are kept per process, and so is a row group that
    cannot be read: its every row fails with its error, read once (not again for each of its rows)."""
    images = _ROW_GROUPS.get(file, group)
    if isinstance(images, str):
        raise DataError(images)
    return images


class _RowGroups:
    """The row groups read last in this process: at most ROW_GROUP_WINDOW of them holding at most CACHED_BYTES of images,
    the one read last kept whatever its size (a count alone held 16 row groups of any size: 16 GB of 1 GB ones per
    worker)."""

    def __init__(self) -> None:
        self._kept: collections.OrderedDict[tuple[str, int], tuple[list | str, int]] = collections.OrderedDict()
        self._bytes = 0

    def get(self, file: str, group: int) -> list[tuple[bytes | None, str | None]] | str:
        key = (file, group)
        if key in self._kept:
            self._kept.move_to_end(key)
            return self._kept[key][0]
        images = _read_row_group(file, group)
        size = 0 if isinstance(images, str) else sum(len(data or b"") for data, _ in images)
        self._kept[key] = (images, size)
        self._bytes += size
        while len(self._kept) > 1 and (len(self._kept) > ROW_GROUP_WINDOW or self._bytes > CACHED_BYTES):
            _, (_, gone) = self._kept.popitem(last=False)
            self._bytes -= gone
        return images

    def clear(self) -> None:
        self._kept.clear()
        self._bytes = 0


_ROW_GROUPS = _RowGroups()


def _read_row_group(file: str, group: int) -> list[tuple[bytes | None, str | None]] | str:
    pq = _pyarrow()
    try:
        regular_file(file, DataError)
        handle = pq.ParquetFile(file)
        image = _columns(handle, Path(file))[0]
        column = handle.read_row_group(group, columns=[image]).column(0).to_pylist()
    except DataError as err:
        return str(err)
    except Exception as err:
        return f"{file}: cannot read row group {group} ({str(err).splitlines()[0]})"
    return [(v.get("bytes"), v.get("path")) if isinstance(v, dict) else (v, None) for v in column]


def blocks(split: Split) -> np.ndarray | None:
    """For Parquet samples, the row group each comes from (numbered in order); None for anything else."""
    if not split.paths or not isinstance(split.paths[0], ParquetRow):
        return None
    seen: dict[tuple[str, int], int] = {}
    return np.array([seen.setdefault((r.file, r.row_group), len(seen)) for r in split.paths], dtype=np.int64)
