"""Tar shards, WebDataset-style: reading them, and writing an image set as shards.

A tar shard holds samples as members `KEY.jpg|jpeg|png|webp` + `KEY.cls` (the label: a class index or
name) or `KEY.json` ({"label": ...}, or {"labels": [...]}: a multi-label sample's classes); class names come from `classes.txt` (one a line) beside the shards,
where an index counts in it and a name must be in it; without it indices are named by their numbers, names are
sorted, and the two kinds do not mix. Tars are indexed once (member offsets from the headers), so any sample is
read with one seek: the data order, its exact resume, the split across torchrun ranks and DataLoader workers and
`data.on_error` are those of image folders.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from vitkit.errors import DataError, first_line
from vitkit.files import naming, open_regular
from vitkit.limits import check_class_index

from ..images import IMAGE_SUFFIXES, MAX_PIXELS, Record, check_file_size, read_image_file
from ..split import SPLIT_NAMES, BadFiles, Split

LABEL_SUFFIXES = (".cls", ".json")

MAX_LABEL_BYTES = 64 << 10  # a .cls or .json label member; larger ones are refused unread

MAX_HEADER_BYTES = 1 << 20  # a GNU long name or pax header: a name and a few numbers; larger ones are refused


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
        with open_regular(self.shard, DataError) as f:
            f.seek(self.offset)
            data = f.read(self.size)
        if len(data) != self.size:
            raise DataError(f"{self}: the shard ends inside this member (truncated tar); re-write the shard")
        return data


# -- tar shards -----------------------------------------------------------------------------------
def _index_tar(path: Path) -> tuple[list[TarMember], list[str | None], list[str]]:
    """(images, their raw labels, keys) of one tar shard, from its headers; labels None where a sample has none."""
    images: dict[str, TarMember] = {}
    labels: dict[str, str] = {}
    seen_labels: set[tuple[str, str]] = set()
    try:
        with open_regular(path, DataError) as f:
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
    with its header): ustar and GNU headers, GNU long names and POSIX pax records, by tarfile's rules. Quicker than
    tarfile, which builds a TarInfo per member; a base-256 size, a header whose checksum fails or a sparse file is
    handed to tarfile, so every tar that tarfile reads is indexed the same. A header field or pax record that no tar
    writer makes is a tarfile.ReadError: every header moves the reader forward, so it always ends."""
    position, pending, pax, end = 0, [], {}, os.fstat(f.fileno()).st_size
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
        exotic = any(header[i] & 0x80 for i in NUMBER_FIELDS) or not _checksum_holds(header)
        if exotic and position == 0 and not header[257:262] == b"ustar":
            raise tarfile.ReadError("no tar header at the start (bad checksum)")
        if exotic or kind == SPARSE or any(key.startswith("GNU.sparse.") for key in pax):
            # the standard library's reader decides, from here on (members before it are out)
            yield from (m for m in _tarfile_members(path) if m[1] > position)
            return
        data, size = position + 512, [_octal(header[i : i + n], "number") for i, n in NUMBER_FIELDS.items()][3]
        if kind in LONG_NAMES or kind in PAX:
            position = data + _blocks(size)
            payload = _header_payload(f, data, size, end)
            if kind == b"L":
                pending.append(("name", payload.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")))
            elif kind == b"g":
                pax.update(_pax_records(payload))
            elif kind in PAX:
                pending.append(("pax", {**pax, **_pax_records(payload)}))
            continue  # a long link target (K) names nothing vitkit reads, and ends no chain
        v7_directory = kind == b"\0" and header[0:100].split(b"\0", 1)[0].endswith(b"/")
        file = kind in REGULAR and not v7_directory
        # an unknown type flag is skipped as data, as tarfile does
        carries_data = not v7_directory and kind not in NO_DATA
        name, size, position = _resolved(header, size, data, carries_data, pax, pending)
        pending = []
        if file:
            yield name, data, size, chunk[512 : 512 + size]


REGULAR = (b"0", b"\0", b"7")  # files (7: contiguous); a \0 member named with a trailing slash is a V7 directory
NO_DATA = (b"1", b"2", b"3", b"4", b"5", b"6")  # links, devices, directories, FIFOs: a size on these has no data
LONG_NAMES = (b"L", b"K")  # GNU: the next member's long name, or its long link target
PAX = (b"x", b"X", b"g")  # pax records: for the next member (x, and X as Solaris wrote it), or all after (g)
SPARSE = b"S"  # a GNU sparse file: its data is not the file's bytes in order


def _blocks(size: int) -> int:
    return -(-size // 512) * 512


def _resolved(header: bytes, size: int, data: int, carries_data: bool, pax: dict, pending: list):
    """(name, size, next header's position) of a member: its header, then global pax records, then the long names and
    pax headers before it, nearest first, so the first of a chain has the last word (tarfile reads a chain that way).
    A pax size moves the next header only from a pax header for this member, as in tarfile."""
    name = _header_name(header)
    position = data + _blocks(size) * carries_data
    if "path" in pax:
        name = pax["path"].rstrip("/")
    if "size" in pax:
        size = _pax_size(pax["size"])
    for what, value in reversed(pending):
        if what == "name":
            name = value
            continue
        if "path" in value:
            name = value["path"].rstrip("/")
        if "size" in value:
            size = _pax_size(value["size"])
            position = data + _blocks(size) * carries_data
    return name, size, position


NUMBER_FIELDS = {100: 8, 108: 8, 116: 8, 124: 12, 136: 12}  # mode, uid, gid, size, mtime: octal, or base-256


def _checksum_holds(header: bytes) -> bool:
    field = header[148:156].split(b"\0", 1)[0].strip()
    return bool(field) and all(c in b"01234567" for c in field) and _checksum(header) == int(field, 8)


def _octal(field: bytes, what: str) -> int:
    """A header's octal number; anything but octal digits (a sign, underscores, letters) is a damaged header."""
    text = field.split(b"\0", 1)[0].strip()
    if not all(c in b"01234567" for c in text):
        raise tarfile.ReadError(f"damaged header: its {what} field is {text[:20]!r}, not an octal number")
    return int(text or b"0", 8)


def _pax_size(value: str) -> int:
    if not (value.isascii() and value.isdigit() and len(value) <= 20):
        raise tarfile.ReadError(f"damaged pax header: size {value[:20]!r} is not a number")
    return int(value)


def _header_payload(f, data: int, size: int, end: int) -> bytes:
    """The data of a long-name or pax member, of at most MAX_HEADER_BYTES."""
    if size > MAX_HEADER_BYTES:
        raise tarfile.ReadError(f"a long-name or pax header of {size:,} bytes (at most {MAX_HEADER_BYTES:,})")
    if data + size > end:
        raise tarfile.ReadError("unexpected end of data")
    f.seek(data)
    return f.read(_blocks(size))  # whole blocks, as tarfile reads them: its padding is read too


def _checksum(header: bytes) -> int:
    return sum(header) - sum(header[148:156]) + 8 * 32  # the checksum field counts as spaces


def _header_name(header: bytes) -> str:
    name = header[0:100].split(b"\0", 1)[0]
    prefix = header[345:500].split(b"\0", 1)[0]  # the ustar prefix, joined whenever set, as tarfile does
    if prefix:
        name = prefix + b"/" + name
    return name.decode("utf-8", "surrogateescape")


def _pax_records(payload: bytes) -> dict[str, str]:
    """pax extended-header records: 'LEN key=value\\n' each, LEN (ASCII digits) counting the whole record, the key
    UTF-8; a record that breaks this is a damaged header (a length of 0 would never move on)."""
    records, i = {}, 0
    while i < len(payload) and payload[i] != 0:  # NULs: the padding after the last record
        space = payload.find(b" ", i, i + 21)
        digits = payload[i:space] if space > i else b""
        length = int(digits) if digits.isdigit() else 0
        record = payload[i : i + length]
        key, equals, value = record[len(digits) + 1 : -1].partition(b"=")
        if length <= len(digits) + 1 or len(record) < length or not record.endswith(b"\n") or not equals or not key:
            raise tarfile.ReadError(f"damaged pax record at byte {i} of its header")
        try:
            records[key.decode()] = value.decode("utf-8", "surrogateescape")
        except UnicodeDecodeError:
            raise tarfile.ReadError(f"damaged pax record at byte {i} of its header (a key that is not UTF-8)") from None
        i += length
    return records


def _tarfile_members(path: Path):
    """tarfile's regular files, each after the last (a damaged header that sends tarfile back is a ReadError)."""
    last = -1
    try:
        with open_regular(path, DataError) as f, tarfile.open(fileobj=f, mode="r:") as tar:
            for m in tar:
                if m.offset <= last:
                    raise tarfile.ReadError("damaged header: a member before the one read last")
                last = m.offset
                if m.isfile():
                    yield m.name, m.offset_data, m.size, b""
    except (ValueError, UnicodeError, OverflowError) as err:  # tarfile's own parse of a damaged header
        raise tarfile.ReadError(f"damaged header ({first_line(err)})") from None


def _parse_label(data: bytes, ext: str, name: str) -> str | tuple[str, ...]:
    """The label of a sample's .cls or .json member: a class index or name, or (a .json's "labels" list) a tuple of
    them, the classes of a multi-label sample."""
    what = (
        'a JSON object with "label": a class index or name, or "labels": a list of them'
        if ext == ".json"
        else "a class index or name"
    )
    if len(data) > MAX_LABEL_BYTES:
        raise DataError(f"{name}: a label of over {MAX_LABEL_BYTES:,} bytes; expected {what}")
    try:
        if ext == ".cls":
            label = data.decode().strip()
        else:
            value = json.loads(data)
            if isinstance(value, dict) and "labels" in value:
                labels = value["labels"]
                if not isinstance(labels, list) or not all(_is_one_label(v) for v in labels):
                    raise ValueError
                for label in map(str, labels):
                    check_class_index(label, name, DataError)
                return tuple(map(str, labels))
            label = value.get("label", value.get("cls")) if isinstance(value, dict) else value
            if not _is_one_label(label):
                raise ValueError
            label = str(label)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: JSON nested thousands deep
        raise DataError(f"{name}: expected {what}") from None
    check_class_index(label, name, DataError)
    return label


def _is_one_label(value) -> bool:
    return value is not None and not isinstance(value, (dict, list, float))


def read_tars(files: list[Path]) -> tuple[list, list[str], list[str]]:
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
    A file that is no readable image is never written (in a shard it would lose its name): `bad` (a BadFiles, as
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
        _write_shard(target, split, order[start : start + per_shard], bad)
        written.append(target)
    with naming(out / "classes.txt"):
        (out / "classes.txt").write_text("".join(f"{name}\n" for name in split.class_names), encoding="utf-8")
    if finish:
        finish_writing(out)
    return written


def _write_shard(target: Path, split: Split, samples: np.ndarray, bad: BadFiles | None) -> None:
    """Write the samples `samples` of `split` as the tar shard `target`: written under a temporary name and renamed
    when complete, so that no half shard is ever left."""
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        with naming(target), tarfile.open(tmp, "w") as tar:
            for i in samples:
                record = split.paths[i]
                data = _sample_bytes(int(i), record, bad)
                if data is None:
                    continue
                suffix = _suffix(data, str(record))
                key = f"{i:09d}"
                for name, payload in ((key + suffix, data), _label_member(key, split.labels[i])):
                    info = tarfile.TarInfo(name)
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
    except BaseException:
        tmp.unlink(missing_ok=True)  # a refused file or a kill: no half shard left (the folder stays marked)
        raise
    os.replace(tmp, target)


def _label_member(key: str, label) -> tuple[str, bytes]:
    """(name, bytes) of a sample's label member: KEY.cls holding its class index, or for a multi-label sample
    KEY.json holding {"labels": [its class indices]}."""
    if label.ndim == 1:
        return key + ".json", json.dumps({"labels": label.nonzero().flatten().tolist()}).encode()
    return key + ".cls", str(int(label)).encode()


def _sample_bytes(index: int, record, bad: BadFiles | None) -> bytes | None:
    """The bytes of one image to write, or None where it is no readable image and `bad` skips it (else it raises)."""
    try:
        data = record.read() if isinstance(record, Record) else read_image_file(Path(record))
    except OSError as err:  # a listed file that is gone or unreadable: as data.on_error says, as training does
        data = None
        why = "image file not found" if isinstance(err, FileNotFoundError) else err.strerror or type(err).__name__
    if data is None or (why := _unreadable(data)) is not None:
        if bad is None:
            raise DataError(f"{record}: {why}; remove or replace it")
        bad.report([(index, str(record), f"{record}: {why}")])  # raises on "fail"
        return None
    return data


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


def written_by_shards(out: str | os.PathLike) -> set[str]:
    """The names in `out` that `write_tar_shards` wrote where it left the folder marked unfinished (shards, their
    temporary files, classes.txt, the mark), which a new writing replaces; none in a folder without the mark."""
    out = Path(out)
    if not (out / WRITING).is_file():
        return set()
    return {
        p.name
        for p in out.iterdir()
        if re.fullmatch(r"\.?\w+-\d{6}\.tar(\.tmp)?|classes\.txt|" + re.escape(WRITING), p.name)
    }


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
