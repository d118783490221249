"""Named model sizes and variants: `create_model("vit_b16")`, `create_model("ViT-B/16")`.

Sizes B, L and H are Table 1 of the paper; Ti and S come from DeiT and the official code; "mini"
and "test" are small sizes for 28-32 px images and for the test suite. A plain name is
`vit_<size><patch>` (any size and patch, e.g. vit_s8); hybrids are listed explicitly. timm's names
(vit_base_patch16_224, vit_base_r50_s16_384, ...) are aliases of the same architectures at their image size, and
timm's names of the families (deit_small_patch16_224, vit_small_patch14_dinov2, vit_base_patch16_clip_224 ...) build
them as timm does.

The paper's baseline, BiT ResNet-v2 (Kolesnikov et al. 2020), is `bit_r<depth>x<width factor>` with the
release's six models (R50x1 ... R152x4) and small ones for 28-32 px images (3x3/1 stem, no max-pool).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from typing import Any

from torch import nn

from vitkit.errors import ConfigError

from .bit import ResNetV2
from .config import TIMM_NAMES, BiTConfig, ModelConfig, ResNetConfig, ViTConfig
from .features import FeatureNet
from .vit import VisionTransformer

# size: (layers, hidden D, MLP size, heads)
SIZES: dict[str, tuple[int, int, int, int]] = {
    "test": (2, 32, 64, 2),
    "mini": (6, 192, 384, 3),
    "ti": (12, 192, 768, 3),
    "s": (12, 384, 1536, 6),
    "b": (12, 768, 3072, 12),  # Table 1, ViT-Base
    "l": (24, 1024, 4096, 16),  # Table 1, ViT-Large
    "h": (32, 1280, 5120, 16),  # Table 1, ViT-Huge
}


def _size(size: str, patch: int, **rest: Any) -> ViTConfig:
    depth, width, mlp_dim, heads = SIZES[size]
    return ViTConfig(depth=depth, width=width, mlp_dim=mlp_dim, num_heads=heads, patch_size=patch, **rest)


# The listed variants. Hybrids follow the official configs: R50+ViT-B/16 is ResNet-50 with stage 4
# removed and 9 units in stage 3 (stride 16) under 1x1 patches; R+ViT-Ti/16 is the ResNet stem
# alone under 8x8 patches.
# BiT units per stage (Kolesnikov et al. 2020, the release's KNOWN_MODELS): R50, R101, R152
BIT_LAYERS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}


def _bit(depth: int, width_factor: int, **rest: Any) -> BiTConfig:
    return BiTConfig(layers=BIT_LAYERS[depth], width_factor=width_factor, **rest)


def _bit_small(layers: tuple[int, ...], width: int, size: int, in_chans: int) -> BiTConfig:
    """A BiT ResNet-v2 for 28-32 px images: 3x3/1 stem, no pool, three stages (stride 4), 10 classes."""
    return BiTConfig(layers=layers, width=width, stem="small", image_size=size, in_chans=in_chans, num_classes=10)


# The families people start from, each a row of the pieces (config.py) besides its size, as their releases build them:
# DeiT III (Touvron et al. 2022), DINOv2 (Oquab et al. 2024) and with registers (Darcet et al. 2024), OpenAI's CLIP
# (Radford et al. 2021), SigLIP (Zhai et al. 2023). Readers start from the row and take the sizes from the file.
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
FAMILIES: dict[str, dict[str, Any]] = {
    "vit": {},  # the paper's
    "deit3": dict(layer_scale=1e-6, mean=IMAGENET_MEAN, std=IMAGENET_STD),
    "dinov2": dict(
        layer_scale=1e-5,
        pos_embed_resample="bicubic",
        dynamic_img_size=True,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        feature_pool="cls_mean",  # its linear protocol: the class token with the mean of the patch tokens
    ),
    "dinov2_reg": dict(
        layer_scale=1e-5,
        reg_tokens=4,
        feature_pool="cls_mean",
        pos_embed_resample="bicubic_antialias",
        dynamic_img_size=True,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
    ),
    "clip": dict(
        pre_norm=True,
        patch_bias=False,
        mlp_act="quick_gelu",
        layer_norm_eps=1e-5,
        pos_embed_resample="bicubic",
        mean=CLIP_MEAN,
        std=CLIP_STD,
    ),
    "siglip": dict(classifier="map", mlp_act="gelu_tanh", pos_embed_resample="bicubic"),
}


def family(name: str, **rest: Any) -> ViTConfig:
    """A ViTConfig of family `name` (FAMILIES) with `rest` (sizes, image size ...) on top."""
    return ViTConfig(**{**FAMILIES[name], **rest})


def _family(name: str, size: str, patch: int, image_size: int, **rest: Any) -> ViTConfig:
    depth, width, mlp_dim, heads = SIZES[size]
    return family(
        name, depth=depth, width=width, mlp_dim=mlp_dim, num_heads=heads, patch_size=patch, image_size=image_size,
        **rest,
    )  # fmt: skip


MODELS: dict[str, ModelConfig] = {
    "vit_ti16": _size("ti", 16),
    "vit_s16": _size("s", 16),
    "vit_s32": _size("s", 32),
    "vit_b8": _size("b", 8),
    "vit_b16": _size("b", 16),
    "vit_b32": _size("b", 32),
    "vit_l16": _size("l", 16),
    "vit_l32": _size("l", 32),
    "vit_h14": _size("h", 14),
    "r_vit_ti16": _size("ti", 8, backbone=ResNetConfig(layers=())),
    "r50_vit_b16": _size("b", 1, backbone=ResNetConfig(layers=(3, 4, 9))),
    "r26_vit_b32": _size("b", 1, backbone=ResNetConfig(layers=(2, 2, 2, 2))),
    "r50_vit_l32": _size("l", 1, backbone=ResNetConfig(layers=(3, 4, 6, 3))),
    # small images: 28x28 grayscale (MNIST, Fashion-MNIST) and 32x32 RGB (CIFAR), 10 classes
    "vit_mini4_28": _size("mini", 4, image_size=28, in_chans=1, num_classes=10),
    "vit_mini4_32": _size("mini", 4, image_size=32, in_chans=3, num_classes=10),
    "vit_test": _size("test", 4, image_size=16, in_chans=3, num_classes=10),
    # the families' small and base sizes, without a head (backbones: their features are what one starts from)
    "deit3_s16": _family("deit3", "s", 16, 224),
    "deit3_b16": _family("deit3", "b", 16, 224),
    "dinov2_s14": _family("dinov2", "s", 14, 224, num_classes=0),
    "dinov2_b14": _family("dinov2", "b", 14, 224, num_classes=0),
    "dinov2_reg_s14": _family("dinov2_reg", "s", 14, 224, num_classes=0),
    "clip_b16": _family("clip", "b", 16, 224, num_classes=0),
    "siglip_b16": _family("siglip", "b", 16, 224, num_classes=0),
    "dinov2_test": _family("dinov2", "test", 4, 16, num_classes=10),
    "clip_test": _family("clip", "test", 4, 16, num_classes=10),
    "siglip_test": _family("siglip", "test", 4, 16, num_classes=10),
    # the paper's baseline: BiT-S/M ResNet-v2 (same architecture, different pre-training data)
    "bit_r50x1": _bit(50, 1),
    "bit_r50x3": _bit(50, 3),
    "bit_r101x1": _bit(101, 1),
    "bit_r101x3": _bit(101, 3),
    "bit_r152x2": _bit(152, 2),
    "bit_r152x4": _bit(152, 4),
    # small BiTs for 28x28 grayscale and 32x32 RGB: R11 (1, 1, 1), R20 (2, 2, 2), R29 (3, 3, 3) at root width 32
    "bit_r11_28": _bit_small((1, 1, 1), 32, 28, 1),
    "bit_r20_28": _bit_small((2, 2, 2), 32, 28, 1),
    "bit_r29_28": _bit_small((3, 3, 3), 32, 28, 1),
    "bit_r20_32": _bit_small((2, 2, 2), 32, 32, 3),
    "bit_test": BiTConfig(layers=(1, 1), width=32, stem="small", image_size=16, in_chans=3, num_classes=10),
}

_PLAIN = re.compile(r"vit_(test|mini|ti|s|b|l|h)(\d+)")

# timm's names for the same architectures; the trailing number is the image size
# (vit_base_patch16_384 = ViT-B/16 at 384 px). A pretrained tag after a dot (".augreg_in21k") is ignored.
_TIMM_PLAIN = re.compile(r"vit_(tiny|small|base|large|huge)_patch(\d+)_(\d+)")
_TIMM_SIZES = {"tiny": "ti", "small": "s", "base": "b", "large": "l", "huge": "h"}
_TIMM_BIT = re.compile(r"resnetv2_(\d+x\d+)_bit")  # resnetv2_50x1_bit(.goog_in21k): BiT-M R50x1
# BiT-M-R50x1 (the release's file names): the upstream data, then the size
_BIT_RELEASE = re.compile(r"bit_[sml]_(r\d+x\d+)")
_TIMM_HYBRIDS = {
    "vit_tiny_r_s16_p8": "r_vit_ti16",
    "vit_base_r50_s16": "r50_vit_b16",
    "vit_base_r26_s32": "r26_vit_b32",
    "vit_large_r50_s32": "r50_vit_l32",
}


# timm's names of the families (FAMILIES), as timm registers them: deit_small_patch16_224 (DeiT: the paper's ViT
# with ImageNet's mean and std; _distilled_ adds the distillation token), deit3_base_patch16_384,
# vit_small_patch14_dinov2 and _reg4_dinov2 (518 px), vit_base_patch16_clip_224 (exact GELU; _clip_quickgelu_ CLIP's
# own) and vit_base_patch16_siglip_224 (exact GELU, as timm builds it)
_TIMM_FAMILY = re.compile(
    r"(?P<deit>deit3?)_(?P<dsize>tiny|small|base|large|huge)(?P<dist>_distilled)?_patch(?P<dpatch>\d+)_(?P<dimage>\d+)"
    r"|vit_(?P<size>tiny|small|base|large|huge)_patch(?P<patch>\d+)"
    r"(?:_(?P<reg>reg4_)?dinov2|_(?P<tower>clip|siglip)(?P<quick>_quickgelu)?_(?P<image>\d+))"
)


def _timm_family(key: str) -> tuple[str, dict[str, Any]] | None:
    """The size and the family's pieces (FAMILIES) of a timm family name (_TIMM_FAMILY); None for another name."""
    match = _TIMM_FAMILY.fullmatch(key)
    if match is None:
        return None
    g = match.groupdict()
    if g["deit"] == "deit":
        pieces = dict(mean=IMAGENET_MEAN, std=IMAGENET_STD, distilled=bool(g["dist"]))
    elif g["deit"] == "deit3":
        pieces = dict(FAMILIES["deit3"])
    elif g["tower"] is None:
        pieces = {**FAMILIES["dinov2_reg" if g["reg"] else "dinov2"], "image_size": 518}
    else:
        pieces = {**FAMILIES[g["tower"]], "mlp_act": "quick_gelu" if g["quick"] else "gelu"}
    size, patch = (g["dsize"], g["dpatch"]) if g["deit"] else (g["size"], g["patch"])
    image = g["dimage"] or g["image"]
    return f"vit_{_TIMM_SIZES[size]}{patch}", {**pieces, **({"image_size": int(image)} if image else {})}


def timm_alias(name: str) -> tuple[str, dict[str, Any]] | None:
    """('vit_b16', {'image_size': 384}) for timm's 'vit_base_patch16_384'; None for a name that is not timm's."""
    key = name.strip().lower().split(".")[0]
    if match := _TIMM_PLAIN.fullmatch(key):
        size, patch, image = match.groups()
        return f"vit_{_TIMM_SIZES[size]}{patch}", {"image_size": int(image)}
    if family_name := _timm_family(key):
        return family_name
    if match := _TIMM_BIT.fullmatch(key):
        return f"bit_r{match.group(1)}", {}
    base, _, image = key.rpartition("_")
    if base in _TIMM_HYBRIDS and image.isdigit():
        return _TIMM_HYBRIDS[base], {"image_size": int(image)}
    return None


def canonical_name(name: str) -> str:
    """'ViT-B/16' -> 'vit_b16', 'R50+ViT-B/16' -> 'r50_vit_b16'."""
    return name.strip().lower().replace("+", "_").replace("-", "_").replace("/", "")


def list_models(filter: str | Sequence[str] = "", *, exclude_filters: str | Sequence[str] = ()) -> list[str]:
    """The named models in the table's order; `filter`: only those a wildcard pattern matches (fnmatch, as timm's
    list_models: "*s16*", "bit_*"; a list: any of them); `exclude_filters`: without those these patterns match."""
    return filtered(MODELS, filter, exclude_filters)


def filtered(names: Iterable[str], filter: str | Sequence[str], exclude_filters: str | Sequence[str]) -> list[str]:
    """`names` that a pattern of `filter` matches (all for none) and none of `exclude_filters` does, in any case."""
    return [n for n in names if (not filter or _matches(n, filter)) and not _matches(n, exclude_filters)]


def _matches(name: str, patterns: str | Sequence[str]) -> bool:
    for pattern in [patterns] if isinstance(patterns, str) else patterns:
        if not isinstance(pattern, str):
            raise ConfigError(f"filter: expected a wildcard pattern or a list of them, got {pattern!r}")
        if fnmatch.fnmatchcase(name.lower(), pattern.lower()):
            return True
    return False


def get_config(name: str, **overrides: Any) -> ModelConfig:
    """The config of a named model with `overrides` (num_classes, image_size, patch_size, ...)."""
    if alias := timm_alias(name):
        key, implied = alias
        # img_size=96 with vit_small_patch16_224: the size given, not the name's, as timm builds it
        given = {TIMM_NAMES.get(k, k) for k in overrides}
        return get_config(key, **{**{k: v for k, v in implied.items() if k not in given}, **overrides})
    key = canonical_name(name)
    if match := _BIT_RELEASE.fullmatch(key):
        key = f"bit_{match.group(1)}"
    if key in MODELS:
        config = MODELS[key]
    elif match := _PLAIN.fullmatch(key):
        config = _size(match.group(1), int(match.group(2)))
    else:
        raise ConfigError(
            f"model.name: unknown model {name!r}; known models: {', '.join(MODELS)}, any vit_<size><patch>, "
            "the release's BiT-M-R50x1 ..., and timm's names (vit_base_patch16_224, vit_base_r50_s16_384, resnetv2_50x1_bit, ...)"
        )
    return config.replace(**overrides)


def create_model(
    name: str, *, features_only: bool = False, out_indices: int | Sequence[int] | None = None, **overrides: Any
) -> nn.Module:
    """Build a named model; e.g. create_model("vit_b16", num_classes=10, image_size=384) or create_model("bit_r50x1").

    `overrides` are config fields, or timm's names of them (drop_path_rate, drop_rate, attn_drop_rate, img_size).
    features_only: the model as a feature extractor (`features.FeatureNet`, timm's features_only): forward returns
    a list of (B, C, h, w) maps of the levels `out_indices` picks, described by its `feature_info`."""
    return as_features(build_model(get_config(name, **overrides)), features_only, out_indices)


def as_features(model: nn.Module, features_only: bool, out_indices: int | Sequence[int] | None) -> nn.Module:
    """`model`, or with `features_only` its `FeatureNet` of the levels `out_indices` picks."""
    if features_only:
        return FeatureNet(model, out_indices)
    if out_indices is not None:
        raise ConfigError("out_indices: picks the levels of a feature extractor; pass features_only=True with it")
    return model


def build_model(config: ModelConfig) -> nn.Module:
    """The model a config describes: a VisionTransformer for a ViTConfig, a BiT ResNetV2 for a BiTConfig."""
    return ResNetV2(config) if isinstance(config, BiTConfig) else VisionTransformer(config)
