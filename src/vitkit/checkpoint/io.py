"""Checkpoint files: safetensors, torch (weights only, never unpickled), npz, and the sidecars beside them."""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from vitkit.errors import CheckpointError, first_line
from vitkit.files import (
    TargetBusy,
    atomic_path,
    not_a_directory,
    open_regular,
    read_json,
    regular_file,
    scratch_folder,
    sha256,
    target_lock,
    write_json,
)
from vitkit.limits import check_expansion


def write_safetensors(
    path: str | os.PathLike, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None
) -> None:
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)


def read_safetensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    path = Path(path)
    try:
        regular_file(path)  # safetensors opens it: no device, no FIFO
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"{path}: cannot read safetensors ({err}); the file is truncated or corrupt") from None


def read_torch(path: str | os.PathLike) -> Any:
    """torch.load with weights_only=True: tensors and plain containers only, never arbitrary objects."""
    path = Path(path)
    try:
        if regular_file(path).st_size and not is_torch_file(path):
            raise CheckpointError(
                f"{path}: not a PyTorch weights file (neither the zip archive torch.save writes nor a pickle); "
                "check the file, or give the checkpoint itself"
            )
        # torch's notice about a pickle protocol it may not read: the error below says it
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            return torch.load(path, map_location="cpu", weights_only=True)
    except CheckpointError:
        raise
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
    with open_regular(path) as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b"{" and 2 <= int.from_bytes(head[:8], "little") < 100_000_000


def is_torch_file(path: str | os.PathLike) -> bool:
    """What torch.save writes starts as a zip archive (older versions: a pickle); so does numpy's .npz (a zip)."""
    with open_regular(path) as f:
        head = f.read(4)
    return head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"


def write_torch(path: str | os.PathLike, tensors: dict[str, torch.Tensor]) -> None:
    """A plain state dict of tensors, written atomically (readable with weights_only=True)."""
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    with atomic_path(path) as tmp:
        torch.save(tensors, tmp)


def read_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every array of an .npz file, read eagerly and without pickle."""
    path = Path(path)
    try:
        regular_file(path)  # numpy opens it: no device, no FIFO
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    try:
        check_npz_sizes(path)
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except CheckpointError:
        raise
    except Exception as err:  # zipfile and numpy's header parser raise many types for damaged archives
        raise CheckpointError(
            f"{path}: cannot read as .npz ({first_line(err)}); the file is truncated, corrupt or holds pickled objects"
        ) from None


def check_npz_sizes(path: Path) -> None:
    """Before anything is decompressed: the archive's declared sizes fit its size on disk (no zip bomb), and each
    array's .npy header promises exactly the bytes its member holds (no huge allocation from a lying header)."""
    with zipfile.ZipFile(path) as archive:
        members = archive.infolist()
        check_expansion(path, sum(m.file_size for m in members), path.stat().st_size, CheckpointError, "the archive")
        for member in members:
            if not member.filename.endswith(".npy"):
                continue
            with archive.open(member) as f:
                version = np.lib.format.read_magic(f)
                read_header = (
                    np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                )
                shape, _, dtype = read_header(f)
                if dtype.hasobject:  # the member is a pickle: never loaded
                    raise CheckpointError(
                        f"{path}: {member.filename} holds Python objects (a pickled array), which vitkit never "
                        "loads (they can run code); save the weights as numeric arrays"
                    )
                need = f.tell() + math.prod(shape) * dtype.itemsize
            if need != member.file_size:
                raise CheckpointError(
                    f"{path}: {member.filename} says shape {shape} ({need:,} bytes with its header) but holds "
                    f"{member.file_size:,} bytes; the file is truncated or corrupt"
                )


def write_npz(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> None:
    """An uncompressed .npz (as the official release files are), written atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)


def sidecar_path(path: str | os.PathLike) -> Path:
    """FILE.json beside a weights file whose format has no place for metadata (.npz, .pth)."""
    path = Path(path)
    return path.with_name(path.name + ".json")


def _staged_sidecar(path: Path) -> Path:
    return path.with_name(f".{path.name}.json.staged")


def write_with_sidecar(path: str | os.PathLike, write_weights, sidecar: dict | None) -> None:
    """Replace a weights file and its sidecar JSON as one pair (None: the new weights have no sidecar).

    The new weights are written under a temporary name; the new sidecar is staged beside them with the
    sha256 of those weights; the weights are renamed into place; then the staged sidecar is applied. A
    reader that finds a staged sidecar (a write cut short) applies it when the weights on disk are the
    ones it names, else drops it: either way the pair on disk is the old one or the new one, never a mix.
    """
    path = not_a_directory(path)
    with target_lock(path), scratch_folder(path) as scratch:  # one writer; scratch names no other writer shares
        fresh = scratch / path.name
        write_weights(fresh)
        if sidecar is not None:  # which weights it describes: a copy left beside other weights is not read as theirs
            sidecar = {**sidecar, SIDECAR_WEIGHTS: fingerprint(fresh)}
        write_json(_staged_sidecar(path), {"weights_sha256": sha256(fresh), "sidecar": sidecar})
        os.replace(fresh, path)
        settle_sidecar(path)


def settle_sidecar(path: str | os.PathLike) -> dict | None:
    """Finish or undo a sidecar replacement that was cut short (see write_with_sidecar); returns the sidecar
    now in force ({} when none). Where the folder is read-only, the answer is computed and nothing is changed."""
    path = Path(path)
    staged, side = _staged_sidecar(path), sidecar_path(path)
    if staged.is_file():
        try:
            with target_lock(path):  # a writer between its renames holds it: its pair is left to it
                return _settle(path, staged, side)
        except TargetBusy:
            pass
        except CheckpointError:  # no lock in a read-only folder: the answer is computed, nothing changed
            return _settle(path, staged, side)
    data = read_json(side) if side.is_file() else {}
    return data if isinstance(data, dict) else {}


def _settle(path: Path, staged: Path, side: Path) -> dict:
    if staged.is_file():
        try:
            record = read_json(staged)
            current = isinstance(record, dict) and path.is_file() and record.get("weights_sha256") == sha256(path)
        except CheckpointError:  # a staged file torn by a kill: its weights never reached their place
            record, current = None, False
        if current:
            try:
                if record.get("sidecar") is None:
                    side.unlink(missing_ok=True)
                else:
                    write_json(side, record["sidecar"])
                staged.unlink(missing_ok=True)
            except OSError:
                return record.get("sidecar") or {}
        else:
            try:
                staged.unlink(missing_ok=True)
            except OSError:
                pass
    data = read_json(side) if side.is_file() else {}
    return data if isinstance(data, dict) else {}


def read_sidecar(path: str | os.PathLike) -> dict:
    """The sidecar JSON of a weights file, {} when there is none (a replacement cut short is settled first), or when it
    was written for other weights (copied beside another file): then a warning says it is not used."""
    data = settle_sidecar(path)
    recorded = data.get(SIDECAR_WEIGHTS)
    if recorded is not None and Path(path).is_file() and recorded != fingerprint(Path(path)):
        warnings.warn(
            f"{sidecar_path(path)}: written for other weights than {path} (copied beside it, or the weights replaced "
            "since): its class names, preprocessing and data record are not used; remove it, or convert the model again"
        )
        return {}
    return data


SIDECAR_WEIGHTS = "weights_fingerprint"  # the key of `fingerprint(weights)` in a sidecar


def fingerprint(path: Path) -> str:
    """Which weights file this is, cheaply for a large one: its size and a digest of its first and last MiB (another
    model's weights differ in both, as a file of other tensors does)."""
    size = path.stat().st_size
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        digest.update(f.read(1 << 20))
        if size > 2 << 20:
            f.seek(-(1 << 20), os.SEEK_END)
            digest.update(f.read(1 << 20))
    return f"{size}:{digest.hexdigest()}"
