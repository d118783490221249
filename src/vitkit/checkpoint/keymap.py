"""Weight conversion as declarative key maps: one `Rule` per vitkit tensor, applied in both directions.

A format module lists, for a given config, which of its keys make up each vitkit key, the shapes it
expects them to have, and the pure functions between the two layouts (transposes, reshapes, the
fusing of q, k and v). `to_vitkit` and `from_vitkit` then do the bookkeeping: a shape check on every
tensor, and errors that name the file and the key for anything missing, misshapen or left over.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from vitkit.errors import CheckpointError
from vitkit.models import ConvStemConfig, ResNetConfig

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Rule:
    """vitkit key `ours` is made of the file's keys `theirs` (with `shapes`) by `to_ours`; `to_theirs` undoes it."""

    ours: str
    theirs: tuple[str, ...]
    shapes: tuple[Shape, ...]
    to_ours: Callable[..., torch.Tensor]
    to_theirs: Callable[[torch.Tensor], tuple[torch.Tensor, ...]]


def _identity(t):
    return t


def same(ours: str, theirs: str, shape: Shape) -> Rule:
    """The same tensor under another name."""
    return Rule(ours, (theirs,), (tuple(shape),), _identity, lambda t: (t,))


def permuted(ours: str, theirs: str, shape: Shape, to_ours: tuple[int, ...]) -> Rule:
    """Axes reordered: ours = theirs.permute(to_ours); e.g. a (H, W, in, out) Flax conv kernel vs (out, in, H, W)."""
    inverse = tuple(sorted(range(len(to_ours)), key=lambda i: to_ours[i]))
    return Rule(
        ours,
        (theirs,),
        (tuple(shape),),
        lambda t: t.permute(*to_ours).contiguous(),
        lambda t: (t.permute(*inverse).contiguous(),),
    )


def _kernel_to_weight(shape: Shape, n_in: int) -> tuple[Callable, Callable]:
    """A Flax (in..., out...) kernel <-> a torch (out, in) Linear weight, both directions."""
    fan_in, fan_out = math.prod(shape[:n_in]), math.prod(shape[n_in:])
    return (lambda k: k.reshape(fan_in, fan_out).T.contiguous()), (lambda w: w.T.reshape(shape).contiguous())


def kernel(ours: str, theirs: str, shape: Shape, *, n_in: int = 1) -> Rule:
    """A Dense(General) kernel whose first `n_in` axes are inputs (Flax) as a torch Linear weight (out, in)."""
    to_ours, to_theirs = _kernel_to_weight(tuple(shape), n_in)
    return Rule(ours, (theirs,), (tuple(shape),), to_ours, lambda w: (to_theirs(w),))


def fused(ours: str, theirs: tuple[str, ...], shape: Shape, *, n_in: int | None = None, flatten: bool = False) -> Rule:
    """Several same-shaped tensors concatenated along dim 0 into one of ours (q, k and v into qkv).

    Each part is taken as is, or flattened (`flatten`, a Flax (heads, head_dim) bias), or with `n_in`
    as a Flax kernel transposed into a Linear weight.
    """
    shape = tuple(shape)
    if n_in is not None:
        each_to_ours, each_to_theirs = _kernel_to_weight(shape, n_in)
    elif flatten:
        each_to_ours, each_to_theirs = (lambda t: t.reshape(-1)), (lambda t: t.reshape(shape))
    else:
        each_to_ours, each_to_theirs = _identity, _identity

    def to_ours(*tensors: torch.Tensor) -> torch.Tensor:
        return torch.cat([each_to_ours(t) for t in tensors], dim=0)

    def to_theirs(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(each_to_theirs(part) for part in t.chunk(len(theirs), dim=0))

    return Rule(ours, tuple(theirs), (shape,) * len(theirs), to_ours, to_theirs)


def refuse_conv_stem(config, path: str | os.PathLike, fmt: str, why: str) -> None:
    """A conv-stem hybrid has no names in `fmt` (`why`): one line saying so and which format holds it."""
    if isinstance(getattr(config, "backbone", None), ConvStemConfig):
        raise CheckpointError(
            f"{path}: {fmt} cannot hold a conv-stem hybrid (3x3 convolutions with BatchNorm): {why}; "
            "save as vitkit, or export to ONNX or OpenVINO (vitkit export); a plain ViT converts: train it with "
            "model.backbone=null"
        )


# the family pieces (models.config) a format may have no place for: (has it, what it is called in a message)
PIECES = (
    (lambda c: c.layer_scale is not None, "LayerScale (layer_scale)"),
    (lambda c: bool(c.reg_tokens), "register tokens (reg_tokens)"),
    (lambda c: c.classifier == "map", "attention pooling (classifier=map)"),
    (lambda c: c.mlp != "plain", "a gated MLP (mlp=swiglu)"),
    (lambda c: c.pre_norm, "a LayerNorm before the blocks (pre_norm)"),
    (lambda c: not c.patch_bias, "a patch embedding without bias (patch_bias=false)"),
)
# the heads of transformers' image classification classes (hf_families.CLASSIFYING), which only "hf" and vitkit hold
HEAD_PIECES = (
    (lambda c: c.head_pool != "classifier", "a head on the patch tokens' mean beside the class token (head_pool)"),
    (lambda c: not c.final_norm, "a model without a final LayerNorm (final_norm=false)"),
)


def refuse_pieces(config, path: str | os.PathLike, fmt: str, holds: str, pieces=PIECES + HEAD_PIECES) -> None:
    """One line naming the first family piece of `config` (of `pieces`) that `fmt` has no place for, and the formats
    (`holds`) that have one."""
    for has, what in pieces:
        if has(config):
            raise CheckpointError(f"{path}: {fmt} cannot hold {what}; save as {holds} instead")


def resnet_units(backbone: ResNetConfig):
    """(stage, unit, in_chans, mid_chans, has_projection) of every bottleneck unit, as the model builds them."""
    chans = backbone.width
    for s, units in enumerate(backbone.layers):
        mid = backbone.width * 2**s
        for u in range(units):
            stride = 2 if s > 0 and u == 0 else 1
            yield s, u, chans, mid, chans != 4 * mid or stride != 1
            chans = 4 * mid


def to_vitkit(
    rules: list[Rule],
    tensors: Mapping[str, torch.Tensor],
    *,
    source: str | os.PathLike,
    shown: Callable[[str], str] | None = None,
) -> dict[str, torch.Tensor]:
    """The vitkit state dict from a file's tensors; every key of the file must be used exactly once.

    `shown` gives, for a key of `tensors`, the name it has (or would have) in the file, for the error
    messages when the loader renamed the keys of an old layout before converting.
    """
    shown = shown or _identity
    used: set[str] = set()
    state = {}
    for rule in rules:
        parts = []
        for key, shape in zip(rule.theirs, rule.shapes):
            name = shown(key)
            if key not in tensors:
                raise CheckpointError(
                    f"{source}: missing key {name!r} (needed for {rule.ours}); the file does not hold the architecture its other keys describe"
                )
            found = tuple(tensors[key].shape)
            if found != shape:
                raise CheckpointError(
                    f"{source}: {name!r} has shape {found}, expected {shape}; the file is inconsistent or not of this format"
                )
            parts.append(tensors[key])
            used.add(key)
        state[rule.ours] = rule.to_ours(*parts)
    left = [k for k in tensors if k not in used]
    if left:
        raise CheckpointError(
            f"{source}: unexpected key {shown(left[0])!r} ({len(left)} unexpected); vitkit cannot represent it, "
            "so loading would silently change the model"
        )
    return state


def from_vitkit(rules: list[Rule], state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The file's tensors from a vitkit state dict (the inverse of `to_vitkit`), shapes checked."""
    out = {}
    for rule in rules:
        if rule.ours not in state:
            raise CheckpointError(f"model: no tensor {rule.ours!r}; the state dict does not match its config")
        for key, shape, tensor in zip(rule.theirs, rule.shapes, rule.to_theirs(state[rule.ours])):
            if tuple(tensor.shape) != shape:
                raise CheckpointError(
                    f"model: {rule.ours!r} gives {key!r} of shape {tuple(tensor.shape)}, expected {shape}"
                )
            out[key] = tensor.contiguous()
    return out


def infer_image_size(
    num_patches: int,
    stride: tuple[int, int],
    *,
    image_size: int | tuple[int, int] | None,
    key: str,
    source: str | os.PathLike,
) -> tuple[int, int]:
    """The image size whose patch grid has `num_patches` cells: `image_size` when its grid fits, else the square grid.

    If `image_size` is given but its grid differs, the square grid is returned and the caller resamples
    the position embeddings to `image_size` afterwards.
    """
    if image_size is not None:
        h, w = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        if h % stride[0] == 0 and w % stride[1] == 0 and (h // stride[0]) * (w // stride[1]) == num_patches:
            return (h, w)
    side = math.isqrt(num_patches)
    if side * side != num_patches:
        raise CheckpointError(
            f"{source}: {key!r} holds {num_patches} patch positions, not a square grid; pass image_size=(height, width) "
            "(--image-size H W) so that the grid can be known"
        )
    return (side * stride[0], side * stride[1])


def count_indexed(keys, prefix: str, *, start: int = 0) -> int:
    """How many consecutive indices `prefix{start}.`, `prefix{start + 1}.` ... (or `/`) the keys hold."""
    n = 0
    while any(k.startswith((f"{prefix}{start + n}.", f"{prefix}{start + n}/")) for k in keys):
        n += 1
    return n
