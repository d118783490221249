"""vitkit's own format: a directory with config.json (model config + preprocessing), model.safetensors and
checksums.json (size and sha256 of the weights, written last and checked on every load)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vitkit.errors import CheckpointError, ConfigError, has_control_characters
from vitkit.files import (
    atomic_dir,
    read_json,
    read_stable,
    refuse_foreign,
    says,
    snapshot_json,
    verify_checksums,
    write_checksums,
    write_json,
)
from vitkit.limits import DOMAINS, number_problem
from vitkit.models import ModelConfig, VisionTransformer, build_model, config_from_dict

from .card import publishable
from .io import read_safetensors, write_safetensors

FORMAT = "vitkit"
VERSION = 1
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


def is_native(path: str | os.PathLike) -> bool:
    return says_native(snapshot_json(path, CONFIG_NAME).data)


def says_native(config: Any) -> bool:
    """`config` (a parsed config.json) is a vitkit checkpoint's."""
    return says(config, "format", FORMAT)


def save_pretrained(
    model: VisionTransformer, directory: str | os.PathLike, *, extra: dict[str, Any] | None = None
) -> Path:
    """Write `model` to `directory`, replacing an older one as a whole (built beside it, then renamed into place).

    `extra` (e.g. {"class_names": [...]}) goes into config.json.
    """
    refuse_foreign(directory)
    with atomic_dir(directory) as tmp:
        write_pretrained(model, tmp, extra=extra)
    return Path(directory)


def write_pretrained(model: VisionTransformer, directory: Path, *, extra: dict[str, Any] | None = None) -> Path:
    """The files of a vitkit checkpoint, into a new directory (see save_pretrained for replacing one).

    The weights are written before the config, each atomically, so a directory with a config always
    has weights that match it; their checksums come last.
    """
    directory = Path(directory)
    state = {k: v for k, v in model.state_dict().items()}
    write_safetensors(directory / WEIGHTS_NAME, state, metadata={"format": "pt"})
    write_json(
        directory / CONFIG_NAME,
        {"format": FORMAT, "version": VERSION, "model": model.config.to_dict(), **(extra or {})},
    )
    write_checksums(directory, [WEIGHTS_NAME])
    return directory


def read_native_config(directory: str | os.PathLike, config: Any = None) -> tuple[ModelConfig, dict[str, Any]]:
    """The model config and the rest of config.json (e.g. class names); `config`: config.json as already read."""
    path = Path(directory) / CONFIG_NAME
    data = read_json(path) if config is None else config
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f'{path}: not a vitkit config (no "format": "vitkit")')
    try:
        config = config_from_dict(data.get("model"))  # a ViT, or a BiT ResNet tagged "arch": "bit"
    except ConfigError as err:
        raise CheckpointError(f"{path}: bad model config: {err}") from None
    rest = {k: v for k, v in data.items() if k not in ("format", "version", "model")}
    check_extra(rest, config, path)
    return config, rest


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _seed(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# PIL's filters, in the order of their numbers (Hugging Face's "resample"); timm's "interpolation" names them
INTERPOLATIONS = ("nearest", "lanczos", "bilinear", "bicubic", "box", "hamming")
CROP_MODES = ("center", "squash")  # keep the aspect ratio (the shorter side to size / crop_pct), or resize both sides


def _preprocess_ok(v: Any) -> bool:
    """`v` is a "preprocess" record: crop_pct in its domain (limits.DOMAINS), crop_mode and interpolation among the
    known ones."""
    return (
        isinstance(v, dict)
        and (v.get("crop_pct") is None or number_problem("crop_pct", v["crop_pct"]) is None)
        and v.get("crop_mode", "center") in CROP_MODES
        and v.get("interpolation", "bilinear") in INTERPOLATIONS
    )


# what the head's outputs are (Hugging Face's names): a softmax over classes, or a sigmoid per class
PROBLEM_TYPES = ("single_label_classification", "multi_label_classification")
MULTI_LABEL = PROBLEM_TYPES[1]


def is_multi_label(metadata: dict) -> bool:
    """Whether a checkpoint's metadata says its head is a sigmoid per class (trained with train.objective=multi_label)."""
    return metadata.get("problem_type") == MULTI_LABEL


# config.json entries beside the model config: key -> (check, what it must be); one check for every reader
EXTRA_CHECKS = {
    "class_names": (
        lambda v, c: (
            isinstance(v, list)
            and all(isinstance(n, str) and not has_control_characters(n) for n in v)
            and len(set(v)) == len(v)
            and (c is None or not c.num_classes or len(v) == c.num_classes)
        ),
        "a list of one distinct name per class of the head (text without newlines or terminal escapes)",
    ),
    "preprocess": (
        lambda v, c: _preprocess_ok(v),
        f"a mapping of crop_pct ({DOMAINS['crop_pct'].says}), crop_mode ({', '.join(CROP_MODES)}) and interpolation "
        f"({', '.join(INTERPOLATIONS)})",
    ),
    "data": (
        lambda v, c: (
            isinstance(v, dict)
            and (v.get("path") is None or isinstance(v["path"], str))
            and (v.get("val_fraction") is None or _number(v["val_fraction"]) and 0 <= v["val_fraction"] < 1)
            and (v.get("split_seed") is None or _seed(v["split_seed"]))
        ),
        "a mapping of path (text), val_fraction in [0, 1) and split_seed (an integer >= 0)",
    ),
    "source": (lambda v, c: isinstance(v, str), "text"),
    "problem_type": (lambda v, c: v in PROBLEM_TYPES, "one of " + ", ".join(PROBLEM_TYPES)),
}


def check_extra(extra: dict[str, Any], config: ModelConfig | None, path: Path) -> None:
    """Every known config.json entry beside the model has the type and range its readers need."""
    preprocess = extra.get("preprocess")
    pct = preprocess.get("crop_pct") if isinstance(preprocess, dict) else None
    problem = pct is not None and number_problem("crop_pct", pct)
    if problem:  # the number a user most likely edits, named alone
        raise CheckpointError(f"{path}: preprocess.crop_pct: {problem}; fix the file or remove the entry")
    for key, (ok, what) in EXTRA_CHECKS.items():
        if key in extra and not ok(extra[key], config):
            shown = repr(extra[key])
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            count = f" ({config.num_classes})" if key == "class_names" and config is not None else ""
            raise CheckpointError(f"{path}: {key} must be {what}{count}, got {shown}; fix the file or remove the entry")


def load_native(directory: str | os.PathLike) -> tuple[VisionTransformer, dict[str, Any]]:
    """Rebuild the model of a vitkit directory alone; returns (model, extra config entries)."""
    config, extra, state = read_stable(directory, _read_files)  # the files of one version; the model is built after
    return load_model(config, state, source=Path(directory) / WEIGHTS_NAME), extra


def _read_files(directory: Path, config: Any = None) -> tuple[ModelConfig, dict[str, Any], dict[str, torch.Tensor]]:
    verify_checksums(directory)
    config, extra = read_native_config(directory, config)
    return config, extra, read_safetensors(directory / WEIGHTS_NAME)


def load_model(config: ModelConfig, state: dict, *, source: str | os.PathLike, checked: bool = False) -> nn.Module:
    """The model of `config` (a ViT or a BiT ResNet) holding `state`; unless already `checked`, the shapes are checked
    first on a model without memory (meta device), so a config promising a huge model that the weights do not hold
    fails before anything is allocated."""
    if not checked:
        check_state(model_shapes(config), state, source=source)
    model = build_model(config)
    model.load_state_dict(state, strict=True)
    return model


def model_shapes(config: ModelConfig) -> dict[str, torch.Tensor]:
    """The state dict of `config`'s model on the meta device: every key and shape, no memory."""
    with torch.device("meta"):
        return build_model(config).state_dict()


def load_state_dict_strict(model: VisionTransformer, state: dict, *, source: str | os.PathLike) -> None:
    """Load `state` into `model`, or raise naming the file and the first missing, unexpected, misshapen or non-finite tensor."""
    check_state(model.state_dict(), state, source=source)
    model.load_state_dict(state, strict=True)


def check_state(expected: dict, state: dict, *, source: str | os.PathLike) -> None:
    """`state` has exactly the keys and shapes of `expected`, and every floating-point value is finite."""
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing:
        raise CheckpointError(
            f"{source}: missing key {missing[0]!r} ({len(missing)} missing); the file does not hold this architecture"
        )
    if unexpected:
        raise CheckpointError(
            f"{source}: unexpected key {unexpected[0]!r} ({len(unexpected)} unexpected); the file does not hold this architecture"
        )
    for key, value in expected.items():
        if tuple(state[key].shape) != tuple(value.shape):
            raise CheckpointError(
                f"{source}: {key!r} has shape {tuple(state[key].shape)}, the model expects {tuple(value.shape)} (the "
                "model as the file's config, or where it has none its other tensors, describe it: this tensor "
                "or one of those is damaged)"
            )
        # an int64 head truncates every weight to 0
        if value.is_floating_point() and not state[key].is_floating_point():
            raise CheckpointError(
                f"{source}: {key!r} has dtype {str(state[key].dtype).replace('torch.', '')}, expected a floating-point "
                "tensor; the file is damaged or not this model's weights"
            )
    for key, value in state.items():
        if value.is_floating_point() and not bool(torch.isfinite(_as_float32(value, key, source)).all()):
            bad = int((~torch.isfinite(_as_float32(value, key, source))).sum())
            raise CheckpointError(
                f"{source}: {key!r} holds {bad} non-finite values (NaN or infinity); the weights are "
                "unusable: use an earlier checkpoint, or retrain"
            )


def _as_float32(value: torch.Tensor, key: str, source) -> torch.Tensor:
    """A floating-point tensor's values as the float32 model holds them: every kind torch stores is read (float64 and
    the float8 kinds, which have no isfinite of their own, included; a float64 beyond float32's range becomes
    infinite, as it would in the model); packed kinds that hold no value per element (float4_e2m1fn_x2) are
    refused."""
    try:
        return value.float()
    except (RuntimeError, NotImplementedError):
        raise CheckpointError(
            f"{source}: {key!r} has dtype {str(value.dtype).replace('torch.', '')}, packed values vitkit cannot read as "
            "numbers; save the weights as float32, float16, bfloat16 or a float8 kind"
        ) from None


def read(directory: str | os.PathLike, *, image_size=None, config: Any = None) -> tuple[ModelConfig, dict]:
    """(config, state dict) of a vitkit directory; the config says the image size (resampling is the caller's).
    `config`: its config.json as already read."""
    config, _, state = _read_files(Path(directory), config)
    return config, state


def read_metadata(directory: str | os.PathLike, *, config: Any = None) -> dict[str, Any]:
    """Class names, preprocessing and training data recorded in config.json beside the model."""
    return read_native_config(directory, config)[1]


def write(model: VisionTransformer, directory: str | os.PathLike, *, metadata: dict[str, Any] | None = None) -> Path:
    """A vitkit directory as `convert` writes it: `metadata` without local paths (`card.publishable`), as every format's
    writer keeps it; a run's own checkpoints (`save_pretrained`) keep theirs."""
    return save_pretrained(model, directory, extra=publishable(metadata or {}))
