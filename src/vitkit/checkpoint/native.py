"""vitkit's own format: a directory with config.json (model config + preprocessing), model.safetensors and
checksums.json (size and sha256 of the weights, written last and checked on every load)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vitkit.errors import CheckpointError, ConfigError
from vitkit.models import ModelConfig, VisionTransformer, build_model, config_from_dict

from .io import read_json, read_safetensors, verify_checksums, write_checksums, write_json, write_safetensors

FORMAT = "vitkit"
VERSION = 1
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


def is_native(path: str | os.PathLike) -> bool:
    path = Path(path)
    if not (path / CONFIG_NAME).is_file():
        return False
    try:
        return read_json(path / CONFIG_NAME).get("format") == FORMAT
    except (CheckpointError, AttributeError):
        return False


def save_pretrained(model: VisionTransformer, directory: str | os.PathLike, *, extra: dict[str, Any] | None = None) -> Path:
    """Write `model` to `directory` (created if needed). `extra` (e.g. {"class_names": [...]}) goes into config.json.

    The weights are written before the config, each atomically, so a directory with a config always
    has weights that match it; their checksums come last.
    """
    directory = Path(directory)
    state = {k: v for k, v in model.state_dict().items()}
    write_safetensors(directory / WEIGHTS_NAME, state, metadata={"format": "pt"})
    write_json(directory / CONFIG_NAME, {"format": FORMAT, "version": VERSION, "model": model.config.to_dict(), **(extra or {})})
    write_checksums(directory, [WEIGHTS_NAME])
    return directory


def read_native_config(directory: str | os.PathLike) -> tuple[ModelConfig, dict[str, Any]]:
    """The model config and the rest of config.json (e.g. class names)."""
    path = Path(directory) / CONFIG_NAME
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a vitkit config (no \"format\": \"vitkit\")")
    try:
        config = config_from_dict(data.get("model"))  # a ViT, or a BiT ResNet tagged "arch": "bit"
    except ConfigError as err:
        raise CheckpointError(f"{path}: bad model config: {err}") from None
    rest = {k: v for k, v in data.items() if k not in ("format", "version", "model")}
    return config, rest


def load_native(directory: str | os.PathLike) -> tuple[VisionTransformer, dict[str, Any]]:
    """Rebuild the model of a vitkit directory alone; returns (model, extra config entries)."""
    directory = Path(directory)
    verify_checksums(directory)
    config, extra = read_native_config(directory)
    model = build_model(config)
    load_state_dict_strict(model, read_safetensors(directory / WEIGHTS_NAME), source=directory / WEIGHTS_NAME)
    return model, extra


def load_state_dict_strict(model: VisionTransformer, state: dict, *, source: str | os.PathLike) -> None:
    """Load `state` into `model`, or raise naming the file and the first missing, unexpected or misshapen key."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing:
        raise CheckpointError(f"{source}: missing key {missing[0]!r} ({len(missing)} missing); the file does not hold this architecture")
    if unexpected:
        raise CheckpointError(f"{source}: unexpected key {unexpected[0]!r} ({len(unexpected)} unexpected); the file does not hold this architecture")
    for key, value in expected.items():
        if tuple(state[key].shape) != tuple(value.shape):
            raise CheckpointError(f"{source}: {key!r} has shape {tuple(state[key].shape)}, the model expects {tuple(value.shape)}")
    model.load_state_dict(state, strict=True)


def read(directory: str | os.PathLike, *, image_size=None) -> tuple[ModelConfig, dict]:
    """(config, state dict) of a vitkit directory; the config says the image size (resampling is the caller's)."""
    directory = Path(directory)
    verify_checksums(directory)
    config, _ = read_native_config(directory)
    return config, read_safetensors(directory / WEIGHTS_NAME)


def read_metadata(directory: str | os.PathLike) -> dict[str, Any]:
    """Class names, preprocessing and training data recorded in config.json beside the model."""
    return read_native_config(directory)[1]


def write(model: VisionTransformer, directory: str | os.PathLike, *, metadata: dict[str, Any] | None = None) -> Path:
    return save_pretrained(model, directory, extra=metadata)
