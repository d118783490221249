"""The one seam through which speed paths enter a model: a swap-in module takes the place of one of its modules.

A swap-in computes the same sums as the model's module it replaces, faster where it applies, and falls back to that
module's own code elsewhere. It is written as a mixin that overrides one method (kernels sit below the models and do
not import them; a swap-in finds its modules by the methods it overrides); `adopt` makes the mixin and the module's
class one class and an instance of it out of the module: the two share their parameters, buffers and submodules, so a
state dict keeps its keys and a checkpoint loads either way. The model's own forward never branches on a speed path.

    swap(model, replace)        each module for which replace(module) gives a swap-in, replaced in place
    with swapped(model, replace):  the same inside the block; afterwards the model has what it had
    unswap(model)               every swap-in back to the model's own module (what an export writes)

Installers: vitkit.kernels.block_kernels (inference kernels for attention and the MLP's bias + GELU),
vitkit.kernels.short_attention (training short sequences), vitkit.kernels.patch_gemm (bf16 patch embedding on the
CPU), vitkit.inference.precision (the dense class-token residual compiled int8 needs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from torch import nn

# where a swap-in keeps the module it took the place of (not a registered submodule: the state dict ignores it)
_FROM = "_swapped_from"

Replace = Callable[[nn.Module], "nn.Module | None"]

# (mixin, the module's class) -> the class of their swap-ins: one class each, so that isinstance and a compiled graph's
# guards see the same class every time
_CLASSES: dict[tuple[type, type], type] = {}


def offers(module: nn.Module, *names: str) -> bool:
    """Whether `module` has every attribute in `names` (the interface a swap-in overrides and calls)."""
    return all(hasattr(module, name) for name in names)


def _swap_in_class(mixin: type, base: type) -> type:
    if issubclass(mixin, base):
        return mixin
    if (mixin, base) not in _CLASSES:
        _CLASSES[mixin, base] = type(mixin.__name__, (mixin, base), {"__module__": mixin.__module__})
    return _CLASSES[mixin, base]


def adopt(mixin: type, module: nn.Module, **attributes) -> nn.Module:
    """`module` as a swap-in: an instance of `mixin` and of the module's class (or of `mixin` alone where it subclasses
    that class) sharing the module's parameters, buffers, submodules and hooks, with `attributes` of its own."""
    cls = _swap_in_class(mixin, type(module))
    new = cls.__new__(cls)
    new.__dict__.update(module.__dict__)
    new.__dict__[_FROM] = module
    new.__dict__.update(attributes)
    return new


def swap(model: nn.Module, replace: Replace) -> list[tuple[nn.Module, str, nn.Module]]:
    """Every submodule of `model` for which `replace` returns a module, replaced by it under the same name; returns
    (parent, name, module replaced) for each, which `restore` puts back."""
    found = [
        (parent, name, child, new)
        for parent in model.modules()
        for name, child in parent.named_children()
        if (new := replace(child)) is not None
    ]
    for parent, name, _, new in found:
        setattr(parent, name, new)
    return [(parent, name, child) for parent, name, child, _ in found]


def restore(swaps: list[tuple[nn.Module, str, nn.Module]]) -> None:
    """Put back what `swap` replaced, in train or eval mode as the swap-in was left."""
    for parent, name, child in reversed(swaps):
        child.training = getattr(parent, name).training
        setattr(parent, name, child)


@contextlib.contextmanager
def swapped(model: nn.Module, replace: Replace) -> Iterator[nn.Module]:
    """`swap(model, replace)` inside a with block; afterwards the model has the modules it had before."""
    swaps = swap(model, replace)
    try:
        yield model
    finally:
        restore(swaps)


def plain(module: nn.Module) -> nn.Module:
    """The model's own module behind a swap-in (itself if it is none)."""
    while _FROM in module.__dict__:
        module.__dict__[_FROM].training = module.training
        module = module.__dict__[_FROM]
    return module


def unswap(model: nn.Module) -> nn.Module:
    """`model` with every swap-in replaced by the model's own module; returns the model."""
    swap(model, lambda module: plain(module) if _FROM in module.__dict__ else None)
    return model
