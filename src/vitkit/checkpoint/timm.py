"""timm state dicts (pytorch-image-models): plain ViTs and the R50 / R26 / stem-only hybrids, .safetensors or .pth.

timm's plain ViT already uses vitkit's names except patch_embed.proj and pre_logits.fc; its hybrids
keep the BiT ResNet under patch_embed.backbone as stem.{conv,norm} and stages.S.blocks.U.*, or just
{conv,norm} for the stem-only R+ViT-Ti. A state dict does not say how many heads the model has:
vitkit reads it from the vitkit config it stores in safetensors metadata when it wrote the file, else
takes the head count of the named size with that width (Table 1; 64-wide heads otherwise).

A timm Hub directory (what `huggingface-cli download timm/NAME` or timm's save_for_hf leaves: config.json with
"architecture", "label_names" and "pretrained_cfg", beside model.safetensors or pytorch_model.bin) is read as its
weights file (the head count following the width, as above), with its mean, std, input size and class names.

Not representable, and refused with the key named: timm's fc_norm (LayerNorm after average pooling,
where the official GAP model pools after the final LayerNorm), register tokens and the like.
Numerics: timm's hybrid StdConv2dSame normalises with sqrt(var + 1e-8), vitkit (like the official
Flax model) with std + 1e-5; the difference is far below fp32 noise for trained weights.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from vitkit.errors import CheckpointError, ConfigError, shown
from vitkit.files import read_json
from vitkit.limits import check_class_index
from vitkit.models import ModelConfig, ResNetConfig, ResNetV2, VisionTransformer, ViTConfig
from vitkit.models.config import INPUT_KEYS
from vitkit.models.registry import SIZES

from . import bit, values
from .io import (
    is_safetensors,
    read_safetensors,
    read_sidecar,
    read_torch,
    write_safetensors,
    write_torch,
    write_with_sidecar,
)
from .keymap import Rule, count_indexed, from_vitkit, infer_image_size, refuse_conv_stem, same, to_vitkit
from .native import CROP_MODES, INTERPOLATIONS

METADATA_KEY = "vitkit_config"
EXTRA_KEY = "vitkit_metadata"  # class names, preprocessing, training data
_HEADS_BY_WIDTH = {width: heads for _, width, _, heads in SIZES.values()}
HUB_CONFIG = "config.json"
HUB_WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # the safe one first, as timm picks


def _hub_weights(directory: Path) -> Path | None:
    """A Hub directory's weights file, the safe one where both are there."""
    return next((directory / name for name in HUB_WEIGHTS if (directory / name).is_file()), None)


def _hub_config(directory: Path, config: Any = None) -> dict | None:
    """A timm Hub directory's config.json (one that names an "architecture", not a transformers "model_type"), else
    None; `config`: config.json as already read."""
    if not (directory / HUB_CONFIG).is_file() or _hub_weights(directory) is None:
        return None
    config = read_json(directory / HUB_CONFIG) if config is None else config
    return (
        config
        if isinstance(config, dict) and isinstance(config.get("architecture"), str) and "model_type" not in config
        else None
    )


def is_timm_dir(path: str | os.PathLike, config: Any = None) -> bool:
    """`path` is a timm Hub directory; `config`: its config.json as already read."""
    return Path(path).is_dir() and _hub_config(Path(path), config) is not None


def _hub_stored(config: dict, where: Path) -> dict:
    """What a timm Hub config.json tells beyond the tensors, in the keys of vitkit's stored config: mean, std, input size
    and the head count of its `model_args` (what timm builds the model with; without them the count follows the width,
    as for any timm file)."""
    stored = {}
    args = config.get("model_args") if isinstance(config.get("model_args"), dict) else {}
    if isinstance(args.get("num_heads"), int) and not isinstance(args["num_heads"], bool) and args["num_heads"] > 0:
        stored["num_heads"] = args["num_heads"]
    if isinstance(args.get("dynamic_img_size"), bool):  # timm's VisionTransformer(dynamic_img_size=...)
        stored["dynamic_img_size"] = args["dynamic_img_size"]
    cfg = config.get("pretrained_cfg") if isinstance(config.get("pretrained_cfg"), dict) else {}
    for key in ("mean", "std"):
        if cfg.get(key) is not None:
            given = values.number(cfg, key, None, domain=key, where=where, name=f"pretrained_cfg.{key}")
            stored[key] = tuple(float(v) for v in given) if isinstance(given, list) else float(given)
    size = cfg.get("input_size")
    if size is not None:  # [channels, height, width]
        if not (isinstance(size, list) and len(size) == 3):
            values.refuse(where, "pretrained_cfg.input_size", f"expected [channels, height, width], got {shown(size)}")
        stored["image_size"] = values.size(
            {"input_size": size[1:]}, "input_size", None, domain="image_size", where=where
        )
    return stored


def _backbone_names(c: ViTConfig) -> list[tuple[str, str]]:
    """(vitkit prefix, timm prefix) of every ResNet module of the hybrid backbone."""
    root = "patch_embed.backbone."
    stem = root if not c.backbone.layers else root + "stem."
    names = [("backbone.stem_conv.", stem + "conv."), ("backbone.stem_norm.", stem + "norm.")]
    for s, units in enumerate(c.backbone.layers):
        for u in range(units):
            ours, theirs = f"backbone.stages.{s}.{u}.", f"{root}stages.{s}.blocks.{u}."
            names += [(ours + m, theirs + m) for m in ("conv1.", "norm1.", "conv2.", "norm2.", "conv3.", "norm3.")]
            names += [
                (ours + "downsample.0.", theirs + "downsample.conv."),
                (ours + "downsample.1.", theirs + "downsample.norm."),
            ]
    return names


def timm_rules(c: ViTConfig) -> list[Rule]:
    """The key map vitkit <-> timm for config `c`; timm's tensors have vitkit's shapes, only the names differ."""
    shapes = _shapes(c)
    renames = [("patch_embed.", "patch_embed.proj."), ("pre_logits.0.", "pre_logits.fc.")]
    if c.backbone:
        renames += _backbone_names(c)
    rules = []
    for key, shape in shapes.items():
        theirs = next(
            (t + key[len(o) :] for o, t in renames if key.startswith(o) and key[len(o) :].count(".") == 0), key
        )
        rules.append(same(key, theirs, shape))
    return rules


def _shapes(c: ViTConfig) -> dict[str, tuple[int, ...]]:
    """Name and shape of every tensor of a vitkit model with config `c` (built on the meta device: free)."""
    with torch.device("meta"):
        state = VisionTransformer(c).state_dict()
    return {k: tuple(v.shape) for k, v in state.items()}


def _unwrap(obj, source) -> dict[str, torch.Tensor]:
    """The state dict inside a .pth: bare, or under 'model' / 'state_dict', with DataParallel's 'module.' dropped."""
    if isinstance(obj, dict):
        for key in ("model", "state_dict", "model_state"):
            if isinstance(obj.get(key), dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(f"{source}: not a state dict of tensors (expected a mapping of name -> tensor)")
    return {(k[len("module.") :] if k.startswith("module.") else k): v for k, v in obj.items()}


NOT_IN_THE_TENSORS = ("mlp_act", "layer_norm_eps", *INPUT_KEYS, "dynamic_img_size")  # kept from the metadata


def config_from_timm(
    state: dict[str, torch.Tensor], *, image_size=None, source, stored: dict | None = None
) -> ViTConfig:
    """The ViTConfig a timm state dict describes (heads from `stored`, the config vitkit wrote, if any)."""

    def shape(key: str) -> tuple[int, ...]:
        if key not in state:
            raise CheckpointError(f"{source}: missing key {key!r}; not a timm Vision Transformer state dict")
        return tuple(state[key].shape)

    if "fc_norm.weight" in state:
        raise CheckpointError(
            f"{source}: unexpected key 'fc_norm.weight': LayerNorm after average pooling is timm's own GAP variant, "
            "not the paper's (final LayerNorm, then the mean); vitkit cannot represent it"
        )
    width, embed_in, ph, pw = shape("patch_embed.proj.weight")
    depth = count_indexed(state, "blocks.")
    mlp_dim = shape("blocks.0.mlp.fc1.weight")[0]
    backbone, in_chans = None, embed_in
    root = "patch_embed.backbone."
    if f"{root}stem.conv.weight" in state or f"{root}conv.weight" in state:
        stem = f"{root}stem.conv.weight" if f"{root}stem.conv.weight" in state else f"{root}conv.weight"
        root_width, in_chans = shape(stem)[:2]
        stages = count_indexed(state, f"{root}stages.")
        layers = tuple(count_indexed(state, f"{root}stages.{s}.blocks.") for s in range(stages))
        backbone = ResNetConfig(layers=layers, width=root_width)
    if stored and "num_heads" in stored:
        num_heads = stored["num_heads"]
    else:
        num_heads = _HEADS_BY_WIDTH.get(width, width // 64 if width % 64 == 0 else 0)
        if not num_heads:
            raise CheckpointError(
                f"{source}: a timm state dict does not record the number of heads and width {width} is not a named size; "
                "convert from the original format or build the model with vitkit.create_model and load the weights"
            )
    classifier = "token" if "cls_token" in state else "gap"
    representation_size = shape("pre_logits.fc.weight")[0] if "pre_logits.fc.weight" in state else None
    num_classes = shape("head.weight")[0] if "head.weight" in state else 0
    stride = backbone.stride if backbone else 1
    num_patches = shape("pos_embed")[1] - (classifier == "token")
    grid = stored.get("image_size") if stored and image_size is None else None  # a non-square grid vitkit wrote
    image = infer_image_size(
        num_patches, (ph * stride, pw * stride), image_size=image_size or grid, key="pos_embed", source=source
    )
    fields = dict(
        image_size=image, patch_size=(ph, pw), in_chans=in_chans, num_classes=num_classes, width=width, depth=depth,
        mlp_dim=mlp_dim, num_heads=num_heads, classifier=classifier, representation_size=representation_size, backbone=backbone,
    )  # fmt: skip
    for key in NOT_IN_THE_TENSORS:
        if stored and key in stored:
            fields[key] = stored[key]
    try:
        return ViTConfig(**fields)
    except ConfigError as err:
        raise CheckpointError(f"{source}: the tensors describe an impossible model: {err}") from None


def _stored(path: Path, key: str = METADATA_KEY) -> dict | None:
    """A JSON entry of a safetensors file's metadata (vitkit's config or its metadata), None if absent."""
    try:
        with safe_open(str(path), "pt") as f:
            text = (f.metadata() or {}).get(key)
        return json.loads(text) if text else None
    except Exception:  # unreadable metadata is not fatal: the tensors are read (and checked) next
        return None


def pretrained_cfg(c: ModelConfig, metadata: dict) -> dict:
    """timm's description of a checkpoint's input and labels (its pretrained_cfg and label_names), and the background
    transparent pixels are composited on beside them: timm's PretrainedCfg has no such field and refuses an unknown
    key (PretrainedCfg(**cfg) raises), so it is its own entry, in [0, 1] per channel as mean and std are."""
    preprocess = metadata.get("preprocess") or {}
    cfg = {
        "input_size": [c.in_chans, *c.image_size],
        "mean": list(c.mean),
        "std": list(c.std),
        "interpolation": preprocess.get("interpolation", "bilinear"),
        "crop_pct": preprocess.get("crop_pct") or 1.0,
        "crop_mode": preprocess.get("crop_mode", "center"),
        "num_classes": c.num_classes,
    }
    extra = {"model_args": {"dynamic_img_size": True}} if getattr(c, "dynamic_img_size", False) else {}
    return {
        "pretrained_cfg": cfg,
        "label_names": metadata.get("class_names"),
        "background": list(c.background),
        **extra,
    }


def read(
    path: str | os.PathLike, *, image_size=None, config: Any = None
) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """(config, vitkit state dict) of a timm checkpoint (.safetensors preferred; .pth/.bin read with weights_only);
    `config`: a Hub directory's config.json as already read."""
    path = Path(path)
    if path.is_dir():  # a timm Hub directory
        config = _hub_config(path, config)
        if config is None:
            raise CheckpointError(
                f'{path}: not a timm Hub directory (config.json with "architecture", model.safetensors or '
                "pytorch_model.bin)"
            )
        weights = _hub_weights(path)
        state = read_safetensors(weights) if is_safetensors(weights) else _unwrap(read_torch(weights), weights)
        own = _stored(weights) if is_safetensors(weights) else None  # the config vitkit wrote into the file, if it did
        stored = {**_hub_stored(config, path / HUB_CONFIG), **(own or {})}
    elif is_safetensors(path) or path.suffix.lower() == ".safetensors":  # a damaged one: safetensors says what is wrong
        state, stored = read_safetensors(path), _stored(path)
    else:  # the config vitkit wrote beside it, if any (a .pth written elsewhere has none)
        state, stored = _unwrap(read_torch(path), path), read_sidecar(path).get(METADATA_KEY)
        stored = stored if isinstance(stored, dict) else None
    if bit.is_bit_timm(state):  # timm's resnetv2_*_bit
        return bit.read_timm(state, image_size=image_size, source=path, stored=stored)
    config = config_from_timm(state, image_size=image_size, source=path, stored=stored)
    return config, to_vitkit(timm_rules(config), state, source=path)


def write(model: VisionTransformer, path: str | os.PathLike, *, metadata: dict | None = None) -> Path:
    """Write the timm state dict: .safetensors (vitkit's config, `metadata` and timm's pretrained_cfg in its
    metadata) or, for any other suffix, a .pth (those three in FILE.pth.json beside it)."""
    metadata = metadata or {}
    path = Path(path)
    c = model.config
    refuse_conv_stem(c, path, "a timm ViT checkpoint", "timm's ViT hybrids are BiT ResNets")
    if isinstance(model, ResNetV2):  # timm's resnetv2_*_bit
        tensors = from_vitkit(bit.timm_rules(c), model.state_dict())
    elif c.pos_embed != "learned":
        raise CheckpointError(
            f"{path}: timm ViT checkpoints hold learned position embeddings; this model uses {c.pos_embed!r}"
        )
    else:
        tensors = from_vitkit(timm_rules(c), model.state_dict())
    timm_cfg = pretrained_cfg(c, metadata)
    if path.suffix == ".safetensors":
        write_safetensors(
            path,
            tensors,
            metadata={
                "format": "pt",
                METADATA_KEY: json.dumps(c.to_dict()),
                EXTRA_KEY: json.dumps(metadata),
                **{k: json.dumps(v) for k, v in timm_cfg.items()},
            },
        )
    else:
        write_with_sidecar(
            path, lambda fresh: write_torch(fresh, tensors), {**timm_cfg, "vitkit": metadata, METADATA_KEY: c.to_dict()}
        )
    return path


def read_metadata(path: str | os.PathLike, *, config: Any = None) -> dict:
    """Class names and preprocessing: vitkit's own record, else timm's label_names and pretrained_cfg; `config`: a Hub
    directory's config.json as already read."""
    path = Path(path)
    # the weights of a Hub folder:
    if path.is_file() and is_timm_dir(path.parent) and _hub_weights(path.parent) == path:
        return read_metadata(path.parent)  # its config.json names the classes and the crop (info left them out)
    if path.is_dir():
        weights = _hub_weights(path)
        own = _stored(weights, EXTRA_KEY) if weights is not None and is_safetensors(weights) else None
        found = {"vitkit": own, **(_hub_config(path, config) or {})}
    elif is_safetensors(path):
        found = {
            "vitkit": _stored(path, EXTRA_KEY),
            "label_names": _stored(path, "label_names"),
            "pretrained_cfg": _stored(path, "pretrained_cfg"),
        }
    else:
        found = read_sidecar(path)
    if found.get("vitkit"):
        return found["vitkit"]
    metadata = {}
    names = found.get("label_names")
    if isinstance(names, dict):  # timm's {class index: name}, where indices may have gaps
        for index in names:
            check_class_index(str(index), f"{path}: label_names", CheckpointError)
        names = [
            names.get(str(i), names.get(i, ""))
            for i in range(1 + max((int(k) for k in names if str(k).isdigit()), default=-1))
        ]
    if isinstance(names, list):
        metadata["class_names"] = [str(n) for n in names]
    preprocess = preprocess_of(found.get("pretrained_cfg"), path)
    if preprocess:
        metadata["preprocess"] = preprocess
    return metadata


def preprocess_of(cfg, where: str | os.PathLike = "pretrained_cfg") -> dict:
    """vitkit's "preprocess" record of timm's pretrained_cfg: its crop_pct (in its domain, limits.DOMAINS, else a
    CheckpointError naming `where`), crop_mode (center or squash; timm's border, which pads, is read as center) and
    interpolation, where it names them."""
    if not isinstance(cfg, dict):
        return {}
    preprocess = {}
    if cfg.get("crop_pct") is not None:
        preprocess["crop_pct"] = float(values.number(cfg, "crop_pct", None, domain="crop_pct", where=where))
    if cfg.get("crop_mode") in (*CROP_MODES, "border"):
        preprocess["crop_mode"] = "squash" if cfg["crop_mode"] == "squash" else "center"
    if cfg.get("interpolation") in INTERPOLATIONS:
        preprocess["interpolation"] = cfg["interpolation"]
    return preprocess
