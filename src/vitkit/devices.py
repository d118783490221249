"""Where to compute: one parser for every `--device` / `train.device` value."""

from __future__ import annotations

import torch

from vitkit.errors import ConfigError


def pick_device(name: str = "auto", *, key: str = "--device") -> torch.device:
    """ "auto" (CUDA when present, else CPU), "cpu", "cuda", "cuda:N", "mps"; a clear error naming `key` otherwise."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ConfigError(f"{key}: unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda", "mps"):  # e.g. meta: tensors without data, nothing to train or evaluate
        raise ConfigError(f"{key}: device {name!r} cannot run a model here; use auto, cpu, cuda or cuda:N")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{key}: mps was asked for but this machine has no Apple GPU; use cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{key}: cuda was asked for but no CUDA device is available on this machine; use cpu")
    return device


def compile_cache_by_isa() -> None:
    """Tag torch.compile's on-disk cache with the CPU vector width torch runs at (ATEN_CPU_CAPABILITY can lower it).

    The cache keys a compiled graph without the width its C++ was generated for: code written for AVX2's 8-float
    vectors, rebuilt for AVX-512's 16 by a later run, stores past its buffers. A tag the user set is kept."""
    config = torch.compiler.config
    if not config.cache_key_tag:
        config.cache_key_tag = f"vitkit-{torch.backends.cpu.get_cpu_capability()}"
