"""The values a checkpoint's own files give beside the tensors (Hugging Face's config.json and
preprocessor_config.json, timm's pretrained_cfg, vitkit's preprocess record), read one key at a time: each is
checked against the domain of the vitkit key it becomes (limits.DOMAINS) before any arithmetic uses it, and a value
outside it is a CheckpointError naming the file, the key and the rule; never a ZeroDivisionError from deep inside a
reader."""

from __future__ import annotations

import os
from typing import Any

from vitkit.errors import CheckpointError, ConfigError, shown
from vitkit.limits import is_number, number_problem
from vitkit.models.config import size_pair


def refuse(where: str | os.PathLike, key: str, problem: str) -> None:
    """The one line for a value a file holds that its key does not take."""
    raise CheckpointError(f"{where}: {key}: {problem}; fix the file or remove the entry")


def number(
    config: dict, key: str, default: Any, *, domain: str, where: str | os.PathLike, name: str | None = None
) -> Any:
    """`config[key]` (`default` where absent), a number or a list of numbers in the domain of `domain`; `name`: how
    the error names the key (pretrained_cfg.mean), where not `key`."""
    value = config.get(key, default)
    problem = number_problem(domain, value)
    if problem:
        refuse(where, name or key, problem)
    return value


def whole(config: dict, key: str, default: Any, *, where: str | os.PathLike, low: int = 1) -> Any:
    """`config[key]` (`default` where absent), a whole number of at least `low` (a layer count, a width)."""
    value = config.get(key, default)
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
        refuse(where, key, f"expected a whole number >= {low}, got {shown(value)}")
    return value


def share(config: dict, key: str, default: float, *, where: str | os.PathLike) -> float:
    """`config[key]` (`default` where absent), a rate in [0, 1) (a dropout probability)."""
    value = config.get(key, default)
    if not (is_number(value) and 0 <= value < 1):
        refuse(where, key, f"expected a rate in [0, 1), got {shown(value)}")
    return value


def flag(config: dict, key: str, default: bool, *, where: str | os.PathLike) -> bool:
    """`config[key]` (`default` where absent), true or false."""
    value = config.get(key, default)
    if not isinstance(value, bool):
        refuse(where, key, f"expected true or false, got {shown(value)}")
    return value


def size(config: dict, key: str, default: Any, *, domain: str, where: str | os.PathLike) -> tuple[int, int]:
    """`config[key]` (`default` where absent) as (H, W): an int, or [height, width], in the domain of `domain`."""
    value = config.get(key, default)
    if isinstance(value, (list, tuple)) and len(value) != 2:
        refuse(where, key, f"expected an int or [height, width], got {shown(value)}")
    try:
        return size_pair(value, key, domain=domain)
    except ConfigError as err:
        raise CheckpointError(f"{where}: {err}; fix the file or remove the entry") from None
