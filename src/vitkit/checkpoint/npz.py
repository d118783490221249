"""Google's .npz checkpoints: google-research/vision_transformer (ViT-B_16.npz, R50+ViT-B_16.npz, AugReg) and big_vision.

The arrays are the Flax parameter tree flattened with "/". Layouts in the wild differ, so reading
first brings every file to one canonical layout (the vision_transformer linen names):

- a prefix: "opt/target/" (old optimizer checkpoints), "params/" or "params/img/" (big_vision);
- the pre-linen block names MultiHeadDotProductAttention_1, LayerNorm_2, MlpBlock_3 (the released
  files) instead of linen's MultiHeadDotProductAttention_0, LayerNorm_1, MlpBlock_0;
- big_vision's top-level "pos_embedding" without a class slot (the class token gets no position
  embedding there, i.e. a zero slot here) and its scanned "Transformer/encoderblock" (depth stacked);
- GroupNorm scale/bias stored as (C,) or (1, 1, 1, C).

The whole config is inferred from the arrays. Flax semantics carried into the config: GELU is the
tanh approximation (flax nn.gelu), LayerNorm eps 1e-6; the hybrid ResNet (weight standardisation,
GroupNorm(32, eps 1e-6), SAME padding) is what vitkit's backbone does anyway. Writing produces the
layout of the official release files (pre-linen names, no prefix).
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from vitkit.errors import CheckpointError, ConfigError
from vitkit.models import ModelConfig, ResNetConfig, ResNetV2, VisionTransformer, ViTConfig
from vitkit.models.config import INPUT_KEYS

from . import bit
from .card import publishable
from .io import read_npz, read_sidecar, write_npz, write_with_sidecar
from .keymap import (
    Rule,
    count_indexed,
    from_vitkit,
    fused,
    infer_image_size,
    kernel,
    permuted,
    refuse_conv_stem,
    refuse_pieces,
    resnet_units,
    same,
    to_vitkit,
)

PREFIXES = ("opt/target/", "params/img/", "params/", "")
PRE_LINEN = {
    "MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0",
    "LayerNorm_2": "LayerNorm_1",
    "MlpBlock_3": "MlpBlock_0",
}
LINEN_TO_PRE_LINEN = {v: k for k, v in PRE_LINEN.items()}
HWIO_TO_OIHW = (3, 2, 0, 1)
POSEMB = "Transformer/posembed_input/pos_embedding"
_BLOCK = re.compile(r"Transformer/encoderblock_(\d+)/([^/]+)/(.*)")
_GROUPNORM = re.compile(r"(.*/)?gn_?\w*/(scale|bias)")


def canonical(
    arrays: dict[str, np.ndarray], *, source: str | os.PathLike
) -> tuple[dict[str, torch.Tensor], Callable[[str], str]]:
    """The arrays in the canonical layout as tensors, and the function giving a canonical key's name in the file."""
    prefix = next((p for p in PREFIXES if f"{p}embedding/kernel" in arrays), None)
    if prefix is None:
        looked = ", ".join(p for p in PREFIXES if p)
        raise CheckpointError(f"{source}: missing key 'embedding/kernel' (also looked under {looked}); not a ViT .npz")
    tensors: dict[str, torch.Tensor] = {}
    shown: dict[str, str] = {}

    def put(key: str, value: np.ndarray | torch.Tensor, original: str) -> None:
        tensors[key] = value if isinstance(value, torch.Tensor) else torch.from_numpy(np.array(value, dtype=np.float32))
        shown[key] = original

    pre_linen = any("/MultiHeadDotProductAttention_1/" in k for k in arrays)
    for original, value in arrays.items():
        if not original.startswith(prefix):
            continue  # optimizer state and other trees beside the parameters
        key = original[len(prefix) :]
        if pre_linen and (match := _BLOCK.fullmatch(key)):
            i, module, rest = match.groups()
            key = f"Transformer/encoderblock_{i}/{PRE_LINEN.get(module, module)}/{rest}"
        if _GROUPNORM.fullmatch(key) and value.ndim == 4 and value.shape[:3] == (1, 1, 1):
            value = value.reshape(-1)
        if key.startswith("Transformer/encoderblock/"):  # big_vision scan: (depth, ...) per parameter
            for i, layer in enumerate(value):
                put(key.replace("encoderblock/", f"encoderblock_{i}/"), layer, f"{original}[{i}]")
            continue
        put(key, value, original)
    if "pos_embedding" in tensors:  # big_vision: added before the class token is prepended
        posemb = tensors.pop("pos_embedding")
        if "cls" in tensors:
            posemb = torch.cat([torch.zeros_like(posemb[:, :1]), posemb], dim=1)
        put(POSEMB, posemb, shown.pop("pos_embedding"))

    def name_in_file(key: str) -> str:
        if key in shown:
            return shown[key]
        if pre_linen and (match := _BLOCK.fullmatch(key)):
            i, module, rest = match.groups()
            key = f"Transformer/encoderblock_{i}/{LINEN_TO_PRE_LINEN.get(module, module)}/{rest}"
        return prefix + key

    return tensors, name_in_file


def config_from_npz(
    tensors: dict[str, torch.Tensor],
    *,
    image_size=None,
    source: str | os.PathLike,
    shown: Callable[[str], str] | None = None,
) -> ViTConfig:
    """The whole ViTConfig from canonical arrays: sizes from kernel shapes, depth and stages from key counts."""
    shown = shown or (lambda key: key)

    def shape(key: str) -> tuple[int, ...]:
        if key not in tensors:
            raise CheckpointError(f"{source}: missing key {shown(key)!r}; the file is not a complete ViT checkpoint")
        return tuple(tensors[key].shape)

    ph, pw, in_chans, width = _expect_rank(shape("embedding/kernel"), 4, "embedding/kernel", source)
    depth = count_indexed(tensors, "Transformer/encoderblock_")
    if depth == 0:
        raise CheckpointError(f"{source}: no 'Transformer/encoderblock_0' arrays; the file holds no Transformer")
    block = "Transformer/encoderblock_0/"
    _, num_heads, head_dim = _expect_rank(
        shape(block + "MultiHeadDotProductAttention_0/query/kernel"), 3, "query/kernel", source
    )
    mlp_dim = shape(block + "MlpBlock_0/Dense_0/kernel")[-1]
    classifier = "token" if "cls" in tensors else "gap"
    representation_size = shape("pre_logits/kernel")[-1] if "pre_logits/kernel" in tensors else None
    num_classes = shape("head/kernel")[-1] if "head/kernel" in tensors else 0
    backbone = None
    if "conv_root/kernel" in tensors:
        _, _, in_chans, root = _expect_rank(shape("conv_root/kernel"), 4, "conv_root/kernel", source)
        stages = count_indexed(tensors, "block", start=1)
        layers = tuple(count_indexed(tensors, f"block{s}/unit", start=1) for s in range(1, stages + 1))
        backbone = ResNetConfig(layers=layers, width=root)
    if num_heads * head_dim != width:
        raise CheckpointError(
            f"{source}: query/kernel has {num_heads} heads of {head_dim}, which do not make up the width {width}"
        )
    prefix = 1 if classifier == "token" else 0
    stride = backbone.stride if backbone else 1
    num_patches = shape(POSEMB)[1] - prefix
    image = infer_image_size(
        num_patches, (ph * stride, pw * stride), image_size=image_size, key=shown(POSEMB), source=source
    )
    try:
        return ViTConfig(
            image_size=image, patch_size=(ph, pw), in_chans=in_chans, num_classes=num_classes, width=width, depth=depth,
            mlp_dim=mlp_dim, num_heads=num_heads, classifier=classifier, representation_size=representation_size,
            layer_norm_eps=1e-6, mlp_act="gelu_tanh", backbone=backbone,
        )  # fmt: skip
    except ConfigError as err:
        raise CheckpointError(f"{source}: the arrays describe an impossible model: {err}") from None


def _expect_rank(shape: tuple[int, ...], rank: int, key: str, source) -> tuple[int, ...]:
    if len(shape) != rank:
        raise CheckpointError(f"{source}: {key!r} has shape {shape}, expected {rank} dimensions")
    return shape


def npz_rules(c: ViTConfig) -> list[Rule]:
    """The key map vitkit <-> canonical .npz for config `c`, with every array's Flax shape."""
    D, M, nh = c.width, c.mlp_dim, c.num_heads
    hd = D // nh
    rules: list[Rule] = []
    if c.backbone:
        W = c.backbone.width
        rules += [
            permuted("backbone.stem_conv.weight", "conv_root/kernel", (7, 7, c.in_chans, W), HWIO_TO_OIHW),
            same("backbone.stem_norm.weight", "gn_root/scale", (W,)),
            same("backbone.stem_norm.bias", "gn_root/bias", (W,)),
        ]
        for s, u, cin, mid, projection in resnet_units(c.backbone):
            theirs, ours = f"block{s + 1}/unit{u + 1}/", f"backbone.stages.{s}.{u}."
            convs = [  # (Flax conv, Flax GroupNorm, our conv, our norm, kernel size, in, out)
                ("conv1", "gn1", "conv1", "norm1", 1, cin, mid),
                ("conv2", "gn2", "conv2", "norm2", 3, mid, mid),
                ("conv3", "gn3", "conv3", "norm3", 1, mid, 4 * mid),
            ]
            if projection:
                convs.append(("conv_proj", "gn_proj", "downsample.0", "downsample.1", 1, cin, 4 * mid))
            for conv, gn, our_conv, our_norm, k, n_in, n_out in convs:
                rules += [
                    permuted(f"{ours}{our_conv}.weight", f"{theirs}{conv}/kernel", (k, k, n_in, n_out), HWIO_TO_OIHW),
                    same(f"{ours}{our_norm}.weight", f"{theirs}{gn}/scale", (n_out,)),
                    same(f"{ours}{our_norm}.bias", f"{theirs}{gn}/bias", (n_out,)),
                ]
    embed_in = c.backbone.out_channels if c.backbone else c.in_chans
    rules += [
        permuted("patch_embed.weight", "embedding/kernel", (*c.patch_size, embed_in, D), HWIO_TO_OIHW),
        same("patch_embed.bias", "embedding/bias", (D,)),
    ]
    if c.classifier == "token":
        rules.append(same("cls_token", "cls", (1, 1, D)))
    if c.pos_embed == "learned":
        rules.append(same("pos_embed", POSEMB, (1, c.pos_prefix_tokens + c.num_patches, D)))
    for i in range(c.depth):
        b, o = f"Transformer/encoderblock_{i}/", f"blocks.{i}."
        a = b + "MultiHeadDotProductAttention_0/"
        rules += [
            *_layer_norm(o + "norm1", b + "LayerNorm_0", D),
            fused(
                o + "attn.qkv.weight", tuple(f"{a}{n}/kernel" for n in ("query", "key", "value")), (D, nh, hd), n_in=1
            ),
            fused(
                o + "attn.qkv.bias", tuple(f"{a}{n}/bias" for n in ("query", "key", "value")), (nh, hd), flatten=True
            ),
            kernel(o + "attn.proj.weight", a + "out/kernel", (nh, hd, D), n_in=2),
            same(o + "attn.proj.bias", a + "out/bias", (D,)),
            *_layer_norm(o + "norm2", b + "LayerNorm_1", D),
            *_dense(o + "mlp.fc1", b + "MlpBlock_0/Dense_0", D, M),
            *_dense(o + "mlp.fc2", b + "MlpBlock_0/Dense_1", M, D),
        ]
    rules += _layer_norm("norm", "Transformer/encoder_norm", D)
    if c.representation_size:
        rules += _dense("pre_logits.0", "pre_logits", D, c.representation_size)
    if c.num_classes:
        rules += _dense("head", "head", c.representation_size or D, c.num_classes)
    return rules


def _layer_norm(ours: str, theirs: str, D: int) -> list[Rule]:
    return [same(f"{ours}.weight", f"{theirs}/scale", (D,)), same(f"{ours}.bias", f"{theirs}/bias", (D,))]


def _dense(ours: str, theirs: str, n_in: int, n_out: int) -> list[Rule]:
    return [
        kernel(f"{ours}.weight", f"{theirs}/kernel", (n_in, n_out)),
        same(f"{ours}.bias", f"{theirs}/bias", (n_out,)),
    ]


# the release layout implies tanh-GELU, eps 1e-6, [-1, 1] inputs, one input size (and says nothing of a background)
NOT_IN_THE_ARRAYS = ("mlp_act", "layer_norm_eps", *INPUT_KEYS, "dynamic_img_size")


def read(path: str | os.PathLike, *, image_size=None) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """(config, vitkit state dict) of an .npz in any of the layouts above, or of a BiT ResNet release file."""
    arrays = read_npz(path)
    if bit.is_bit_npz(arrays):
        stored = read_sidecar(path).get("model")
        return bit.read_npz(
            arrays, image_size=image_size, source=path, stored=stored if isinstance(stored, dict) else None
        )
    tensors, shown = canonical(arrays, source=path)
    stored = read_sidecar(path).get("model") or {}
    if not isinstance(stored, dict):
        raise CheckpointError(
            f"{path}.json: its 'model' entry is not valid: expected an object, got {type(stored).__name__}"
        )
    grid = None if image_size is not None else stored.get("image_size")  # a non-square grid the arrays leave open
    config = config_from_npz(tensors, image_size=image_size if grid is None else grid, source=path, shown=shown)
    if stored:  # what the release layout cannot say: a model vitkit wrote with exact GELU or another LayerNorm eps
        try:
            config = config.replace(**{key: stored[key] for key in NOT_IN_THE_ARRAYS if key in stored})
        except ConfigError as err:
            raise CheckpointError(f"{path}.json: its 'model' entry is not valid: {err}") from None
    return config, to_vitkit(npz_rules(config), tensors, source=path, shown=shown)


def to_release_layout(tensors: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Canonical keys renamed to the pre-linen names of the official release files, as float32 arrays."""
    out = {}
    for key, value in tensors.items():
        if match := _BLOCK.fullmatch(key):
            i, module, rest = match.groups()
            key = f"Transformer/encoderblock_{i}/{LINEN_TO_PRE_LINEN.get(module, module)}/{rest}"
        out[key] = value.detach().cpu().float().numpy()
    return out


def write(model: VisionTransformer, path: str | os.PathLike, *, metadata: dict | None = None) -> Path:
    """Write a ViT, a hybrid (R50+ViT-B_16.npz's layout) or a BiT ResNet as an .npz in the official release layout
    (what vit_jax, big_transfer and timm read); `metadata` (class names, preprocessing) goes to FILE.npz.json beside it, as the release layout has no
    place for it, without local paths."""
    c, path, metadata = model.config, Path(path), publishable(metadata or {})
    # the arrays say nothing of the resolution and input scaling: vitkit keeps them beside
    if isinstance(model, ResNetV2):
        sidecar = {
            **({"vitkit": metadata} if metadata else {}),
            "model": {k: getattr(c, k) for k in ("image_size", *INPUT_KEYS)},
        }
        write_with_sidecar(path, lambda fresh: bit.write_npz_file(model, fresh), sidecar)
        return path
    refuse_conv_stem(c, path, "the .npz format", "its layout names BiT ResNet hybrids only")
    refuse_pieces(c, path, "the .npz format (the paper's ViT)", "vitkit, timm or hf")
    if c.distilled:
        raise CheckpointError(
            f"{path}: the .npz format (Google's Flax ViT) has no distillation token; save this DeiT model as vitkit, "
            "timm (.safetensors) or hf (DeiTForImageClassificationWithTeacher)"
        )
    if c.pos_embed != "learned":
        raise CheckpointError(
            f"{path}: the .npz format holds learned position embeddings only; this model uses {c.pos_embed!r}"
        )
    sidecar = {"vitkit": metadata} if metadata else {}
    # what a reader of the arrays assumes
    implied = ViTConfig(in_chans=c.in_chans, mlp_act="gelu_tanh", layer_norm_eps=1e-6)
    kept = {key: getattr(c, key) for key in NOT_IN_THE_ARRAYS if getattr(c, key) != getattr(implied, key)}
    if c.grid_size[0] != c.grid_size[1]:  # the position embedding's length alone does not say which grid
        kept["image_size"] = list(c.image_size)
    if kept:
        sidecar["model"] = kept  # vitkit reads them back
    differ = [
        f"{key}={getattr(c, key)!r}"
        for key in ("mlp_act", "layer_norm_eps")
        if getattr(c, key) != getattr(implied, key)
    ]
    if differ:
        warnings.warn(
            f"{path}: the official Flax model uses tanh-GELU and LayerNorm eps 1e-6; this model has {' and '.join(differ)}. "
            f"vitkit reads {'it' if len(differ) == 1 else 'them'} back from {path.name}.json; other readers of the .npz "
            "(vit_jax, timm) assume the official ones, so its outputs there differ slightly",
            stacklevel=2,
        )
    arrays = to_release_layout(from_vitkit(npz_rules(c), model.state_dict()))
    write_with_sidecar(path, lambda fresh: write_npz(fresh, arrays), sidecar or None)
    return path


def read_metadata(path: str | os.PathLike) -> dict:
    """Class names and preprocessing from FILE.npz.json beside the file ({} without one)."""
    return read_sidecar(path).get("vitkit", {})
