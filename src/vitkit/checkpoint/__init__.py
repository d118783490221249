"""Checkpoints in every format users have, read and written by one call each.

Formats: "vitkit" (a directory: config.json + model.safetensors), "npz" (Google's Flax .npz: the
vision_transformer releases, AugReg and big_vision), "timm" (a state dict in .safetensors or .pth) and
"hf" (a Hugging Face transformers ViT directory). `load_pretrained(path)` detects the format from the
content and returns a ready model; `save_checkpoint(model, path, format)` writes any of them and
`save_pretrained(model, dir)` vitkit's own. Nothing is ever unpickled: .pth/.bin files are read with
torch.load(weights_only=True).
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from types import ModuleType

import torch

from vitkit.errors import CheckpointError, ConfigError, VitkitError, first_line
from vitkit.files import finish_replacement, read_stable
from vitkit.limits import check_room
from vitkit.models import ModelConfig, VisionTransformer
from vitkit.paths import local_path, missing

from . import hf, native, npz, runs, timm
from .io import is_safetensors
from .native import check_state, load_model, model_shapes, save_pretrained

FORMATS: dict[str, ModuleType] = {"vitkit": native, "npz": npz, "timm": timm, "hf": hf}
_SUFFIXES = {".npz": "npz", ".safetensors": "timm", ".pth": "timm", ".pt": "timm", ".bin": "timm"}


def export_kind(path: Path) -> tuple[str, str] | None:
    """(what deployment file `path` is, what runs it) for ONNX, OpenVINO IR, TorchScript and ExportedProgram files, else
    None: files no checkpoint reader can take, told apart by suffix and by the zip entries PyTorch writes in its two."""
    if path.suffix == ".onnx":
        return "an ONNX model", "ONNX Runtime"
    if path.suffix == ".xml" or path.suffix == ".bin" and path.with_suffix(".xml").is_file():
        return (
            "an OpenVINO IR"
            if path.suffix == ".xml"
            else f"the weights of the OpenVINO IR {path.with_suffix('.xml').name}"
        ), "OpenVINO"
    try:
        with zipfile.ZipFile(path) as archive:
            entries = {name.split("/", 1)[-1] for name in archive.namelist()}
    except Exception:  # not a zip, or a damaged one: the checks below say what it is
        return None
    if "archive_format" in entries:
        return "a torch.export ExportedProgram", "torch.export.load"
    if "constants.pkl" in entries or any(e.startswith("code/") for e in entries):
        return "a TorchScript program", "torch.jit.load"
    return None


def detect_format(path: str | os.PathLike) -> str:
    """The format of `path` from its content: a directory's config.json, a file's magic bytes (then its suffix)."""
    path = Path(path)
    if path.is_dir():
        if native.is_native(path):
            return "vitkit"
        if hf.is_hf(path):
            return "hf"
        if timm.is_timm_dir(path):
            return "timm"
        if (path / "finetune.json").is_file():  # transfer.finetune's claim on its directory, written first
            raise CheckpointError(
                f"{path}: a fine-tuning sweep that has not finished (no final/ yet); run the same vitkit finetune "
                "command again to continue it, or name one of its lr_*/ runs"
            )
        raise CheckpointError(
            f"{path}: unknown checkpoint format: neither a vitkit checkpoint or run directory (config.json with "
            '"format": "vitkit"; run.yaml, final/), a Hugging Face one ("model_type": "vit") nor timm\'s '
            '("architecture" beside model.safetensors or pytorch_model.bin)'
        )
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file or directory")
    export = export_kind(path)
    if export is not None:
        kind, runtime = export
        raise CheckpointError(
            f"{path}: {kind}, a deployment file (vitkit export writes them), not a checkpoint; vitkit's commands "
            f"read checkpoints: give the one it was exported from (the file itself runs in {runtime})"
        )
    if is_safetensors(path):
        return "timm"  # vitkit's and HF's safetensors live in directories, handled above
    with open(path, "rb") as f:
        head = f.read(2)
    if head == b"PK":
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except Exception:  # a damaged archive (BadZipFile, UnicodeDecodeError, EOFError ...): the suffix decides below
            names = []
        if any(n.endswith(".npy") for n in names):
            return "npz"
        if any(n.endswith("data.pkl") for n in names):
            return "timm"  # torch.save's zip format
    elif head[:1] == b"\x80":
        return "timm"  # torch.save's legacy (pickle) format, read with weights_only
    if path.suffix in _SUFFIXES:
        return _SUFFIXES[path.suffix]  # damaged or unusual: the reader says what is wrong
    raise CheckpointError(
        f"{path}: unknown checkpoint format; expected a vitkit or Hugging Face directory, an .npz, or a "
        "timm .safetensors/.pth state dict; if the file is one of them, name its format (vitkit convert or info --from "
        "FORMAT; format= in Python)"
    )


def _resolve(given: str | os.PathLike, format: str | None) -> tuple[Path, str]:
    """A run directory stands for its model, a weights file inside a vitkit or HF directory for its directory. A URL or
    a path that is not there is an error as given (a hub name like owner/name gets a hint), not as Path folds it."""
    path = local_path(given, CheckpointError)
    if not path.exists():
        raise CheckpointError(missing(given))
    if format in (None, "vitkit", "hf"):
        path = runs.resolve(path)
    if format is None:
        return path, detect_format(path)
    if format not in FORMATS:
        raise CheckpointError(f"format: unknown format {format!r}; choose one of {', '.join(FORMATS)}")
    if not path.exists():
        raise CheckpointError(f"{path}: no such file or directory")
    try:
        found = detect_format(path)
    except VitkitError:  # content of no known format: the forced reader says what is wrong with it
        return path, format
    if found != format and (path.is_dir() != (format in ("vitkit", "hf")) or found == "npz" or format == "npz"):
        an = {"npz": "an npz", "hf": "an hf"}
        raise CheckpointError(
            f"{path}: its content is {an.get(found, f'a {found}')} checkpoint, not {an.get(format, f'a {format}')} "
            "one; drop --from (the format is detected from the content)"
        )
    return path, format


def read_checkpoint(
    path: str | os.PathLike, *, format: str | None = None, image_size: int | tuple[int, int] | None = None
) -> tuple[ModelConfig, dict[str, torch.Tensor], str]:
    """(config, vitkit state dict, format) of any checkpoint, without building the model.

    `image_size` only decides the grid when the position embeddings are not square.
    """
    given, path = path, local_path(path, CheckpointError)
    if not path.exists() and os.access(path.parent, os.W_OK):
        finish_replacement(path)  # a replacement cut by a kill between its two renames
    path, format = _resolve(given, format)
    try:
        config, state = read_stable(path, lambda p: FORMATS[format].read(p, image_size=image_size))
    except CheckpointError:
        raise
    except ConfigError as err:  # the shapes of a damaged or foreign file imply an impossible model
        raise CheckpointError(
            f"{path}: does not describe a valid {format} ViT ({err}); the file is corrupt or of another model"
        ) from None
    except Exception as err:  # a reader met a value no intact file holds: one clear line, never a traceback
        raise CheckpointError(
            f"{path}: cannot read as a {format} checkpoint ({type(err).__name__}: {first_line(err)}); the file is corrupt"
        ) from None
    check_state(model_shapes(config), state, source=path)  # the config and the weights agree, every weight is finite
    return config, state, format


def load_pretrained(
    path: str | os.PathLike,
    *,
    image_size: int | tuple[int, int] | None = None,
    num_classes: int | None = None,
    format: str | None = None,
    keep_pre_logits: bool = False,
) -> VisionTransformer:
    """A ready model from a checkpoint of any format (detected unless `format` is given).

    image_size: resolution to run at; position embeddings are 2D-resampled if the grid changes (paper §3.2).
    num_classes: if different from the checkpoint's, a new zero-initialised head; the pre-logits layer is
        dropped as in the official fine-tuning code unless `keep_pre_logits`.
    """
    config, state, format = read_checkpoint(path, format=format, image_size=image_size)
    model = load_model(config, state, source=path, checked=True)  # read_checkpoint checked shapes and values
    if image_size is not None:
        model.set_image_size(image_size)
    if num_classes is not None and num_classes != config.num_classes:
        model.reset_head(num_classes, keep_pre_logits=keep_pre_logits)
    return model.eval()


def read_metadata(path: str | os.PathLike, *, format: str | None = None) -> dict:
    """What travels with the weights besides the architecture: `class_names`, `preprocess` (crop_pct) and the
    `data` the model was trained on, as far as the checkpoint holds them ({} when it holds none)."""
    path, format = _resolve(path, format)
    metadata = read_stable(path, FORMATS[format].read_metadata)
    native.check_extra(metadata, None, path)  # the same checks as config.json's, for every format's record
    return metadata


def load_with_metadata(
    path: str | os.PathLike, *, image_size: int | tuple[int, int] | None = None, format: str | None = None
) -> tuple[VisionTransformer, dict]:
    """(model, metadata) of any checkpoint: `load_pretrained` and `read_metadata` of the same resolved path."""
    path, format = _resolve(path, format)
    model = load_pretrained(path, image_size=image_size, format=format)
    metadata = read_stable(path, FORMATS[format].read_metadata)
    native.check_extra(metadata, model.config, path)  # the same checks as config.json's, for every format's record
    return model, metadata


def save_checkpoint(
    model: VisionTransformer, path: str | os.PathLike, format: str = "vitkit", *, metadata: dict | None = None
) -> Path:
    """Write `model` as `format`: vitkit/hf make a directory, npz an .npz file, timm a .safetensors or .pth file.

    `metadata` (class names, preprocessing, training data: what `read_metadata` returns) goes where the
    format has a place for it (vitkit and HF config.json, safetensors metadata), else into FILE.json beside it."""
    if format not in FORMATS:
        raise CheckpointError(f"format: unknown format {format!r}; choose one of {', '.join(FORMATS)}")
    nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    check_room(path, nbytes, f"the {format} checkpoint", CheckpointError)
    return FORMATS[format].write(model, path, metadata=metadata or {})


def untrained_head(meta: dict, checkpoint, model: torch.nn.Module | None = None) -> str | None:
    """Why the model's classification head never trained, so that its predictions and accuracy would mean nothing
    (an error message naming `checkpoint`), else None: masked patch pre-training writes the ViT with its zero head, a
    backbone has none (a Hugging Face ViTModel, num_classes 0), and a new head is all zeros (`convert --num-classes`).
    Its features are fine."""
    then = (
        f"fine-tune it first (vitkit finetune --from {checkpoint}), or read its features (vitkit fewshot / knn / "
        "linear-probe)"
    )
    if meta.get("objective") == "masked_patch":
        return (
            f"{checkpoint}: pre-trained with masked patch prediction, so its classification head never trained; {then}"
        )
    if model is not None and model.config.num_classes == 0:
        return f"{checkpoint}: has no classification head (a backbone: its outputs are features); {then}"
    head = getattr(model, "head", None)
    if isinstance(head, torch.nn.Linear) and not head.weight.any() and not (head.bias is not None and head.bias.any()):
        return (
            f"{checkpoint}: its classification head is all zeros (a new head that never trained, as convert --num-classes "
            f"writes), so it scores every class alike; {then}"
        )
    return None


def refuse_untrained_head(meta: dict, checkpoint, model: torch.nn.Module | None = None) -> None:
    """A CheckpointError where `untrained_head` says why the head never trained."""
    reason = untrained_head(meta, checkpoint, model)
    if reason is not None:
        raise CheckpointError(reason)


__all__ = [
    "FORMATS",
    "detect_format",
    "load_pretrained",
    "load_with_metadata",
    "read_checkpoint",
    "read_metadata",
    "refuse_untrained_head",
    "save_checkpoint",
    "untrained_head",
    "save_pretrained",
]
