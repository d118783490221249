"""Where to compute: one parser for every `--device` / `train.device` value."""

from __future__ import annotations

import torch

from vitkit.errors import ConfigError


def pick_device(name: str = "auto", *, key: str = "--device") -> torch.device:
    """"auto" (CUDA when present, else CPU), "cpu", "cuda", "cuda:N", "mps"; a clear error naming `key` otherwise."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"{key}: unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{key}: cuda was asked for but no CUDA device is available on this machine; use cpu")
    return device
