"""Which layers `forward_intermediates` returns, with timm's meaning of `indices`, and the cache of per-grid tensors.

indices=None  every layer            indices=n (int)  the last n layers
indices=[i, j, ...]  those layers, negative ones counted from the end (-1: the last); returned in layer order
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from vitkit.errors import ConfigError

OUTPUT_FMTS = ("NCHW", "NLC")


def take_indices(count: int, indices: int | Sequence[int] | None, what: str = "layers") -> list[int]:
    """The layer numbers (0 .. count-1, sorted) that `indices` picks out of `count` layers."""
    if indices is None:
        return list(range(count))
    if isinstance(indices, int) and not isinstance(indices, bool):
        if not 0 < indices <= count:
            raise ConfigError(f"indices: the last n of {count} {what} needs 1 <= n <= {count}, got {indices}")
        return list(range(count - indices, count))
    if not isinstance(indices, Sequence) or not indices or not all(isinstance(i, int) for i in indices):
        raise ConfigError(f"indices: expected an int (the last n {what}) or a list of {what} numbers, got {indices!r}")
    picked = set()
    for i in indices:
        if not -count <= i < count:
            raise ConfigError(f"indices: {i} is out of range for a model of {count} {what} (-{count} .. {count - 1})")
        picked.add(i % count)
    return sorted(picked)


def check_output_fmt(output_fmt: str, allowed: Sequence[str] = OUTPUT_FMTS) -> None:
    if output_fmt not in allowed:
        raise ConfigError(f"output_fmt: expected one of {', '.join(allowed)}, got {output_fmt!r}")


def tracing() -> bool:
    """A compiler or exporter is tracing the forward: shapes may be symbolic, nothing may be cached."""
    return torch.compiler.is_compiling() or torch.compiler.is_exporting() or torch.jit.is_tracing()


GRID_CACHE_SIZE = 8  # grids kept per module; the oldest goes first


def cached(cache: dict, key: tuple, sources: Sequence[torch.Tensor], make: Callable[[], torch.Tensor]) -> torch.Tensor:
    """make(), kept in `cache` under `key` while `sources` (the tensors it is computed from) are unchanged: the same
    storage, version counter (bumped by every in-place update, an optimizer step included), dtype and device.
    Recomputed every time where autograd needs the graph through `sources` or a compiler traces."""
    if tracing() or (torch.is_grad_enabled() and any(s.requires_grad for s in sources)):
        return make()
    try:
        stamp = (
            key,
            torch.is_inference_mode_enabled(),
            *((id(s), s.data_ptr(), s._version, s.dtype, s.device) for s in sources),
        )
    except RuntimeError:  # inference tensors keep no version counter: nothing to tell a change by
        return make()
    hit = cache.get(stamp)
    if hit is None:
        if len(cache) >= GRID_CACHE_SIZE:
            cache.pop(next(iter(cache)))
        hit = cache[stamp] = make()
    return hit
