"""A command's parsed flags as its typed request (`vitkit.evaluate.requests`): the one step between argparse and the
library."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TypeVar

from . import image_size_arg

Request = TypeVar("Request")


def request_of(kind: type[Request], args: argparse.Namespace, **given) -> Request:
    """A `kind` (a frozen request dataclass) whose fields are the flags of the same name in `args`, except those
    `given` already converted (a list as a tuple, a size as (H, W))."""
    taken = {f.name: getattr(args, f.name) for f in dataclasses.fields(kind) if f.name not in given}
    return kind(**taken, **given)


def image_hw(values: list[int] | None) -> tuple[int, int] | None:
    """--image-size H [W] as (H, W), one number: a square; None where it is not given."""
    size = image_size_arg(values)
    return (size, size) if isinstance(size, int) else size


def as_tuple(values: list | None) -> tuple | None:
    """A list flag (nargs or comma-separated) as a tuple; None where it is not given."""
    return None if values is None else tuple(values)
