"""timm state dicts (pytorch-image-models): plain ViTs and the R50 / R26 / stem-only hybrids, .safetensors or .pth.

timm's plain ViT already uses vitkit's names except patch_embed.proj and pre_logits.fc; its hybrids
keep the BiT ResNet under patch_embed.backbone as stem.{conv,norm} and stages.S.blocks.U.*, or just
{conv,norm} for the stem-only R+ViT-Ti. DeiT's distilled models (deit_*_distilled_*) add dist_token and head_dist, which
vitkit names alike. A state dict does not say how many heads the model has:
vitkit reads it from the vitkit config it stores in safetensors metadata when it wrote the file, else
takes the head count of the named size with that width (Table 1; 64-wide heads otherwise).

A timm Hub directory (what `huggingface-cli download timm/NAME` or timm's save_for_hf leaves: config.json with
"architecture", "label_names" and "pretrained_cfg", beside model.safetensors or pytorch_model.bin) is read as its
weights file (the head count following the width, as above), with its mean, std, input size and class names.

The families' pieces have timm's names: blocks.i.ls1/ls2.gamma (LayerScale), reg_token, norm_pre (CLIP), a patch
embedding without bias, attn_pool (MAP: latent is vitkit's probe, q and kv its packed qkv), SwiGLU's packed fc1.
timm's DeiT III and DINOv2-with-registers keep no position for the class token (`no_embed_class`: pos_embed covers
the patches alone): read with a zero class slot; written so wherever the model has registers or its slot is zero,
the slot folded into the class token (the sums are the same). What the tensors do not say comes from the Hub
config's architecture name: CLIP's LayerNorm epsilon 1e-5 and, for the quickgelu models, QuickGELU (timm's
vit_base_patch16_clip_224 itself runs exact GELU, and so does vitkit reading it, to agree with timm).

Not representable, and refused with the key named: timm's fc_norm (LayerNorm after average pooling,
where the official GAP model pools after the final LayerNorm), registers with positions, and the like.
Numerics: timm's hybrid StdConv2dSame normalises with sqrt(var + 1e-8), vitkit (like the official
Flax model) with std + 1e-5; the difference is far below fp32 noise for trained weights.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors import safe_open

from vitkit.errors import CheckpointError, ConfigError, shown
from vitkit.files import atomic_dir, read_json, refuse_foreign, write_json, write_text
from vitkit.limits import check_class_index
from vitkit.models import ModelConfig, ResNetConfig, ResNetV2, VisionTransformer, ViTConfig
from vitkit.models.config import INPUT_KEYS
from vitkit.models.registry import SIZES

from . import bit, values
from .card import CARD_NAME, model_card, publishable
from .destination import SUFFIXES
from .io import (
    is_safetensors,
    read_safetensors,
    read_sidecar,
    read_torch,
    write_safetensors,
    write_torch,
    write_with_sidecar,
)
from .keymap import (
    HEAD_PIECES,
    Rule,
    count_indexed,
    from_vitkit,
    infer_image_size,
    refuse_conv_stem,
    refuse_pieces,
    same,
    to_vitkit,
)
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
    if args.get("act_layer") in ("gelu", "gelu_tanh"):  # timm's names of the exact GELU and its tanh form
        stored["mlp_act"] = args["act_layer"]
    background = config.get("background")  # vitkit's, beside timm's keys
    if isinstance(background, list) and background and all(isinstance(v, (int, float)) for v in background):
        stored["background"] = tuple(float(v) for v in background)
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
    return {**_architecture_facts(config.get("architecture", "")), **stored}


def _architecture_facts(name: str) -> dict:
    """What a timm architecture name says that its tensors do not (timm builds these models so)."""
    facts: dict[str, Any] = {}
    if any(family in name for family in ("dinov2", "siglip", "clip", "deit3")):
        facts["pos_embed_resample"] = "bicubic_antialias"  # timm's resample_abs_pos_embed
    if "clip" in name and "siglip" not in name:
        facts["layer_norm_eps"] = 1e-5
        facts["mlp_act"] = "quick_gelu" if "quickgelu" in name else "gelu"
    if "deit3" in name:
        facts["layer_scale"] = 1e-6
    if "dinov2" in name:
        facts["feature_pool"] = "cls_mean"  # DINOv2's linear protocol
    return facts


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


def timm_rules(c: ViTConfig, *, class_slot: bool = True) -> list[Rule]:
    """The key map vitkit <-> timm for config `c`; timm's tensors have vitkit's shapes, only the names differ, but for
    attention pooling's packed Q/K/V and, without a `class_slot` (no_embed_class), the position embedding."""
    shapes = _shapes(c)
    renames = [
        ("patch_embed.", "patch_embed.proj."),
        ("pre_logits.0.", "pre_logits.fc."),
        ("attn_pool.probe", "attn_pool.latent"),
    ]
    if c.backbone:
        renames += _backbone_names(c)
    special = {
        f"attn_pool.qkv.{kind}": _q_and_kv(f"attn_pool.qkv.{kind}", c.width, kind) for kind in ("weight", "bias")
    }
    if not class_slot and c.pos_prefix_tokens:
        special["pos_embed"] = _without_class_slot(c)
    rules = []
    for key, shape in shapes.items():
        theirs = next(
            (t + key[len(o) :] for o, t in renames if key.startswith(o) and key[len(o) :].count(".") == 0), key
        )
        rules.append(special.get(key) or same(key, theirs, shape))
    return rules


def _q_and_kv(ours: str, D: int, kind: str) -> Rule:
    """timm's attention pooling keeps Q (the latent's) and K, V (the tokens') apart: vitkit's packed qkv rows."""
    tail = (D,) if kind == "weight" else ()
    return Rule(
        ours,
        (f"attn_pool.q.{kind}", f"attn_pool.kv.{kind}"),
        ((D, *tail), (2 * D, *tail)),
        lambda q, kv: torch.cat([q, kv]),
        lambda t: (t[:D], t[D:]),
    )


def _without_class_slot(c: ViTConfig) -> Rule:
    """pos_embed of the patches alone (timm's no_embed_class) as vitkit's, whose class slot is zero: padded, or cut
    (after `fold_class_slot`)."""
    shape = (1, c.num_patches, c.width)
    return Rule("pos_embed", ("pos_embed",), (shape,), lambda t: F.pad(t, (0, 0, 1, 0)), lambda t: (t[:, 1:],))


def fold_class_slot(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The class token's position added into the class token and its slot zeroed: the same sums, timm's
    no_embed_class layout."""
    pos = state["pos_embed"]
    return {**state, "cls_token": state["cls_token"] + pos[:, :1], "pos_embed": F.pad(pos[:, 1:], (0, 0, 1, 0))}


def writes_class_slot(c: ViTConfig, state: dict[str, torch.Tensor]) -> bool:
    """Whether the timm file keeps a class slot in pos_embed: not with registers (timm's register models have none)
    nor where the slot is zero (a model read from a no_embed_class file); always with DeiT's distillation token."""
    if not c.pos_prefix_tokens or c.pos_embed != "learned" or c.distilled:
        return True
    return not c.reg_tokens and bool(state["pos_embed"][:, :1].any())


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


# kept from the metadata
NOT_IN_THE_TENSORS = (
    "mlp_act", "layer_norm_eps", *INPUT_KEYS, "dynamic_img_size", "pos_embed_resample", "feature_pool",
)  # fmt: skip


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
    classifier = "token" if "cls_token" in state else "map" if "attn_pool.latent" in state else "gap"
    representation_size = shape("pre_logits.fc.weight")[0] if "pre_logits.fc.weight" in state else None
    num_classes = shape("head.weight")[0] if "head.weight" in state else 0
    stride = backbone.stride if backbone else 1
    grid = stored.get("image_size") if stored and image_size is None else None  # a non-square grid vitkit wrote
    slots = class_slot(state, (ph * stride, pw * stride), grid) + ("dist_token" in state)  # DeiT's distillation token
    image = infer_image_size(
        shape("pos_embed")[1] - slots,
        (ph * stride, pw * stride),
        image_size=image_size or grid,
        key="pos_embed",
        source=source,
    )
    fields = dict(
        image_size=image, patch_size=(ph, pw), in_chans=in_chans, num_classes=num_classes, width=width, depth=depth,
        mlp_dim=mlp_dim, num_heads=num_heads, classifier=classifier, representation_size=representation_size, backbone=backbone,
        **_pieces(state, stored or {}),
    )  # fmt: skip
    for key in NOT_IN_THE_TENSORS:
        if stored and key in stored:
            fields[key] = stored[key]
    try:
        return ViTConfig(**fields)
    except ConfigError as err:
        raise CheckpointError(f"{source}: the tensors describe an impossible model: {err}") from None


def class_slot(state: dict[str, torch.Tensor], stride: tuple[int, int], image_size) -> bool:
    """Whether a timm state dict's pos_embed has a slot for the class token: with DeiT's distillation token yes, not without one,
    not with registers (timm's no_embed_class), else where its length is one more than the patches (a known
    grid's, or a square one)."""
    if "dist_token" in state:  # DeiT's distilled models: positions for both tokens
        return True
    if "cls_token" not in state or "reg_token" in state:
        return False
    length = state["pos_embed"].shape[1] if "pos_embed" in state else 1
    if image_size is not None:
        return length == (image_size[0] // stride[0]) * (image_size[1] // stride[1]) + 1
    return math.isqrt(length) ** 2 != length  # N is a square; N + 1 never is


def _pieces(state: dict[str, torch.Tensor], stored: dict) -> dict:
    """The family pieces a timm state dict holds, told by its keys (LayerScale's initial value from `stored`)."""
    pieces: dict[str, Any] = {}
    if "blocks.0.ls1.gamma" in state:
        pieces["layer_scale"] = stored.get("layer_scale", 1e-5)
    if "reg_token" in state:
        pieces["reg_tokens"] = state["reg_token"].shape[1]
    fc1, fc2 = state.get("blocks.0.mlp.fc1.weight"), state.get("blocks.0.mlp.fc2.weight")
    if fc1 is not None and fc2 is not None and fc1.shape[0] == 2 * fc2.shape[1]:  # SwiGLU: fc1 packs gate and value
        pieces.update(mlp="swiglu", mlp_dim=fc2.shape[1])
    pieces["distilled"] = "dist_token" in state  # DeiT's distillation token and head_dist (deit_*_distilled_*)
    pieces["pre_norm"] = "norm_pre.weight" in state
    pieces["patch_bias"] = "patch_embed.proj.bias" in state
    return pieces


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
    slot = class_slot(state, config.total_patch_size, config.image_size)
    return config, to_vitkit(timm_rules(config, class_slot=slot), state, source=path)


def write(
    model: VisionTransformer, path: str | os.PathLike, *, metadata: dict | None = None, metrics: list | None = None
) -> Path:
    """Write the timm state dict: .safetensors (vitkit's config, `metadata` and timm's pretrained_cfg in its
    metadata), .pth or .pt (those three in FILE.pth.json beside it), or, for a name without such a suffix, timm's
    Hub folder (`write_folder`, its model card naming `metrics`). `metadata` is written without local paths."""
    metadata, path = publishable(metadata or {}), Path(path)
    c = model.config
    refuse_conv_stem(c, path, "a timm ViT checkpoint", "timm's ViT hybrids are BiT ResNets")
    if isinstance(model, VisionTransformer):
        refuse_pieces(c, path, "a timm ViT checkpoint", "vitkit or hf", HEAD_PIECES)
    if path.suffix.lower() not in SUFFIXES:
        return write_folder(model, path, metadata=metadata, metrics=metrics)
    if isinstance(model, ResNetV2):  # timm's resnetv2_*_bit
        tensors = from_vitkit(bit.timm_rules(c), model.state_dict())
    elif c.pos_embed != "learned":
        raise CheckpointError(
            f"{path}: timm ViT checkpoints hold learned position embeddings; this model uses {c.pos_embed!r}"
        )
    else:
        state = model.state_dict()
        slot = writes_class_slot(c, state)
        tensors = from_vitkit(timm_rules(c, class_slot=slot), state if slot else fold_class_slot(state))
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


# timm's plain ViT entry points by width (Table 1's sizes): the architecture a folder names. Its model_args set every
# size, so any of them builds the model; the named one reads right.
ARCHITECTURES = {
    192: "vit_tiny_patch16_224",
    384: "vit_small_patch16_224",
    768: "vit_base_patch16_224",
    1024: "vit_large_patch16_224",
    1280: "vit_huge_patch14_224",
}
TIMM_LAYER_NORM_EPS = 1e-6  # timm's LayerNorm, which model_args cannot change


def write_folder(model: VisionTransformer, directory: Path, *, metadata: dict, metrics: list | None = None) -> Path:
    """timm's Hub folder (what timm's save_for_hf writes and `read` reads): config.json with the architecture, the
    constructor arguments (model_args), pretrained_cfg and label_names, so that timm.create_model("local-dir:DIR")
    builds the model with no other argument; model.safetensors holding timm's tensors with vitkit's config and
    `metadata` in its metadata (a round trip is exact); README.md, the model card. A model timm's VisionTransformer
    cannot be is refused in one line."""
    c = model.config
    refuse_for_folder(model, directory)
    tensors = from_vitkit(timm_rules(c), model.state_dict())
    stored = {"format": "pt", METADATA_KEY: json.dumps(c.to_dict()), EXTRA_KEY: json.dumps(metadata)}
    config, card = hub_config(c, metadata), model_card(model, metadata, format="timm", metrics=metrics)
    refuse_foreign(directory)
    with atomic_dir(directory) as tmp:  # replaces an older folder as a whole
        write_safetensors(tmp / HUB_WEIGHTS[0], tensors, metadata=stored)
        write_json(tmp / HUB_CONFIG, config)
        write_text(tmp / CARD_NAME, card)
    return directory


def refuse_for_folder(model, directory: Path) -> None:
    """One line where timm's VisionTransformer, built from model_args alone, would not be `model`."""
    c = model.config
    why = None
    if isinstance(model, ResNetV2) or c.backbone is not None:
        why = "a ResNet or hybrid (timm builds their backbones from fixed entry points, not from model_args)"
    elif c.pos_embed != "learned":
        why = f"pos_embed {c.pos_embed!r} (timm's ViT learns one position embedding per token)"
    elif c.representation_size:
        why = "a pre-logits layer (timm's ViT has none)"
    elif c.layer_norm_eps != TIMM_LAYER_NORM_EPS:
        why = f"layer_norm_eps {c.layer_norm_eps:g} (timm's ViT uses {TIMM_LAYER_NORM_EPS:g})"
    elif int(c.width * (c.mlp_dim / c.width)) != c.mlp_dim:
        why = f"an MLP of {c.mlp_dim} for width {c.width} (timm sizes it as int(width * mlp_ratio))"
    if why:
        raise CheckpointError(
            f"{directory}: timm's Hub folder cannot hold {why}; write a timm file instead ({directory}.safetensors), "
            "or save as vitkit"
        )


def hub_config(c: ViTConfig, metadata: dict) -> dict:
    """config.json of timm's Hub folder: its root keys as timm's save_for_hf writes them, and the model's background
    (no timm key holds it)."""
    timm_cfg = pretrained_cfg(c, metadata)
    square = c.image_size[0] == c.image_size[1] and c.patch_size[0] == c.patch_size[1]
    args = {
        "img_size": c.image_size[0] if square else list(c.image_size),
        "patch_size": c.patch_size[0] if square else list(c.patch_size),
        "in_chans": c.in_chans,
        "embed_dim": c.width,
        "depth": c.depth,
        "num_heads": c.num_heads,
        "mlp_ratio": c.mlp_dim / c.width,
        "qkv_bias": True,
        "class_token": c.classifier == "token",
        "global_pool": "token" if c.classifier == "token" else "avg",
        "fc_norm": False,  # vitkit's GAP pools after the final LayerNorm, as the paper's
    }
    if c.mlp_act != "gelu":  # timm's default is exact GELU
        args["act_layer"] = c.mlp_act
    if c.dynamic_img_size:
        args["dynamic_img_size"] = True
    return {
        "architecture": ARCHITECTURES.get(c.width, ARCHITECTURES[768]),
        "num_classes": c.num_classes,
        "num_features": c.width,
        "global_pool": args["global_pool"],
        "model_args": args,
        "pretrained_cfg": {
            **timm_cfg["pretrained_cfg"],
            "fixed_input_size": not c.dynamic_img_size,
            "first_conv": "patch_embed.proj",
            "classifier": "head",
        },
        **({"label_names": timm_cfg["label_names"]} if timm_cfg["label_names"] else {}),
        "background": timm_cfg["background"],
    }


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
