"""Safe file I/O for checkpoints: atomic writes, and reads that never unpickle."""

from __future__ import annotations

import json
import os
import pickle
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from vitkit.errors import CheckpointError


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success fsync it and rename it over `path`.

    A crash (or kill -9) at any point leaves the previous file intact; no partial file is ever
    visible under the final name.
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
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{path}: cannot load as a PyTorch weights file ({first}); the file is truncated or corrupt") from None


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
    except (zipfile.BadZipFile, ValueError, EOFError, OSError, KeyError) as err:
        raise CheckpointError(f"{path}: cannot read as .npz ({err}); the file is truncated, corrupt or holds pickled objects") from None


def write_npz(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> None:
    """An uncompressed .npz (as the official release files are), written atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
