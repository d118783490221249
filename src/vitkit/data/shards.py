"""Datasets shipped as shards: WebDataset-style tar files, and Parquet files as Hugging Face `datasets` writes them.

    data.path=/data/imagenet/shard-{000000..001281}.tar     brace patterns, single files, or a folder of shards
    data.path=/data/cifar10/                                 train-*.parquet, test-*.parquet (or train/, data/ ...)

A tar shard holds samples as members `KEY.jpg|jpeg|png|webp` + `KEY.cls` (the label: a class index or
name) or `KEY.json` ({"label": ...}); class names come from `classes.txt` (one a line) beside the shards,
where an index counts in it and a name must be in it; without it indices are named by their numbers, names are
sorted, and the two kinds do not mix. Tars are indexed once (member offsets
from the headers), so any sample is read with one seek: the data order, its exact resume, the split
across torchrun ranks and DataLoader workers and `data.on_error` are those of image folders. Parquet
files are read through pyarrow (`pip install vitkit[parquet]`): an image column of {bytes, path}
structs, an integer label column, class names from the `ClassLabel` feature in the schema metadata.
Their samples come in row-group windows (see `block_order`) so a worker reads each row group once.

Files whose name starts with a split (`train-*`, `val-*`/`validation-*`, `test-*`), or that sit in a
split folder, form that split; otherwise a held-out part is cut as for image folders (data.val_fraction).
"""

from __future__ import annotations

import collections
import glob
import io
import json
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from vitkit.errors import DataError, first_line

from .images import IMAGE_SUFFIXES, MAX_PIXELS, Record, check_file_size, read_image_file
from .sources import SPLIT_NAMES, MissingSplit, Split, _held_out, _label_order, split_folders

if TYPE_CHECKING:  # loader.py imports this module
    from .loader import BadFiles

SHARD_SUFFIXES = (".tar", ".parquet")
LABEL_SUFFIXES = (".cls", ".json")
NO_LABEL = "-1"  # a sample without a label, as Hugging Face writes an unlabelled split
ROW_GROUP_WINDOW = 16  # Parquet row groups whose samples are shuffled together (and cached per worker)
MAX_ROW_GROUP_BYTES = 2 << 30  # a row group's images, uncompressed: read whole, so a read holds this much at most
CACHED_BYTES = 1 << 30  # images of the row groups kept per process (the one read last is kept whatever its size)


# -- finding the shard files ---------------------------------------------------------------------
def expand_braces(pattern: str) -> list[str]:
    """`shard-{000..002}.tar` -> shard-000.tar, shard-001.tar, shard-002.tar (zero padding kept); `{a,b}` lists too."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    head, tail, body = pattern[: match.start()], pattern[match.end() :], match.group(1)
    numbers = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if numbers:
        first, last = numbers.groups()
        width = len(first) if first.startswith("0") else 0
        options = [str(i).zfill(width) for i in range(int(first), int(last) + 1)]
    else:
        options = body.split(",")
    return [name for option in options for name in expand_braces(head + option + tail)]


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


# A folder `write_tar_shards` is writing into holds this file until its last shard and classes.txt are in place: shards
# of a writer that was stopped are not read as if they were all the images.
WRITING = ".vitkit-writing"


def refuse_unfinished(folder: Path) -> None:
    if (folder / WRITING).exists():
        raise DataError(
            f"{folder}: its shards are incomplete: `vitkit data --to-shards` was writing them and did not finish "
            f"({folder / WRITING} is still there); run that command again, which starts the folder afresh"
        )


# -- records: one image inside a shard --------------------------------------------------------------
@dataclass(frozen=True)
class TarMember(Record):
    shard: str
    name: str
    offset: int
    size: int

    def __str__(self) -> str:
        return f"{self.shard}:{self.name}"

    def read(self) -> bytes:
        check_file_size(self, self.size)  # from the tar header, before reading
        with open(self.shard, "rb") as f:
            f.seek(self.offset)
            data = f.read(self.size)
        if len(data) != self.size:
            raise DataError(f"{self}: the shard ends inside this member (truncated tar); re-write the shard")
        return data


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


# -- tar shards -----------------------------------------------------------------------------------
def _index_tar(path: Path) -> tuple[list[TarMember], list[str | None], list[str]]:
    """(images, their raw labels, keys) of one tar shard, from its headers; labels None where a sample has none."""
    images: dict[str, TarMember] = {}
    labels: dict[str, str] = {}
    seen_labels: set[tuple[str, str]] = set()
    try:
        with open(path, "rb") as f:
            for name, offset, size, head in _tar_files(f, path):
                folder, _, base = name.rpartition("/")
                if base.startswith("."):
                    continue
                key, _, ext = base.partition(".")
                key, ext = f"{folder}/{key}" if folder else key, "." + ext.lower()
                if ext in IMAGE_SUFFIXES:
                    if key in images:  # a second image of one sample: which one was meant cannot be told
                        raise DataError(
                            f"{path}: sample {key!r} has two images ({images[key].name} and {name}); a sample is one "
                            "image with its label: give each its own key"
                        )
                    images[key] = TarMember(str(path), name, offset, size)
                elif ext in LABEL_SUFFIXES:
                    if (
                        key,
                        ext,
                    ) in seen_labels:  # the same label member twice (a .cls beside a .json is read as before)
                        raise DataError(f"{path}: sample {key!r} has two {ext} labels; give each sample one")
                    seen_labels.add((key, ext))
                    if len(head) < size:
                        f.seek(offset)
                        head = f.read(min(size, MAX_LABEL_BYTES + 1))  # a larger one is refused, not read
                    labels[key] = _parse_label(head[:size], ext, f"{path}:{name}")
    except tarfile.ReadError as err:
        raise DataError(
            f"{path}: not a readable uncompressed tar shard ({err}); shards must be plain .tar files"
        ) from None
    except (OSError, EOFError) as err:
        raise DataError(f"{path}: cannot read the shard ({err}); it is truncated or unreadable") from None
    keys = list(images)
    return [images[k] for k in keys], [labels.get(k) for k in keys], keys


def _tar_files(f, path: Path):
    """(name, data offset, size, the first bytes of the data) of every regular file in an uncompressed tar, read from
    its 512-byte headers (one read per member, of the header and the block after it, so a small label file comes
    with its header): ustar and GNU headers, GNU long names and POSIX pax records. About 4x quicker than tarfile,
    which builds a TarInfo per member; anything else (a sparse file, a base-256 size ...) is handed to tarfile, so
    every tar that tarfile reads is indexed the same."""
    position, long_name, pax, end = 0, None, {}, os.fstat(f.fileno()).st_size
    while True:
        if position > end:  # the last member's data is cut short
            raise tarfile.ReadError("unexpected end of data")
        f.seek(position)
        chunk = f.read(1024)
        header = chunk[:512]
        if len(header) < 512:  # no end-of-archive blocks: tarfile ends there too
            if position == 0:
                raise tarfile.ReadError("empty file" if not header else "too short for a tar header")
            return
        if header == bytes(512):  # the end-of-archive blocks
            return
        kind = header[156:157]
        try:
            if _checksum(header) != int(header[148:156].split(b"\0", 1)[0].strip() or b"-1", 8):
                raise ValueError
            size = int(header[124:136].split(b"\0", 1)[0].strip() or b"0", 8)
        except ValueError:
            if position == 0 and not header[257:262] == b"ustar":
                raise tarfile.ReadError("no tar header at the start (bad checksum)") from None
            # an exotic header: the standard library's reader decides, from here on (members before it are out)
            yield from (m for m in _tarfile_members(path) if m[1] > position)
            return
        data = position + 512
        position = data + -(-size // 512) * 512
        if kind in (b"L", b"x", b"g"):  # the next member's long name, or pax records
            f.seek(data)
            payload = f.read(size)
            if kind == b"L":
                long_name = payload.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            elif kind == b"x":
                pax = _pax_records(payload)
            continue
        if kind not in (b"0", b"\0", b"7"):  # directories, links, devices: not samples
            long_name, pax = None, {}
            continue
        name = pax.get("path") or long_name or _header_name(header)
        if "size" in pax:
            size = int(pax["size"])
            position = data + -(-size // 512) * 512
        long_name, pax = None, {}
        yield name, data, size, chunk[512 : 512 + size]


def _checksum(header: bytes) -> int:
    return sum(header) - sum(header[148:156]) + 8 * 32  # the checksum field counts as spaces


def _header_name(header: bytes) -> str:
    name = header[0:100].split(b"\0", 1)[0]
    if header[257:262] == b"ustar":
        prefix = header[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    return name.decode("utf-8", "surrogateescape")


def _pax_records(payload: bytes) -> dict[str, str]:
    """pax extended-header records: 'LEN key=value\\n' each, LEN counting the whole record."""
    records, i = {}, 0
    while i < len(payload):
        space = payload.find(b" ", i)
        if space < 0:
            break
        length = int(payload[i:space])
        key, _, value = payload[space + 1 : i + length - 1].partition(b"=")
        records[key.decode()] = value.decode("utf-8", "surrogateescape")
        i += length
    return records


def _tarfile_members(path: Path):
    with tarfile.open(path, "r:") as tar:
        for m in tar:
            if m.isfile():
                yield m.name, m.offset_data, m.size, b""


MAX_LABEL_BYTES = 64 << 10  # a .cls or .json label member; larger ones are refused unread
MAX_CLASS_INDEX = 10**6  # class indices above it are refused (a class list is made up to the largest index)


def _parse_label(data: bytes, ext: str, name: str) -> str:
    what = 'a JSON object with "label": a class index or name' if ext == ".json" else "a class index or name"
    if len(data) > MAX_LABEL_BYTES:
        raise DataError(f"{name}: a label of over {MAX_LABEL_BYTES:,} bytes; expected {what}")
    try:
        if ext == ".cls":
            label = data.decode().strip()
        else:
            value = json.loads(data)
            label = value.get("label", value.get("cls")) if isinstance(value, dict) else value
            if label is None or isinstance(label, (dict, list, float)):
                raise ValueError
            label = str(label)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: JSON nested thousands deep
        raise DataError(f"{name}: expected {what}") from None
    if label.lstrip("-").isdigit() and (len(label) > 7 or int(label) > MAX_CLASS_INDEX):
        raise DataError(
            f"{name}: class index {label[:20]}{'...' if len(label) > 20 else ''} is over the limit of {MAX_CLASS_INDEX:,}; "
            "expected a class index or name"
        )
    return label


def _read_tars(files: list[Path]) -> tuple[list, list[str], list[str]]:
    records, raw = [], []
    for path in files:
        found, labels, keys = _index_tar(path)
        unlabeled = [k for k, label in zip(keys, labels) if label is None]
        if unlabeled and len(unlabeled) < len(keys):
            raise DataError(
                f"{path}: sample {unlabeled[0]!r} has no .cls or .json label; every sample needs one (or none has)"
            )
        folders = {k.rsplit("/", 1)[0] for k in unlabeled if "/" in k}
        if len(folders) > 1:  # a tar of an image folder (class/, train/class/), not shards: its folders would be lost
            raise DataError(
                f"{path}: a tar of images in folders ({', '.join(sorted(folders)[:2])}, ...) without .cls or .json "
                f"labels: unpack it (tar -xf {path} -C DIR) and give DIR, whose folders are the classes, or write "
                "labelled shards from DIR with vitkit data DIR --to-shards SHARDS"
            )
        records += found
        raw += ["" if label is None else label for label in labels]
    if not records:
        raise DataError(
            f"{files[0]}{' ...' * (len(files) > 1)}: no images (members KEY.jpg|jpeg|png|webp with KEY.cls or KEY.json); "
            "a sample's key is its name up to the first dot, as WebDataset reads it, so a name like img.0.v1.jpg has "
            "the extension 0.v1.jpg: rename such members without dots in their keys (img_0_v1.jpg)"
        )
    # beside the shards, or above their split folders (train/, validation/ ...)
    beside = files[0].parent / "classes.txt"
    in_split_folder = any(files[0].parent.name.lower() in names for names in SPLIT_NAMES.values())
    names_file = files[0].parent.parent / "classes.txt" if in_split_folder and not beside.is_file() else beside
    try:  # UTF-8 whatever the locale; a byte-order mark (a file saved by Excel or Notepad) is not part of the first name
        known = names_file.read_text(encoding="utf-8-sig").splitlines() if names_file.is_file() else None
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(
            f"{names_file}: cannot read the class names ({first_line(err)}); one UTF-8 name a line"
        ) from None
    return records, raw, known


# -- Parquet --------------------------------------------------------------------------------------
def _pyarrow():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError("reading Parquet files needs pyarrow: pip install 'vitkit[parquet]'") from None
    return pq


def _columns(file, path: Path) -> tuple[str, str | None, list[str] | None]:
    """(image column, label column or None, class names or None) of a Parquet file, from its Hugging Face features."""
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
    label = next((k for k, f in features.items() if isinstance(f, dict) and f.get("_type") == "ClassLabel"), None)
    if label is None:
        label = next((n for n in ("label", "labels", "cls", "fine_label") if n in schema.names), None)
    names = features.get(label, {}).get("names") if label in features and isinstance(features[label], dict) else None
    return image, label, names


def _read_parquet(files: list[Path]) -> tuple[list, list[str], list[str] | None]:
    pq = _pyarrow()
    records, raw, names = [], [], None
    for path in files:
        try:
            file = pq.ParquetFile(path)
            image, label, found = _columns(file, path)
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
        raw += ["" if not label else NO_LABEL if v is None else str(v) for v in values]
    return records, raw, names


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
    cannot be read: its every row fails with its error, read once (each row read it again, a 1 GB one 90 times)."""
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
        handle = pq.ParquetFile(file)
        image = _columns(handle, Path(file))[0]
        column = handle.read_row_group(group, columns=[image]).column(0).to_pylist()
    except DataError as err:
        return str(err)
    except Exception as err:
        return f"{file}: cannot read row group {group} ({str(err).splitlines()[0]})"
    return [(v.get("bytes"), v.get("path")) if isinstance(v, dict) else (v, None) for v in column]


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
    if "" in raw:  # one shard without labels among labelled ones
        raise DataError(
            f"{records[raw.index('')]}: has no .cls or .json label, where other samples have one; every sample "
            "needs one (or none has)"
        )
    numeric = [r.lstrip("-").isdigit() for r in raw]
    if all(numeric) or known:
        names = list(known) if known else [str(i) for i in range(max(int(r) for r in raw) + 1)]
        index = {name: i for i, name in enumerate(names)}
        values = [int(r) if number else index.get(r, -2) for r, number in zip(raw, numeric)]
        bad = next(
            (i for i, v in enumerate(values) if v < -1 or v >= len(names)), None
        )  # -1: no label (Hugging Face's)
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
    names = sorted(set(raw), key=_label_order)
    index = {name: i for i, name in enumerate(names)}
    return torch.tensor([index[r] for r in raw], dtype=torch.long), names


def open_sharded(path: str | os.PathLike, split: str, *, val_fraction: float = 0.1, seed: int = 0) -> Split:
    """`split` of the shards at `path` (a pattern, a file or a folder)."""
    files = shard_files(path)
    if not files:
        raise DataError(f"{path}: no .tar or .parquet shards found")
    kinds = {f.suffix.lower() for f in files}
    if len(kinds) > 1:
        raise DataError(f"{path}: holds both tar and Parquet shards; point data.path at one kind")
    read = _read_parquet if ".parquet" in kinds else _read_tars
    records, raw, known = read(files)  # every file, so that the classes are the same in every split
    origin = "the Parquet schema's class names (ClassLabel)" if read is _read_parquet else "classes.txt"
    labels, names = _labels(raw, known, str(path), records, origin)
    return _labelled(_open_split(path, split, files, records, labels, names, val_fraction, seed), split)


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
    val_fraction: float,
    seed: int,
) -> Split:
    """`split` of the samples `records` of shard `files`, cut by their file names, folders or a held-out part."""
    by_split = {s: [f for f in files if _split_of(f) == s] for s in SPLIT_NAMES}
    named = {s: fs for s, fs in by_split.items() if fs}
    owner = np.array([str(Path(r.shard if isinstance(r, TarMember) else r.file)) for r in records])
    source = str(path)
    full = Split(labels=labels, class_names=names, paths=records, source=source)
    if not named:  # one set: val (and test) held out of it, unless val_fraction=0 asks to train on all of it
        return full if split == "train" and val_fraction == 0.0 else _held_out(full, split, val_fraction, seed)
    holds_out = "train" in named and "val" not in named and val_fraction > 0.0
    if split in named and not (split == "train" and holds_out):
        return _files_subset(full, owner, named[split], f"{source} ({split})")
    if "train" in named and split in ("train", "val"):
        train = _files_subset(full, owner, named["train"], f"{source} (train)")
        return _held_out(train, split, val_fraction, seed)
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


def blocks(split: Split) -> np.ndarray | None:
    """For Parquet samples, the row group each comes from (numbered in order); None for anything else."""
    if not split.paths or not isinstance(split.paths[0], ParquetRow):
        return None
    seen: dict[tuple[str, int], int] = {}
    return np.array([seen.setdefault((r.file, r.row_group), len(seen)) for r in split.paths], dtype=np.int64)


# -- writing shards -------------------------------------------------------------------------------
def write_tar_shards(
    split: Split,
    out: str | os.PathLike,
    per_shard: int = 1000,
    seed: int = 0,
    prefix: str = "shard",
    finish: bool = True,
    bad: BadFiles | None = None,
) -> list[Path]:
    """Write the image files of `split` as tar shards out/PREFIX-NNNNNN.tar (samples shuffled with `seed`, labels as
    KEY.cls class indices) plus out/classes.txt; returns the shard paths. A split's name as `prefix` (train, val,
    test) makes the files that split when read back. Until they are all written the folder is marked unfinished
    (`WRITING`); `finish=False` leaves the mark for a caller writing more splits, who calls `finish_writing` after the last.
    A file that is no readable image is never written (in a shard it would lose its name): `bad` (a loader.BadFiles, as
    data.on_error says) stops at it or skips it and lists it; without one, a DataError names it."""
    out = Path(out)
    if split.paths is None:
        raise DataError(f"{split.source}: only image files can be written as shards (this data is held as tensors)")
    out.mkdir(parents=True, exist_ok=True)
    (out / WRITING).touch()
    order = np.random.default_rng(seed).permutation(len(split))
    written = []
    for number, start in enumerate(range(0, len(order), per_shard)):
        target = out / f"{prefix}-{number:06d}.tar"
        tmp = target.with_name(f".{target.name}.tmp")
        try:
            with tarfile.open(tmp, "w") as tar:
                for i in order[start : start + per_shard]:
                    record = split.paths[i]
                    try:
                        data = record.read() if isinstance(record, Record) else Path(record).read_bytes()
                    except (
                        OSError
                    ) as err:  # a listed file that is gone or unreadable: as data.on_error says, as training does
                        data, why = (
                            None,
                            "image file not found"
                            if isinstance(err, FileNotFoundError)
                            else err.strerror or type(err).__name__,
                        )
                    if data is None or (why := _unreadable(data)) is not None:
                        if bad is None:
                            raise DataError(f"{record}: {why}; remove or replace it")
                        bad.report([(int(i), str(record), f"{record}: {why}")])  # raises on "fail"
                        continue
                    suffix = _suffix(data, str(record))
                    key = f"{i:09d}"
                    for name, payload in ((key + suffix, data), (key + ".cls", str(int(split.labels[i])).encode())):
                        info = tarfile.TarInfo(name)
                        info.size = len(payload)
                        tar.addfile(info, io.BytesIO(payload))
        except BaseException:
            tmp.unlink(missing_ok=True)  # a refused file or a kill: no half shard left (the folder stays marked)
            raise
        os.replace(tmp, target)
        written.append(target)
    (out / "classes.txt").write_text("".join(f"{name}\n" for name in split.class_names), encoding="utf-8")
    if finish:
        finish_writing(out)
    return written


def _unreadable(data: bytes) -> str | None:
    """Why `data` is no readable image (None if it is): empty, not an image Pillow knows, damaged; a JPEG is decoded
    only where it does not end in its end-of-image marker (a truncated file, or one with data after its image)."""
    if not data:
        return "empty file (0 bytes)"
    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.format == "JPEG" and not data.rstrip(b"\0").endswith(b"\xff\xd9"):
                image.load()
            else:
                image.verify()
    except UnidentifiedImageError:
        return "not an image (or in a format Pillow cannot read)"
    except Image.DecompressionBombError:
        return f"more pixels than the limit of {MAX_PIXELS:,} (a decompression bomb, or an image far too large to train on)"
    except Exception as err:  # Pillow's errors: OSError (truncated), SyntaxError (bad PNG) ...
        return f"cannot read the image ({first_line(err) or type(err).__name__}); the file is truncated or corrupt"
    return None


def finish_writing(out: str | os.PathLike) -> None:
    """The shards in `out` are complete: readers may take them (`write_tar_shards` marked the folder unfinished)."""
    (Path(out) / WRITING).unlink(missing_ok=True)


def clear_unfinished(out: str | os.PathLike) -> None:
    """Where `out` is still marked unfinished, remove what `write_tar_shards` had written there (shards, their
    temporary files, classes.txt, the mark), so that writing can start afresh; a folder without the mark is left alone."""
    out = Path(out)
    if not (out / WRITING).is_file():
        return
    for stale in out.iterdir():
        if re.fullmatch(r"\.?\w+-\d{6}\.tar(\.tmp)?|classes\.txt", stale.name):
            stale.unlink()
    finish_writing(out)


def _suffix(data: bytes, name: str) -> str:
    """The member suffix of an image: its file's, else from its first bytes (Parquet rows have no name)."""
    suffix = Path(name).suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        return suffix
    for magic, found in (
        (b"\xff\xd8", ".jpg"),
        (b"\x89PNG", ".png"),
        (b"RIFF", ".webp"),
        (b"GIF8", ".gif"),
        (b"BM", ".bmp"),
    ):
        if data.startswith(magic):
            return found
    return ".png" if not data else ".tif"
