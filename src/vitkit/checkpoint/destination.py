"""Where a checkpoint goes: the one table of file suffixes and the formats they name (format detection reads it too),
and the refusals of a destination a format cannot be written to as named."""

from __future__ import annotations

import os
from pathlib import Path

from vitkit.errors import ConfigError

from .io import is_safetensors, is_torch_file

# The suffix of a checkpoint file and its format. pytorch_model.bin (timm's and transformers' older files) is read,
# never written: an OpenVINO IR's weights share the suffix.
SUFFIXES: dict[str, str] = {".npz": "npz", ".safetensors": "timm", ".pth": "timm", ".pt": "timm", ".bin": "timm"}
READ_ONLY = frozenset({".bin"})
WRITTEN = {suffix: format for suffix, format in SUFFIXES.items() if suffix not in READ_ONLY}

# Other frameworks' checkpoint files: names that read as a file, of no format vitkit writes.
_FOREIGN = (".ckpt", ".h5", ".pkl", ".msgpack")

# What `vitkit export` writes, by suffix.
_DEPLOYMENT = {".onnx": "onnx", ".xml": "openvino", ".pt2": "exported-program"}


def target_format(dst: str | os.PathLike, given: str | None) -> str:
    """The format `dst` is written in: `given`, else what its suffix names (WRITTEN), else a vitkit directory.
    A name that does not fit the format (a timm file named .npz, a directory named like a file, a file of a format
    vitkit does not write) is one ConfigError naming the name to give instead; --to timm with a name that is not a
    file's writes timm's Hub folder."""
    suffix = Path(dst).suffix.lower()
    if suffix in _DEPLOYMENT:
        raise ConfigError(
            f"DST: {dst} names an {_DEPLOYMENT[suffix]} file, which vitkit export writes: vitkit export SRC "
            f"--format {_DEPLOYMENT[suffix]} --out {dst}"
        )
    # a timm checkpoint is a .safetensors or .pth file, or (any other name) timm's Hub folder
    if given == "timm" and (suffix in SUFFIXES or suffix in _FOREIGN) and WRITTEN.get(suffix) != "timm":
        raise ConfigError(
            f"DST: a timm checkpoint is a .safetensors or .pth file, or a folder; name it "
            f"{_renamed(dst, '.safetensors')} or {Path(dst).with_suffix('')}"
        )
    if given == "torchvision" and WRITTEN.get(suffix) != "timm":
        raise ConfigError(
            f"DST: a torchvision checkpoint is a .safetensors or .pth file; name it {_renamed(dst, '.safetensors')}"
        )
    # an .npz named .safetensors is a zip no safetensors reader opens
    if given == "npz" and WRITTEN.get(suffix) != "npz":
        raise ConfigError(f"DST: an npz checkpoint is a .npz file; name it {_renamed(dst, '.npz')}")
    # a directory named like a file would read as that file's format
    if given in ("vitkit", "hf") and suffix in WRITTEN:
        raise ConfigError(f"DST: a {given} checkpoint is a directory; give it a name without the {suffix} suffix")
    if given is None and (suffix in READ_ONLY or suffix in _FOREIGN):
        raise ConfigError(
            f"DST: {dst} reads as a file, and convert writes .npz, .safetensors, .pth or a directory (vitkit, or "
            "--to hf); give one of those"
        )
    return given or WRITTEN.get(suffix, "vitkit")


def _renamed(dst: str | os.PathLike, suffix: str) -> str:
    """`dst` with `suffix`: in place of a suffix vitkit writes, else added to the name as given."""
    return str(Path(dst).with_suffix(suffix)) if Path(dst).suffix.lower() in WRITTEN else f"{dst}{suffix}"


def refuse_overlap(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """DST may not be SRC, nor hold it or lie inside it: writing replaces DST as a whole, so SRC would be lost."""
    a, b = (os.path.realpath(os.path.expanduser(p)) for p in (src, dst))
    if os.path.commonpath([a, b]) in (a, b):
        what = "is SRC" if a == b else ("lies inside SRC" if os.path.commonpath([a, b]) == a else "holds SRC")
        raise ConfigError(
            f"DST: {dst} {what}, and writing it would replace the checkpoint being read; write to another path"
        )


def refuse_other_files(dst: str | os.PathLike) -> None:
    """An existing file at DST is replaced only where it holds a checkpoint (a zip as .npz and torch write, a pickle,
    a safetensors header) or nothing: someone's notes.pth or a text file named .safetensors is not written over."""
    path = Path(dst)
    if path.is_file() and path.stat().st_size and not (is_torch_file(path) or is_safetensors(path)):
        raise ConfigError(
            f"DST: {dst} is a file that holds no checkpoint (not a zip, pickle or safetensors file), and writing "
            "would replace it; write to another path, or remove it first (nothing was changed)"
        )
