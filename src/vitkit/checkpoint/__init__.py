"""Checkpoints in every format users have, read and written by one call each.

Formats: "vitkit" (a directory: config.json + model.safetensors), "npz" (Google's Flax .npz: the
vision_transformer releases, AugReg and big_vision), "timm" (a state dict in .safetensors or .pth), "torchvision"
(torchvision's ViT state dict, .pth or .safetensors) and "hf" (a Hugging Face transformers directory).
`load_pretrained(path)` detects the format from the content and returns a ready model;
`save_checkpoint(model, path, format)` writes any of them and `save_pretrained(model, dir)` vitkit's own. Nothing is
ever unpickled: .pth/.bin files are read with torch.load(weights_only=True).
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import torch

from vitkit.errors import CheckpointError, ConfigError, VitkitError
from vitkit.files import (
    Snapshot,
    finish_replacement,
    identity,
    not_a_directory,
    open_regular,
    read_stable,
    regular_file,
    snapshot_json,
)
from vitkit.limits import check_room
from vitkit.models import ModelConfig, VisionTransformer, canonical_name
from vitkit.models import create_model as build_named
from vitkit.models import list_models as named_models
from vitkit.models.config import TIMM_NAMES
from vitkit.models.registry import as_features, filtered
from vitkit.paths import local_path, missing

from . import hf, hf_families, hub, native, npz, runs, timm, torchvision
from .destination import SUFFIXES, refuse_other_files, refuse_overlap, target_format
from .io import is_safetensors
from .native import check_state, load_model, model_shapes, save_pretrained

FORMATS: dict[str, ModuleType] = {
    "vitkit": native, "npz": npz, "timm": timm, "torchvision": torchvision, "hf": hf_families,
}  # fmt: skip
# what a pretrained model may change, as vitkit and timm name them: no weight depends on them
RATES = ("dropout", "attn_dropout", "drop_path")
RATES += tuple(timm for timm, own in TIMM_NAMES.items() if own in RATES)


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


class Located(NamedTuple):
    """A checkpoint resolved once: its path, its format, and its config.json as read to tell the format (None for a
    file), handed down to the format's reader instead of read again."""

    path: Path
    format: str
    config: Snapshot | None = None


def detect_format(path: str | os.PathLike) -> str:
    """The format of `path` from its content: a directory's config.json, a file's magic bytes (then its suffix)."""
    path = Path(path)
    return _detect(path, _snapshot(path, None))


def _snapshot(path: Path, known: Snapshot | None) -> Snapshot | None:
    """The config.json of directory `path`, read once: `known` where it is that, else read now (None for a file)."""
    if known is not None and known.directory == path:
        return known
    return snapshot_json(path, native.CONFIG_NAME) if path.is_dir() else None


def _detect(path: Path, config: Snapshot | None) -> str:
    """detect_format of `path`, whose config.json (a directory's) is `config`."""
    if path.is_dir():
        return _directory_format(path, config.data if config is not None else None)
    if not path.exists():
        raise CheckpointError(f"{path}: no such file or directory")
    regular_file(path)  # a device or a FIFO: said, never read
    return _file_format(path)


def _directory_format(path: Path, config) -> str:
    """The format of a checkpoint directory, told by its config.json (`config`, as read)."""
    if native.says_native(config):
        return "vitkit"
    if hf.says_hf(config):
        return "hf"
    if timm.is_timm_dir(path, config):
        return "timm"
    if (path / "finetune.json").is_file():  # transfer.finetune's claim on its directory, written first
        raise CheckpointError(
            f"{path}: a fine-tuning sweep that has not finished (no final/ yet); run the same vitkit finetune "
            "command again to continue it, or name one of its lr_*/ runs"
        )
    raise CheckpointError(
        f"{path}: unknown checkpoint format: neither a vitkit checkpoint or run directory (config.json with "
        '"format": "vitkit"; run.yaml, final/), a Hugging Face one ("model_type": "vit" or "deit") nor timm\'s '
        '("architecture" beside model.safetensors or pytorch_model.bin)'
    )


def _file_format(path: Path) -> str:
    """The format of a checkpoint file, told by its magic bytes, then its suffix."""
    export = export_kind(path)
    if export is not None:
        kind, runtime = export
        raise CheckpointError(
            f"{path}: {kind}, a deployment file (vitkit export writes them), not a checkpoint; vitkit's commands "
            f"read checkpoints: give the one it was exported from (the file itself runs in {runtime})"
        )
    if is_safetensors(path):  # vitkit's and HF's safetensors live in directories, handled above
        return "torchvision" if torchvision.is_torchvision_file(path) else "timm"
    with open_regular(path) as f:
        head = f.read(2)
    if head == b"PK":
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except Exception:  # a damaged archive (BadZipFile, UnicodeDecodeError, EOFError ...): the suffix decides below
            names = []
        if any(n.endswith(".npy") for n in names):
            return "npz"
        if any(n.endswith("data.pkl") for n in names):  # torch.save's zip format
            return "torchvision" if torchvision.is_torchvision_file(path) else "timm"
    elif head[:1] == b"\x80":  # torch.save's legacy (pickle) format, read with weights_only
        return "torchvision" if torchvision.is_torchvision_file(path) else "timm"
    # damaged or unusual: the reader says what is wrong
    if path.suffix in SUFFIXES:
        return SUFFIXES[path.suffix]
    raise CheckpointError(
        f"{path}: unknown checkpoint format; expected a vitkit or Hugging Face directory, an .npz, or a "
        "timm .safetensors/.pth state dict; if the file is one of them, name its format (vitkit convert or info --from "
        "FORMAT; format= in Python)"
    )


def locate(given: str | os.PathLike, format: str | None = None) -> Located:
    """The checkpoint `given` names, resolved once. A run directory stands for its model, a weights file inside a
    vitkit or HF directory for its directory, a hub name (`hub`) for its folder in huggingface_hub's cache. A URL or a
    path that is not there is an error as given (owner/name gets a hint), not as Path folds it."""
    path = hub.where(given) if hub.hub_name(given) else local_path(given, CheckpointError)
    if not path.exists():
        raise CheckpointError(missing(given))
    config = None
    if format in (None, "vitkit", "hf"):
        path, config = runs.locate(path)
    if format is None:
        config = _snapshot(path, config)
        return Located(path, _detect(path, config), config)
    if format not in FORMATS:
        raise CheckpointError(f"format: unknown format {format!r}; choose one of {', '.join(FORMATS)}")
    if not path.exists():
        raise CheckpointError(f"{path}: no such file or directory")
    config = _snapshot(path, config)
    try:
        found = _detect(path, config)
    except VitkitError:  # content of no known format: the forced reader says what is wrong with it
        return Located(path, format)
    if found != format and (path.is_dir() != (format in ("vitkit", "hf")) or found == "npz" or format == "npz"):
        an = {"npz": "an npz", "hf": "an hf"}
        raise CheckpointError(
            f"{path}: its content is {an.get(found, f'a {found}')} checkpoint, not {an.get(format, f'a {format}')} "
            "one; drop --from (the format is detected from the content)"
        )
    return Located(path, format, config)


def _read_stable(found: Located, read):
    """`read(path)` of the checkpoint as `read_stable` reads it, handed the config.json read to tell its format while
    the directory is still the one it was read from (then it is not read again)."""
    config = found.config

    def read_once(path: Path):
        if config is not None and config.data is not None and identity(path) == config.identity:
            return read(path, config=config.data)
        return read(path)

    return read_stable(found.path, read_once)


def read_checkpoint(
    path: str | os.PathLike, *, format: str | None = None, image_size: int | tuple[int, int] | None = None
) -> tuple[ModelConfig, dict[str, torch.Tensor], str]:
    """(config, vitkit state dict, format) of any checkpoint, without building the model.

    `image_size` only decides the grid when the position embeddings are not square.
    """
    given = local_path(path, CheckpointError)
    if not given.exists() and not hub.hub_name(path) and os.access(given.parent, os.W_OK):
        finish_replacement(given)  # a replacement cut by a kill between its two renames
    return _read_located(locate(path, format), image_size)


def _read_located(found: Located, image_size) -> tuple[ModelConfig, dict[str, torch.Tensor], str]:
    """read_checkpoint of a located checkpoint: every failure one CheckpointError naming the file."""
    format = found.format
    config, state = _reading(found, lambda p, **given: FORMATS[format].read(p, image_size=image_size, **given))
    # the config and the weights agree, every weight is finite
    check_state(model_shapes(config), state, source=found.path)
    return config, state, format


def _reading(found: Located, read):
    """`read` of a located checkpoint (its weights, or its metadata) as `_read_stable` reads it, every failure one
    CheckpointError naming the file. The readers check each value they read against its key's domain (`values`) and
    name the key; what still breaks one is said in words, never as a Python exception type."""
    path, format = found.path, found.format
    try:
        return _read_stable(found, read)
    except CheckpointError:
        raise
    except ConfigError as err:  # the shapes of a damaged or foreign file imply an impossible model
        raise CheckpointError(
            f"{path}: does not describe a valid {format} ViT ({err}); the file is corrupt or of another model"
        ) from None
    except Exception as err:  # a reader met a value no intact file holds: one clear line, never a traceback
        reason = str(err).strip().splitlines()[0] if str(err).strip() else "no reason given"
        raise CheckpointError(
            f"{path}: cannot read as a {format} checkpoint: a value in it is of a kind no {format} checkpoint holds "
            f"({reason}); the file is corrupt"
        ) from None


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
    model = _ready(config, state, path, image_size)
    if num_classes is not None and num_classes != config.num_classes:
        model.reset_head(num_classes, keep_pre_logits=keep_pre_logits)
    return model.eval()


def create_model(
    name: str, *, pretrained: bool = False, features_only: bool = False, out_indices=None, **overrides
) -> torch.nn.Module:
    """A named model (`vitkit.models.create_model`); with `pretrained`, the model of the checkpoint or hub name `name`
    (hf-hub:ORG/NAME[@REV], timm's MODEL.TAG), at `image_size` with `num_classes` as `load_pretrained` makes it, its
    dropout and stochastic depth rates changed where given (timm's names too: drop_path_rate ...), and its
    checkpoint's class names and crop in `pretrained_cfg`. features_only, out_indices: as timm's, a feature extractor
    (`vitkit.models.FeatureNet`)."""
    if not pretrained:
        return build_named(name, features_only=features_only, out_indices=out_indices, **overrides)
    if "img_size" in overrides:  # timm's name, as timm.create_model(name, pretrained=True, img_size=384) takes it
        if "image_size" in overrides:
            raise ConfigError("img_size: timm's name of image_size, which is given too; give one of them")
        overrides["image_size"] = overrides.pop("img_size")
    unknown = sorted(set(overrides) - {"image_size", "num_classes", "keep_pre_logits", *RATES})
    if unknown:
        raise ConfigError(
            f"{', '.join(unknown)}: a pretrained model keeps its architecture; only image_size, num_classes and the "
            "dropout and drop_path rates change it"
        )
    if canonical_name(name) in named_models() and not Path(name).exists():
        raise CheckpointError(
            f"{name}: a vitkit size, without weights of its own; with pretrained=True name a hub model "
            "(hf-hub:google/vit-base-patch16-224, timm's vit_base_patch16_224.augreg2_in21k_ft_in1k) or a checkpoint"
        )
    num_classes, keep = overrides.pop("num_classes", None), overrides.pop("keep_pre_logits", False)
    model, metadata = load_with_metadata(name, image_size=overrides.pop("image_size", None), rates=overrides)
    if num_classes is not None and num_classes != model.config.num_classes:
        model.reset_head(num_classes, keep_pre_logits=keep)
        metadata = {k: v for k, v in metadata.items() if k != "class_names"}  # a new head: other classes
    model.pretrained_metadata = metadata
    return as_features(model, features_only, out_indices)


def list_models(filter="", *, pretrained: bool = False, exclude_filters=()) -> list[str]:
    """The named models (`vitkit.models.list_models`: wildcard patterns, as timm's); with `pretrained`, the hub models
    in huggingface_hub's cache (hf-hub:ORG/NAME, timm's MODEL.TAG) that `create_model(name, pretrained=True)` reads
    offline: a vitkit size has no weights of its own."""
    if not pretrained:
        return named_models(filter, exclude_filters=exclude_filters)
    found = hub.cached()
    return [n for n in filtered(found, filter, exclude_filters) if _readable(found[n])]


def _readable(folder: Path) -> bool:
    """Whether `folder` holds a checkpoint of a format vitkit reads (told by its config.json and files)."""
    try:
        detect_format(folder)
    except (VitkitError, OSError):
        return False
    return True


def _ready(config: ModelConfig, state: dict, source, image_size) -> VisionTransformer:
    """The model holding `state` (checked already), at `image_size` where one is given."""
    model = load_model(config, state, source=source, checked=True)  # read_checkpoint checked shapes and values
    if image_size is not None:
        model.set_image_size(image_size)
    return model


def read_metadata(path: str | os.PathLike, *, format: str | None = None) -> dict:
    """What travels with the weights besides the architecture: `class_names`, `preprocess` (crop_pct) and the
    `data` the model was trained on, as far as the checkpoint holds them ({} when it holds none)."""
    found = locate(path, format)
    metadata = _reading(found, FORMATS[found.format].read_metadata)
    native.check_extra(metadata, None, found.path)  # the same checks as config.json's, for every format's record
    return metadata


def load_with_metadata(
    path: str | os.PathLike,
    *,
    image_size: int | tuple[int, int] | None = None,
    format: str | None = None,
    rates: dict | None = None,
) -> tuple[VisionTransformer, dict]:
    """(model, metadata) of any checkpoint: `load_pretrained` and `read_metadata` of the same path, resolved once;
    `rates`: dropout and stochastic depth rates (config fields or timm's names) to train it with instead."""
    return _with_metadata(locate(path, format), image_size, rates)


def _with_metadata(found: Located, image_size, rates: dict | None = None) -> tuple[VisionTransformer, dict]:
    """`load_with_metadata` of a located checkpoint."""
    config, state, _ = _read_located(found, image_size)
    config = config.replace(**(rates or {}))  # no weight changes shape with them
    model = _ready(config, state, found.path, image_size).eval()
    metadata = _reading(found, FORMATS[found.format].read_metadata)
    # the same checks as config.json's, for every format's record
    native.check_extra(metadata, model.config, found.path)
    return model, metadata


def save_checkpoint(
    model: VisionTransformer, path: str | os.PathLike, format: str | None = "vitkit", *, metadata: dict | None = None
) -> Path:
    """Write `model` as `format`: vitkit/hf make a directory, npz an .npz file, timm a .safetensors or .pth file;
    None: the format `path`'s suffix names (SUFFIXES), else a vitkit directory. A path that does not fit the format
    (a timm file named m.npz, a vitkit directory named m.pth) is refused, and so is a disk without room for it.

    `metadata` (class names, preprocessing, training data: what `read_metadata` returns) goes where the
    format has a place for it (vitkit and HF config.json, safetensors metadata), else into FILE.json beside it."""
    format = _target(path, format)
    check_room(path, _nbytes(model), f"the {format} checkpoint", CheckpointError)
    return FORMATS[format].write(model, path, metadata=metadata or {})


def _target(path: str | os.PathLike, format: str | None) -> str:
    """The format `path` is written in (`target_format`), after `format` is checked to be one vitkit writes and, for a
    file, `path` not to be a directory (what is there is told before what its name says)."""
    if format is not None and format not in FORMATS:
        raise CheckpointError(f"format: unknown format {format!r}; choose one of {', '.join(FORMATS)}")
    # a file's name (timm's Hub folder has no file suffix)
    if format in ("npz", "torchvision") or format == "timm" and Path(path).suffix.lower() in SUFFIXES:
        not_a_directory(path)
    return target_format(path, format)


def _nbytes(model: torch.nn.Module) -> int:
    """The bytes of `model`'s weights, about what any format writes of them."""
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


class Converted(NamedTuple):
    """What `convert_checkpoint` wrote: the format, the model as written and the metadata that went with it."""

    format: str
    model: VisionTransformer
    metadata: dict


def convert_checkpoint(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    src_format: str | None = None,
    format: str | None = None,
    image_size: int | tuple[int, int] | None = None,
    num_classes: int | None = None,
) -> Converted:
    """Checkpoint `src` (of any format, or `src_format`) rewritten at `dst` as `format` (None: as `save_checkpoint`
    chooses from the suffix), at `image_size`, with a new zero-initialised head where `num_classes` is not the
    checkpoint's (its class names go with the old one). `dst` may not be `src`, hold it or lie in it, nor be a file
    that holds no checkpoint; the room a new head needs, on disk and in memory, is checked before it is built."""
    refuse_overlap(src, dst)
    refuse_other_files(dst)
    found = locate(src, src_format)
    model, metadata = _with_metadata(found, image_size)
    format = _target(dst, format)
    # the figures its run measured, on the model as it is: an export's model card names them
    same = image_size is None and num_classes in (None, model.config.num_classes)
    metrics = {"metrics": runs.run_metrics(found.path) if same else []} if format in ("hf", "timm") else {}
    if num_classes is None or num_classes == model.config.num_classes:
        check_room(dst, _nbytes(model), f"the {format} checkpoint", CheckpointError)
    else:
        # fp32, counted on the meta device before the head is built
        nbytes = sum(t.numel() * 4 for t in model_shapes(model.config.replace(num_classes=num_classes)).values())
        check_room(dst, nbytes, f"a model with {num_classes:,} classes", CheckpointError, memory=True)
        model.reset_head(num_classes)
        # a new head has no names yet
        metadata = {k: v for k, v in metadata.items() if k != "class_names"}
    FORMATS[format].write(model, dst, metadata=metadata, **metrics)
    return Converted(format, model, metadata)


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
    "Converted",
    "Located",
    "SUFFIXES",
    "convert_checkpoint",
    "create_model",
    "detect_format",
    "load_pretrained",
    "load_with_metadata",
    "locate",
    "read_checkpoint",
    "read_metadata",
    "refuse_untrained_head",
    "save_checkpoint",
    "target_format",
    "untrained_head",
    "save_pretrained",
]
