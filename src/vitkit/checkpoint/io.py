"""Safe file I/O for checkpoints: atomic writes, checksums, and reads that never unpickle."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from vitkit.errors import CheckpointError, first_line


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success fsync it and rename it over `path`.

    A crash (or kill -9) at any point leaves the previous file intact; no partial file is ever
    visible under the final name. A write that fails (a full disk, a quota) is one CheckpointError.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        with open(tmp_path, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
        _fsync_dir(path.parent)
    except (OSError, RuntimeError, SafetensorError) as err:  # what json, torch.save and safetensors raise when a write fails
        tmp_path.unlink(missing_ok=True)
        if isinstance(err, RuntimeError):  # torch.save's messages name C++ internals, not the cause
            reason = "torch.save could not write the whole file"
        else:
            reason = getattr(err, "strerror", None) or first_line(err)
        raise CheckpointError(
            f"{path}: cannot be written ({reason}; is the disk full?); nothing was replaced: the file as it was and "
            "earlier checkpoints are intact; free some space, then continue (vitkit train --resume RUN)"
        ) from None
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- checksums: a sha256 per weights file, in a manifest written last ------------------------------
# Binary files (weights, optimizer state) are listed; JSON files are not: their readers check every
# key and value, and a user may edit them (e.g. class names) without making the checkpoint "damaged".
CHECKSUMS_NAME = "checksums.json"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(directory: str | os.PathLike, names: list[str]) -> None:
    """checksums.json in `directory`: size and sha256 of each named file (written after them)."""
    directory = Path(directory)
    files = {name: {"bytes": (directory / name).stat().st_size, "sha256": sha256(directory / name)} for name in sorted(names)}
    write_json(directory / CHECKSUMS_NAME, {"algorithm": "sha256", "files": files})


def update_checksums(directory: str | os.PathLike) -> None:
    """Extend checksums.json to every file of `directory` (hashing only those it does not list yet)."""
    directory = Path(directory)
    listed = _read_checksums(directory) or {}
    names = sorted(p.name for p in directory.iterdir() if p.is_file() and p.suffix != ".json")
    if set(names) == set(listed):
        return
    files = {n: listed.get(n) or {"bytes": (directory / n).stat().st_size, "sha256": sha256(directory / n)} for n in names}
    write_json(directory / CHECKSUMS_NAME, {"algorithm": "sha256", "files": files})


def _read_checksums(directory: Path) -> dict[str, dict] | None:
    if not (directory / CHECKSUMS_NAME).is_file():
        return None
    data = read_json(directory / CHECKSUMS_NAME)
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, dict) and isinstance(v.get("sha256"), str) for v in files.values()):
        raise CheckpointError(f"{directory / CHECKSUMS_NAME}: not a vitkit checksum list; the file is damaged")
    return files


def verify_checksums(directory: str | os.PathLike) -> None:
    """Check every file listed in `directory`/checksums.json; raise naming the first missing or damaged one.

    A directory without checksums.json (older or foreign checkpoints) passes.
    """
    directory = Path(directory)
    advice = "restore it, or remove this checkpoint directory to use an older one"
    for name, want in (_read_checksums(directory) or {}).items():
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"{path}: missing, but listed in {CHECKSUMS_NAME}; {advice}")
        size = path.stat().st_size
        if size != want.get("bytes", size):
            raise CheckpointError(f"{path}: {size} bytes, {want['bytes']} when written: the file is truncated or corrupt; {advice}")
        if sha256(path) != want["sha256"]:
            raise CheckpointError(f"{path}: corrupt (its sha256 differs from the one in {CHECKSUMS_NAME}); {advice}")


def write_json(path: str | os.PathLike, data: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path}: not valid JSON ({err}); the file is damaged or not a config") from None


def write_safetensors(path: str | os.PathLike, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)


def read_safetensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"{path}: cannot read safetensors ({err}); the file is truncated or corrupt") from None


def read_torch(path: str | os.PathLike) -> Any:
    """torch.load with weights_only=True: tensors and plain containers only, never arbitrary objects."""
    path = Path(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    except pickle.UnpicklingError:
        raise CheckpointError(
            f"{path}: holds Python objects other than tensors; vitkit reads weights only (weights_only=True) and never "
            "unpickles anything else; save a plain state dict (or .safetensors)"
        ) from None
    except Exception as err:  # torch raises many types for bad pickles and damaged archives
        raise CheckpointError(
            f"{path}: cannot load as a PyTorch weights file ({first_line(err)}); the file is truncated or corrupt"
        ) from None


def is_safetensors(path: str | os.PathLike) -> bool:
    """A safetensors file starts with an 8-byte little-endian header length, then its JSON header."""
    with open(path, "rb") as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b"{" and 2 <= int.from_bytes(head[:8], "little") < 100_000_000


def write_torch(path: str | os.PathLike, tensors: dict[str, torch.Tensor]) -> None:
    """A plain state dict of tensors, written atomically (readable with weights_only=True)."""
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    with atomic_path(path) as tmp:
        torch.save(tensors, tmp)


def read_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every array of an .npz file, read eagerly and without pickle."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except Exception as err:  # zipfile and numpy's header parser raise many types for damaged archives
        raise CheckpointError(
            f"{path}: cannot read as .npz ({first_line(err)}); the file is truncated, corrupt or holds pickled objects"
        ) from None


def write_npz(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> None:
    """An uncompressed .npz (as the official release files are), written atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)


def staging_paths(target: Path) -> tuple[Path, Path]:
    """The temporary names a replacement of `target` uses: the new directory, the one it replaces."""
    return target.parent / f".{target.name}.tmp", target.parent / f".{target.name}.old"


def finish_replacement(target: Path) -> None:
    """Complete a replacement of `target` that a kill -9 cut between its two renames (see _write_dir).

    `.NAME.old` exists only after the new directory `.NAME.tmp` was complete, so with `target` missing
    the new one takes its place; without `.old`, a `.tmp` may be half written and is left alone.
    """
    tmp, old = staging_paths(target)
    if not target.exists() and old.is_dir() and tmp.is_dir():
        os.replace(tmp, target)
    if target.exists() and old.is_dir():
        shutil.rmtree(old, ignore_errors=True)


def sidecar_path(path: str | os.PathLike) -> Path:
    """FILE.json beside a weights file whose format has no place for metadata (.npz, .pth)."""
    path = Path(path)
    return path.with_name(path.name + ".json")


def read_sidecar(path: str | os.PathLike) -> dict:
    """The sidecar JSON of a weights file, {} when there is none."""
    side = sidecar_path(path)
    data = read_json(side) if side.is_file() else {}
    return data if isinstance(data, dict) else {}
