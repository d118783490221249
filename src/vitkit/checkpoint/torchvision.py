"""torchvision's ViT state dicts (`torchvision.models.vit_b_16`, `vit_l_16`, ...): .pth (read with weights_only, never
unpickled) or .safetensors.

torchvision names the paper's ViT its own way; the tensors have vitkit's shapes:

    conv_proj                                   patch_embed (E)
    class_token                                 cls_token
    encoder.pos_embedding                       pos_embed (E_pos, class slot first)
    encoder.layers.encoder_layer_i.ln_1, ln_2   blocks.i.norm1, norm2
      .self_attention.in_proj_weight/_bias      blocks.i.attn.qkv (packed q, k, v, as vitkit packs them)
      .self_attention.out_proj                  blocks.i.attn.proj
      .mlp.0, .mlp.3                            blocks.i.mlp.fc1, fc2 (older files: mlp.linear_1, mlp.linear_2)
    encoder.ln                                  norm
    heads.pre_logits, heads.head                pre_logits.0, head

A state dict does not record the number of heads: vitkit takes it from the config it stored when it wrote the file,
else from the named size with that width (Table 1), as for timm. Nor does it record its preprocessing: the transform
torchvision ships with the weights is assumed, ImageNet's mean and std, and for a 224 input the shorter side resized
bilinearly to 256 (vit_l_16: 242), the centre 224 cut out; larger inputs (SWAG's end-to-end weights) are resized to
the crop itself, bicubic. Only the paper's ViT fits the layout: a family piece, another pooling, a hybrid, a non-square
input or another activation refuses in one line.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from vitkit.errors import CheckpointError, ConfigError
from vitkit.files import open_regular
from vitkit.models import VisionTransformer, ViTConfig
from vitkit.models.registry import IMAGENET_MEAN, IMAGENET_STD

from .hf import _linear
from .io import (
    is_safetensors,
    read_safetensors,
    read_sidecar,
    read_torch,
    write_safetensors,
    write_torch,
    write_with_sidecar,
)
from .keymap import Rule, count_indexed, from_vitkit, infer_image_size, refuse_conv_stem, refuse_pieces, same, to_vitkit
from .timm import _HEADS_BY_WIDTH, EXTRA_KEY, METADATA_KEY, NOT_IN_THE_TENSORS, _stored, _unwrap

LAYER = "encoder.layers.encoder_layer_"
SIGNATURE = ("conv_proj.weight", "encoder.pos_embedding")  # the keys that tell torchvision's layout
OLD_MLP = {"linear_1": "0", "linear_2": "3"}  # torchvision's MLPBlock before it became torchvision.ops.MLP
PICKLE_SCAN = 1 << 22  # the bytes of a .pth's pickle searched for the key names (a state dict's pickle is small)


def torchvision_rules(c: ViTConfig) -> list[Rule]:
    """The key map vitkit <-> torchvision for config `c`: renames only, every tensor's shape checked."""
    D, M = c.width, c.mlp_dim
    rules = [
        same("patch_embed.weight", "conv_proj.weight", (D, c.in_chans, *c.patch_size)),
        same("patch_embed.bias", "conv_proj.bias", (D,)),
        same("cls_token", "class_token", (1, 1, D)),
        same("pos_embed", "encoder.pos_embedding", (1, 1 + c.num_patches, D)),
        *_linear("norm", "encoder.ln", (D,)),
    ]
    for i in range(c.depth):
        ours, theirs = f"blocks.{i}.", f"{LAYER}{i}."
        rules += [
            *_linear(ours + "norm1", theirs + "ln_1", (D,)),
            same(ours + "attn.qkv.weight", theirs + "self_attention.in_proj_weight", (3 * D, D)),
            same(ours + "attn.qkv.bias", theirs + "self_attention.in_proj_bias", (3 * D,)),
            *_linear(ours + "attn.proj", theirs + "self_attention.out_proj", (D, D)),
            *_linear(ours + "norm2", theirs + "ln_2", (D,)),
            *_linear(ours + "mlp.fc1", theirs + "mlp.0", (M, D)),
            *_linear(ours + "mlp.fc2", theirs + "mlp.3", (D, M)),
        ]
    if c.representation_size:
        rules += _linear("pre_logits.0", "heads.pre_logits", (c.representation_size, D))
    if c.num_classes:
        rules += _linear("head", "heads.head", (c.num_classes, c.representation_size or D))
    return rules


def _current_names(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The state dict with older files' mlp.linear_1/linear_2 under today's names, and the names as the file has them
    (for the error messages)."""
    renamed, shown = {}, {}
    for key, value in state.items():
        head, _, tail = key.rpartition(".mlp.")
        part, _, rest = tail.partition(".")
        new = f"{head}.mlp.{OLD_MLP[part]}.{rest}" if head.startswith(LAYER) and part in OLD_MLP else key
        renamed[new], shown[new] = value, key
    return renamed, shown


def is_torchvision_file(path: str | os.PathLike) -> bool:
    """Whether a .safetensors or torch file holds torchvision's ViT, told by its key names without loading it: a
    safetensors header, or the bytes of the pickle (never run) where torch keeps the names."""
    path = Path(path)
    try:
        if is_safetensors(path):
            with safe_open(str(path), "pt") as f:
                return all(key in f.keys() for key in SIGNATURE)
        with open_regular(path) as f:
            head = f.read(PICKLE_SCAN)
        if head.startswith(b"PK"):
            with zipfile.ZipFile(path) as archive:
                name = next((n for n in archive.namelist() if n.endswith("data.pkl")), None)
                if name is None:
                    return False
                with archive.open(name) as pickled:
                    head = pickled.read(PICKLE_SCAN)
    except Exception:  # unreadable here: the format's reader says what is wrong
        return False
    return all(key.encode() in head for key in SIGNATURE)


def _stored_config(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors, the vitkit config stored with them or {}) of a .safetensors or .pth file."""
    if is_safetensors(path) or path.suffix.lower() == ".safetensors":
        return read_safetensors(path), _stored(path) or {}
    stored = read_sidecar(path).get(METADATA_KEY)
    return _unwrap(read_torch(path), path), stored if isinstance(stored, dict) else {}


def config_from_torchvision(
    state: dict[str, torch.Tensor], *, image_size=None, source, stored: dict | None = None
) -> ViTConfig:
    """The ViTConfig a torchvision state dict describes (heads from `stored`, the config vitkit wrote, if any)."""
    stored = stored or {}

    def shape(key: str) -> tuple[int, ...]:
        if key not in state:
            raise CheckpointError(f"{source}: missing key {key!r}; not a torchvision VisionTransformer state dict")
        return tuple(state[key].shape)

    width, in_chans, ph, pw = shape("conv_proj.weight")
    num_heads = stored.get("num_heads") or _HEADS_BY_WIDTH.get(width, width // 64 if width % 64 == 0 else 0)
    if not num_heads:
        raise CheckpointError(
            f"{source}: a torchvision state dict does not record the number of heads and width {width} is not a named "
            "size; build the model with vitkit.create_model(num_heads=...) and load the weights"
        )
    grid = stored.get("image_size") if image_size is None else None  # a non-square grid vitkit wrote
    image = infer_image_size(
        shape("encoder.pos_embedding")[1] - 1, (ph, pw), image_size=image_size or grid, key="encoder.pos_embedding",
        source=source,
    )  # fmt: skip
    has = "heads.head.weight" in state
    fields: dict[str, Any] = dict(
        image_size=image, patch_size=(ph, pw), in_chans=in_chans, width=width, depth=count_indexed(state, LAYER),
        mlp_dim=shape(f"{LAYER}0.mlp.0.weight")[0], num_heads=num_heads, classifier="token",
        num_classes=shape("heads.head.weight")[0] if has else 0,
        representation_size=shape("heads.pre_logits.weight")[0] if "heads.pre_logits.weight" in state else None,
        mean=IMAGENET_MEAN, std=IMAGENET_STD,
    )  # fmt: skip
    fields.update({key: stored[key] for key in NOT_IN_THE_TENSORS if key in stored})
    try:
        return ViTConfig(**fields)
    except ConfigError as err:
        raise CheckpointError(f"{source}: the tensors describe an impossible model: {err}") from None


def read(path: str | os.PathLike, *, image_size=None, config: Any = None) -> tuple[ViTConfig, dict[str, torch.Tensor]]:
    """(config, vitkit state dict) of a torchvision ViT state dict file."""
    path = Path(path)
    raw, stored = _stored_config(path)
    state, shown = _current_names(_unwrap(raw, path))
    config = config_from_torchvision(state, image_size=image_size, source=path, stored=stored)
    return config, to_vitkit(torchvision_rules(config), state, source=path, shown=shown.get)


def refuse_unheld(c: ViTConfig, path: Path) -> None:
    """One line naming what torchvision's VisionTransformer has no place for."""
    fmt = "a torchvision ViT state dict"
    refuse_conv_stem(c, path, fmt, "torchvision's conv stem has its own layout")
    refuse_pieces(c, path, fmt, "vitkit, timm or hf")
    unheld = {
        "a hybrid backbone (model.backbone)": c.backbone is not None,
        "DeiT's distillation token (distilled)": c.distilled,
        f"classifier={c.classifier} (it pools the class token)": c.classifier != "token",
        f"pos_embed={c.pos_embed} (it learns E_pos)": c.pos_embed != "learned",
        f"mlp_act={c.mlp_act} (its MLP runs exact GELU)": c.mlp_act != "gelu",
        f"{c.in_chans} input channels (it takes RGB)": c.in_chans != 3,
        "a non-square image or patch": c.image_size[0] != c.image_size[1] or c.patch_size[0] != c.patch_size[1],
    }
    for what, has in unheld.items():
        if has:
            raise CheckpointError(f"{path}: {fmt} cannot hold {what}; save as vitkit, timm or hf instead")


def write(model: VisionTransformer, path: str | os.PathLike, *, metadata: dict | None = None) -> Path:
    """Write torchvision's state dict: .safetensors (vitkit's config and `metadata` in its metadata) or, for any other
    suffix, a .pth (those two in FILE.pth.json beside it); what torchvision's model loads with load_state_dict."""
    path, c, metadata = Path(path), model.config, metadata or {}
    if not isinstance(model, VisionTransformer):
        raise CheckpointError(
            f"{path}: a torchvision ViT state dict holds a Vision Transformer; save as vitkit or timm"
        )
    refuse_unheld(c, path)
    tensors = from_vitkit(torchvision_rules(c), model.state_dict())
    if path.suffix == ".safetensors":
        extra = {METADATA_KEY: json.dumps(c.to_dict()), EXTRA_KEY: json.dumps(metadata)}
        write_safetensors(path, tensors, metadata={"format": "pt", **extra})
    else:
        write_with_sidecar(
            path, lambda fresh: write_torch(fresh, tensors), {"vitkit": metadata, METADATA_KEY: c.to_dict()}
        )
    return path


def read_metadata(path: str | os.PathLike, *, config: Any = None) -> dict:
    """What vitkit wrote with the file, else torchvision's transform for the weights (see the module's docstring)."""
    path = Path(path)
    own = _stored(path, EXTRA_KEY) if is_safetensors(path) else read_sidecar(path).get("vitkit")
    if isinstance(own, dict) and own:
        return own
    config, _ = read(path)
    return {"preprocess": shipped_transform(config)}


def shipped_transform(c: ViTConfig) -> dict:
    """vitkit's "preprocess" record of the transform torchvision ships with weights of this shape: ImageClassification
    with crop 224 after a bilinear resize to 256 (vit_l_16's: 242); SWAG's end-to-end weights (larger inputs) resized
    to the crop, bicubic."""
    if c.image_size[0] > 224:
        return {"crop_pct": 1.0, "interpolation": "bicubic", "crop_mode": "center"}
    resize = 242 if (c.width, c.depth, c.patch_size) == (1024, 24, (16, 16)) else 256
    return {"crop_pct": 224 / resize, "interpolation": "bilinear", "crop_mode": "center"}
