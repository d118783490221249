"""BiT ResNet-v2 checkpoints: the official release .npz (google-research/big_transfer, BiT-S/M-R50x1.npz ...) and
timm's resnetv2_*_bit state dicts, both directions.

Release .npz layout (TF names, kernels HWIO):
    resnet/root_block/standardized_conv2d/kernel                  stem conv
    resnet/block{S}/unit{UU}/{a,b,c}/group_norm/{gamma,beta}       the norm before conv a, b, c (norm1-3)
    resnet/block{S}/unit{UU}/{a,b,c}/standardized_conv2d/kernel    conv1-3
    resnet/block{S}/unit{UU}/a/proj/standardized_conv2d/kernel     the projection shortcut
    resnet/group_norm/{gamma,beta}, resnet/head/conv2d/{kernel,bias}
Stages, units per stage and the width come from the keys and shapes, so any ResNet-v2 in that layout loads.
The files hold no input resolution (a ResNet has none): 224 unless image_size is given.

timm layout: stem.conv, stages.S.blocks.U.{norm1,conv1,norm2,conv2,norm3,conv3,downsample.conv}, norm,
head.fc (a 1x1 conv, (K, C, 1, 1)). Numerics: timm standardises with sqrt(var + 1e-8), the release's
PyTorch port with sqrt(var + 1e-10), vitkit with std + 1e-10: the same to far below fp32 noise.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from vitkit.errors import CheckpointError, ConfigError
from vitkit.models import BiTConfig, ResNetConfig
from vitkit.models.config import INPUT_KEYS

from .io import write_npz
from .keymap import Rule, count_indexed, from_vitkit, kernel, permuted, resnet_units, same, to_vitkit

NPZ_ROOT = "resnet/root_block/standardized_conv2d/kernel"
TIMM_ROOT = "stem.conv.weight"
HWIO_TO_OIHW = (3, 2, 0, 1)
_UNIT = re.compile(r"resnet/block(\d+)/unit(\d+)/")


def is_bit_npz(arrays) -> bool:
    return NPZ_ROOT in arrays


def is_bit_timm(state) -> bool:
    return TIMM_ROOT in state and "stages.0.blocks.0.conv1.weight" in state


def _units(c: BiTConfig):
    """(stage, unit, in, mid, has_projection) of every unit: the hybrid's geometry at root width width x factor."""
    return resnet_units(ResNetConfig(layers=c.layers, width=c.width * c.width_factor))


def _config(
    *,
    root: int,
    in_chans: int,
    kernel_size: int,
    layers: tuple[int, ...],
    num_classes: int,
    image_size,
    stored: dict | None,
    source,
) -> BiTConfig:
    """The BiTConfig of a file: root width 64 x factor when it divides, as the release's models are."""
    width, factor = (64, root // 64) if root % 64 == 0 else (root, 1)
    fields = dict(layers=layers, width_factor=factor, width=width, stem="bit" if kernel_size == 7 else "small",
                  in_chans=in_chans, num_classes=num_classes, image_size=image_size or 224)  # fmt: skip
    for key in ("image_size", *INPUT_KEYS):  # not in the tensors: kept from the config vitkit stored, if any
        if stored and key in stored and not (key == "image_size" and image_size):
            fields[key] = stored[key]
    try:
        return BiTConfig(**fields)
    except ConfigError as err:
        raise CheckpointError(f"{source}: the tensors describe an impossible BiT ResNet: {err}") from None


# -- the release .npz -----------------------------------------------------------------------
def npz_rules(c: BiTConfig) -> list[Rule]:
    """The key map vitkit <-> release .npz for config `c`, with every array's TF shape."""
    root, k = c.width * c.width_factor, 7 if c.stem == "bit" else 3
    rules = [permuted("stem.weight", NPZ_ROOT, (k, k, c.in_chans, root), HWIO_TO_OIHW)]
    for s, u, cin, mid, projection in _units(c):
        theirs, ours = f"resnet/block{s + 1}/unit{u + 1:02d}/", f"stages.{s}.{u}."
        for i, (letter, n_in, n_out, size) in enumerate(
            (("a", cin, mid, 1), ("b", mid, mid, 3), ("c", mid, 4 * mid, 1)), start=1
        ):
            rules += [
                same(f"{ours}norm{i}.weight", f"{theirs}{letter}/group_norm/gamma", (n_in,)),
                same(f"{ours}norm{i}.bias", f"{theirs}{letter}/group_norm/beta", (n_in,)),
                permuted(
                    f"{ours}conv{i}.weight",
                    f"{theirs}{letter}/standardized_conv2d/kernel",
                    (size, size, n_in, n_out),
                    HWIO_TO_OIHW,
                ),
            ]
        if projection:
            rules.append(
                permuted(
                    f"{ours}downsample.weight",
                    f"{theirs}a/proj/standardized_conv2d/kernel",
                    (1, 1, cin, 4 * mid),
                    HWIO_TO_OIHW,
                )
            )
    C = c.num_features
    rules += [same("norm.weight", "resnet/group_norm/gamma", (C,)), same("norm.bias", "resnet/group_norm/beta", (C,))]
    if c.num_classes:
        rules += [
            kernel("head.weight", "resnet/head/conv2d/kernel", (1, 1, C, c.num_classes), n_in=3),
            same("head.bias", "resnet/head/conv2d/bias", (c.num_classes,)),
        ]
    return rules


def read_npz(
    arrays: dict[str, np.ndarray], *, image_size=None, source, stored: dict | None = None
) -> tuple[BiTConfig, dict[str, torch.Tensor]]:
    """(config, vitkit state dict) of a release .npz; GroupNorm parameters may be (C,) or (1, 1, 1, C). `stored`: what
    vitkit kept beside a file it wrote (image size, mean, std: not in the arrays)."""
    tensors = {}
    for key, value in arrays.items():
        if key.endswith(("/gamma", "/beta")) and value.ndim == 4 and value.shape[:3] == (1, 1, 1):
            value = value.reshape(-1)
        tensors[key] = torch.from_numpy(np.array(value, dtype=np.float32))
    units: dict[int, set[int]] = {}
    for key in tensors:
        if match := _UNIT.match(key):
            units.setdefault(int(match.group(1)), set()).add(int(match.group(2)))
    layers = []
    for s in range(1, len(units) + 1):
        found = units.get(s, set())
        if not found or found != set(range(1, len(found) + 1)):
            raise CheckpointError(
                f"{source}: 'resnet/block{s}/unit01 ...' is not a complete run of units (found {sorted(found)}); the file is incomplete"
            )
        layers.append(len(found))
    if not layers or len(layers) != max(units):
        raise CheckpointError(
            f"{source}: no 'resnet/block1/unit01/' arrays (or a block is missing); not a complete BiT ResNet"
        )
    k, _, in_chans, root = _shape(tensors, NPZ_ROOT, 4, source)
    num_classes = (
        _shape(tensors, "resnet/head/conv2d/kernel", 4, source)[-1] if "resnet/head/conv2d/kernel" in tensors else 0
    )
    config = _config(root=root, in_chans=in_chans, kernel_size=k, layers=tuple(layers), num_classes=num_classes,
                     image_size=image_size, stored=stored, source=source)  # fmt: skip
    return config, to_vitkit(npz_rules(config), tensors, source=source)


def write_npz_file(model, path: Path) -> Path:
    """A vitkit BiT as a release-layout .npz (what the release's loaders and timm read)."""
    tensors = from_vitkit(npz_rules(model.config), model.state_dict())
    write_npz(path, {k: v.detach().cpu().float().numpy() for k, v in tensors.items()})
    return path


# -- timm -----------------------------------------------------------------------------------
def timm_rules(c: BiTConfig) -> list[Rule]:
    """The key map vitkit <-> timm ResNetV2: the same tensors renamed, the head a (K, C, 1, 1) conv."""
    root, k = c.width * c.width_factor, 7 if c.stem == "bit" else 3
    rules = [same("stem.weight", TIMM_ROOT, (root, c.in_chans, k, k))]
    for s, u, cin, mid, projection in _units(c):
        ours, theirs = f"stages.{s}.{u}.", f"stages.{s}.blocks.{u}."
        for i, (n_in, n_out, size) in enumerate(((cin, mid, 1), (mid, mid, 3), (mid, 4 * mid, 1)), start=1):
            rules += [
                same(f"{ours}norm{i}.weight", f"{theirs}norm{i}.weight", (n_in,)),
                same(f"{ours}norm{i}.bias", f"{theirs}norm{i}.bias", (n_in,)),
                same(f"{ours}conv{i}.weight", f"{theirs}conv{i}.weight", (n_out, n_in, size, size)),
            ]
        if projection:
            rules.append(same(f"{ours}downsample.weight", f"{theirs}downsample.conv.weight", (4 * mid, cin, 1, 1)))
    C, K = c.num_features, c.num_classes
    rules += [same("norm.weight", "norm.weight", (C,)), same("norm.bias", "norm.bias", (C,))]
    if K:
        rules += [
            Rule(
                "head.weight",
                ("head.fc.weight",),
                ((K, C, 1, 1),),
                lambda t: t.reshape(K, C),
                lambda w: (w.reshape(K, C, 1, 1),),
            ),
            same("head.bias", "head.fc.bias", (K,)),
        ]
    return rules


def read_timm(
    state: dict[str, torch.Tensor], *, image_size=None, source, stored: dict | None = None
) -> tuple[BiTConfig, dict[str, torch.Tensor]]:
    root, in_chans, k, _ = _shape(state, TIMM_ROOT, 4, source)
    stages = count_indexed(state, "stages.")
    layers = tuple(count_indexed(state, f"stages.{s}.blocks.") for s in range(stages))
    num_classes = _shape(state, "head.fc.weight", 4, source)[0] if "head.fc.weight" in state else 0
    config = _config(root=root, in_chans=in_chans, kernel_size=k, layers=layers, num_classes=num_classes,
                     image_size=image_size, stored=stored, source=source)  # fmt: skip
    return config, to_vitkit(timm_rules(config), state, source=source)


def _shape(tensors, key: str, rank: int, source) -> tuple[int, ...]:
    if key not in tensors:
        raise CheckpointError(f"{source}: missing key {key!r}; not a complete BiT ResNet checkpoint")
    shape = tuple(tensors[key].shape)
    if len(shape) != rank:
        raise CheckpointError(f"{source}: {key!r} has shape {shape}, expected {rank} dimensions")
    return shape


__all__ = ["is_bit_npz", "is_bit_timm", "npz_rules", "read_npz", "read_timm", "timm_rules", "write_npz_file"]
