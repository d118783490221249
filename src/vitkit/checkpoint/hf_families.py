"""Hugging Face transformers folders of the backbones people start from, read and written as vitkit ViTs.

    model_type             class                       vitkit family (models.registry.FAMILIES)
    dinov2                 Dinov2Model                 dinov2: LayerScale; SwiGLU where use_swiglu_ffn
    dinov2_with_registers  Dinov2WithRegistersModel    dinov2_reg: LayerScale and register tokens
    clip_vision_model      CLIPVisionModel             clip: a LayerNorm before the blocks, no patch bias
    clip                   CLIPModel                   clip: its vision tower (the text tower and projections stay)
    siglip_vision_model    SiglipVisionModel           siglip: attention pooling (MAP), no class token
    siglip                 SiglipModel                 siglip: its vision tower

Each reads as a backbone (num_classes 0) whose pooled features are the class's pooler_output: the class token after
the final LayerNorm (DINOv2, CLIP), the MAP head's output (SigLIP). Keys are the on-disk names, with "vision_model."
in front where the folder holds an image-text model or an older transformers wrote it. DINOv2's mask token (masked
image modelling only) is not read, and is written as zeros.

Sizes: the width, depth, MLP size and patch from the tensors, the heads, activation and LayerNorm epsilon from
config.json (its class's defaults where it leaves one out). A preprocessor_config.json gives mean, std, the resize
and the crop; the model then runs at its crop (DINOv2's E_pos, stored for 518 px, resampled to 224 as transformers
resamples it for a 224 px input).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from vitkit.errors import CheckpointError, ConfigError
from vitkit.files import atomic_dir, read_json, refuse_foreign, write_json, write_text
from vitkit.models import VisionTransformer, ViTConfig, resample_pos_embed
from vitkit.models.registry import FAMILIES

from . import hf
from .card import CARD_NAME, model_card, publishable
from .io import write_safetensors
from .keymap import Rule, count_indexed, from_vitkit, fused, infer_image_size, same, to_vitkit

# model_type -> (the vitkit family, the HF class written, its vision config's defaults for keys left out)
TYPES = {
    "dinov2": ("dinov2", "Dinov2Model", dict(num_attention_heads=12, hidden_act="gelu", layer_norm_eps=1e-6)),
    "dinov2_with_registers": (
        "dinov2_reg",
        "Dinov2WithRegistersModel",
        dict(num_attention_heads=12, hidden_act="gelu", layer_norm_eps=1e-6),
    ),
    "clip_vision_model": (
        "clip",
        "CLIPVisionModel",
        dict(num_attention_heads=12, hidden_act="quick_gelu", layer_norm_eps=1e-5),
    ),
    "siglip_vision_model": (
        "siglip",
        "SiglipVisionModel",
        dict(num_attention_heads=12, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6),
    ),
}
# the image classification classes (a linear `classifier` on the backbone's tokens): vision model_type -> (the class,
# the vitkit pieces of what its head reads)
CLASSIFYING = {
    "dinov2": ("Dinov2ForImageClassification", dict(head_pool="cls_mean")),  # [class token; patch mean] after the norm
    "dinov2_with_registers": ("Dinov2WithRegistersForImageClassification", dict(head_pool="cls_mean")),  # no registers
    "clip_vision_model": ("CLIPForImageClassification", dict(head_pool="mean", final_norm=False)),  # before the norm
    "siglip_vision_model": ("SiglipForImageClassification", dict(classifier="gap")),  # all tokens; the MAP head unused
}
TOWERS = {"clip": "clip_vision_model", "siglip": "siglip_vision_model"}  # image-text models: their vision_config
TOWER = "vision_model."
# an image-text model's keys that are not its vision tower's: left in the file, never read
NOT_VISION = ("text_model.", "text_projection", "visual_projection", "logit_scale", "logit_bias")
ACTS = {**hf.ACTS, "quick_gelu": "quick_gelu"}
HF_ACTS = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "quick_gelu": "quick_gelu"}


def vision_type(hf_config: dict) -> tuple[str, dict]:
    """(model_type of the vision model, its config) of a config.json: an image-text model's vision_config."""
    kind = hf_config["model_type"]
    if kind in TOWERS:
        vision = hf_config.get("vision_config")
        return TOWERS[kind], vision if isinstance(vision, dict) else {}
    return kind, hf_config


# -- key maps -------------------------------------------------------------------------------------
def family_rules(c: ViTConfig, kind: str, *, prefix: str = "") -> list[Rule]:
    """The key map vitkit <-> the HF class of `kind` (a vision model_type) for config `c`."""
    D, N, p = c.width, c.num_patches, prefix
    if kind.startswith("dinov2"):
        rules = [
            *hf._linear("patch_embed", f"{p}embeddings.patch_embeddings.projection", (D, c.in_chans, *c.patch_size)),
            same("cls_token", f"{p}embeddings.cls_token", (1, 1, D)),
            same("pos_embed", f"{p}embeddings.position_embeddings", (1, 1 + N, D)),
        ]
        if c.reg_tokens:
            rules.append(same("reg_token", f"{p}embeddings.register_tokens", (1, c.reg_tokens, D)))
        rules += [r for i in range(c.depth) for r in _dinov2_block(c, i, f"{p}encoder.layer.{i}.")]
        return rules + hf._linear("norm", f"{p}layernorm", (D,)) + _classifier(c)
    e = f"{p}embeddings."
    if kind == "clip_vision_model":
        rules = [
            same("patch_embed.weight", e + "patch_embedding.weight", (D, c.in_chans, *c.patch_size)),
            _reshaped("cls_token", e + "class_embedding", (D,), (1, 1, D)),
            _reshaped("pos_embed", e + "position_embedding.weight", (1 + N, D), (1, 1 + N, D)),
            *hf._linear("norm_pre", f"{p}pre_layrnorm", (D,)),
        ]
    else:  # siglip_vision_model
        rules = [
            *hf._linear("patch_embed", e + "patch_embedding", (D, c.in_chans, *c.patch_size)),
            _reshaped("pos_embed", e + "position_embedding.weight", (N, D), (1, N, D)),
        ]
    rules += [r for i in range(c.depth) for r in _clip_block(c, f"blocks.{i}.", f"{p}encoder.layers.{i}.")]
    if c.final_norm:  # CLIPForImageClassification's post_layernorm is not read (its head reads no norm)
        rules += hf._linear("norm", f"{p}post_layernorm", (D,))
    if c.classifier == "map":
        rules += _map_head(c, f"{p}head.")
    return rules + _classifier(c)


def _classifier(c: ViTConfig) -> list[Rule]:
    """The image classification classes' head, `classifier` (top level, beside the backbone's prefix)."""
    if not c.num_classes:
        return []
    return hf._linear("head", "classifier", (c.num_classes, c.width * (2 if c.head_pool == "cls_mean" else 1)))


def _reshaped(ours: str, theirs: str, their_shape: tuple[int, ...], our_shape: tuple[int, ...]) -> Rule:
    """The same values in another shape (CLIP's class embedding (D,) is vitkit's (1, 1, D) class token)."""
    return Rule(ours, (theirs,), (their_shape,), lambda t: t.reshape(our_shape), lambda t: (t.reshape(their_shape),))


def _dinov2_block(c: ViTConfig, i: int, h: str) -> list[Rule]:
    D, M, o = c.width, c.mlp_dim, f"blocks.{i}."
    a = h + "attention.attention."
    mlp = ("weights_in", "weights_out") if c.mlp == "swiglu" else ("fc1", "fc2")
    hidden = 2 * M if c.mlp == "swiglu" else M
    return [
        *hf._linear(o + "norm1", h + "norm1", (D,)),
        fused(o + "attn.qkv.weight", (a + "query.weight", a + "key.weight", a + "value.weight"), (D, D)),
        fused(o + "attn.qkv.bias", (a + "query.bias", a + "key.bias", a + "value.bias"), (D,)),
        *hf._linear(o + "attn.proj", h + "attention.output.dense", (D, D)),
        same(o + "ls1.gamma", h + "layer_scale1.lambda1", (D,)),
        *hf._linear(o + "norm2", h + "norm2", (D,)),
        *hf._linear(o + "mlp.fc1", f"{h}mlp.{mlp[0]}", (hidden, D)),
        *hf._linear(o + "mlp.fc2", f"{h}mlp.{mlp[1]}", (D, M)),
        same(o + "ls2.gamma", h + "layer_scale2.lambda1", (D,)),
    ]


def _clip_block(c: ViTConfig, o: str, h: str) -> list[Rule]:
    """One block of CLIP's and SigLIP's encoders (the same layout)."""
    D, M = c.width, c.mlp_dim
    a = h + "self_attn."
    return [
        *hf._linear(o + "norm1", h + "layer_norm1", (D,)),
        fused(o + "attn.qkv.weight", (a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"), (D, D)),
        fused(o + "attn.qkv.bias", (a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"), (D,)),
        *hf._linear(o + "attn.proj", a + "out_proj", (D, D)),
        *hf._linear(o + "norm2", h + "layer_norm2", (D,)),
        *hf._linear(o + "mlp.fc1", h + "mlp.fc1", (M, D)),
        *hf._linear(o + "mlp.fc2", h + "mlp.fc2", (D, M)),
    ]


def _map_head(c: ViTConfig, h: str) -> list[Rule]:
    """SigLIP's pooling head (a torch MultiheadAttention: Q, K, V packed as vitkit packs them) as vitkit's AttentionPool."""
    D, M = c.width, c.mlp_dim
    return [
        same("attn_pool.probe", h + "probe", (1, 1, D)),
        same("attn_pool.qkv.weight", h + "attention.in_proj_weight", (3 * D, D)),
        same("attn_pool.qkv.bias", h + "attention.in_proj_bias", (3 * D,)),
        *hf._linear("attn_pool.proj", h + "attention.out_proj", (D, D)),
        *hf._linear("attn_pool.norm", h + "layernorm", (D,)),
        *hf._linear("attn_pool.mlp.fc1", h + "mlp.fc1", (M, D)),
        *hf._linear("attn_pool.mlp.fc2", h + "mlp.fc2", (D, M)),
    ]


# -- the "hf" format: every transformers folder vitkit reads -------------------------------------------
def read(path: str | os.PathLike, *, image_size=None, config: Any = None) -> tuple[ViTConfig, dict[str, torch.Tensor]]:
    """(config, vitkit state dict) of a transformers folder: a ViT (hf.py) or one of these classes; `config`: its
    config.json as already read."""
    directory = Path(path)
    hf_config = read_json(directory / hf.CONFIG_NAME) if config is None else config
    if not (isinstance(hf_config, dict) and hf_config.get("model_type") in hf.FAMILY_TYPES):
        return hf.read(directory, image_size=image_size, config=hf_config)
    return read_family(directory, hf_config, image_size=image_size)


def write(
    model: VisionTransformer, directory: str | os.PathLike, *, metadata: dict | None = None, metrics: list | None = None
) -> Path:
    """Write the transformers folder of the class that holds `model`: ViT's (hf.py) for the paper's ViT, else the
    family's (family_of), or one line saying which piece no class holds; a model card (README.md) in either, of
    `metrics` (the run's figures) too."""
    # no family class holds a hybrid: ViT's writer refuses it in its one line
    if not isinstance(model, VisionTransformer) or model.config.backbone is not None or family_of(model.config) is None:
        return hf.write(model, directory, metadata=metadata, metrics=metrics)
    return write_family(model, directory, metadata=metadata, metrics=metrics)


read_metadata = hf.read_metadata  # vitkit's record, id2label and the image processor: the same for every class


# -- reading --------------------------------------------------------------------------------------
def read_family(directory: Path, hf_config: dict, *, image_size=None) -> tuple[ViTConfig, dict[str, torch.Tensor]]:
    """(config, vitkit state dict) of a folder of one of these classes."""
    kind, vision = vision_type(hf_config)
    state, weights = hf.read_weights(directory)
    state = _vision_tower(state, hf_config["model_type"])
    prefixes = (TOWER, hf_config["model_type"] + ".")  # the backbone's attribute in an image-text or classifying class
    prefix = next((p for p in prefixes if any(k.startswith(p) for k in state)), "")
    if "classifier.weight" in state:  # an image classification class: the pieces its head does not read are not read
        unread = {"siglip_vision_model": f"{prefix}head.", "clip_vision_model": f"{prefix}post_layernorm."}.get(kind)
        state = {k: v for k, v in state.items() if not (unread and k.startswith(unread))}
    processor = read_json(directory / hf.PREPROCESSOR_NAME) if (directory / hf.PREPROCESSOR_NAME).is_file() else None
    config = config_from_family(kind, vision, state, prefix=prefix, image_size=image_size, source=directory)
    if kind.startswith("dinov2"):
        state.pop(f"{prefix}embeddings.mask_token", None)  # masked image modelling's token: not the backbone's
    ours = to_vitkit(family_rules(config, kind, prefix=prefix), state, source=weights)
    return _at_run_size(config, ours, processor, vision, image_size, directory)


def _vision_tower(state: dict[str, torch.Tensor], model_type: str) -> dict[str, torch.Tensor]:
    """The vision tower's tensors of an image-text model (CLIPModel, SiglipModel); the others' as they are."""
    if model_type not in TOWERS:
        return state
    return {k: v for k, v in state.items() if not k.startswith(NOT_VISION)}


def config_from_family(
    kind: str, vision: dict, state: dict[str, torch.Tensor], *, prefix: str, image_size=None, source
) -> ViTConfig:
    """The ViTConfig of a vision model of `kind`: its family's row, sizes from the tensors, the rest from `vision`."""
    family, _, defaults = TYPES[kind]
    v = {**defaults, **vision}
    where = Path(source) / hf.CONFIG_NAME

    def shape(key: str) -> tuple[int, ...]:
        if prefix + key not in state:
            raise CheckpointError(f"{source}: missing key {prefix + key!r}; not a {TYPES[kind][1]} checkpoint")
        return tuple(state[prefix + key].shape)

    dinov2 = kind.startswith("dinov2")
    patch_key = "embeddings.patch_embeddings.projection.weight" if dinov2 else "embeddings.patch_embedding.weight"
    width, in_chans, ph, pw = shape(patch_key)
    layers = "encoder.layer." if dinov2 else "encoder.layers."
    depth = count_indexed([k[len(prefix) :] for k in state if k.startswith(prefix)], layers)
    swiglu = dinov2 and bool(v.get("use_swiglu_ffn"))
    mlp_dim = shape(f"{layers}0.mlp.weights_out.weight" if swiglu else f"{layers}0.mlp.fc2.weight")[1]
    positions = shape("embeddings.position_embeddings" if dinov2 else "embeddings.position_embedding.weight")
    num_patches = (positions[1] if dinov2 else positions[0]) - (kind != "siglip_vision_model")
    act = v.get("hidden_act")
    if act not in ACTS:
        raise CheckpointError(f"{where}: hidden_act {act!r} is not supported; vitkit has {', '.join(ACTS)}")
    head = state.get("classifier.weight")  # the image classification classes' head: (K, what it reads)
    if kind == "siglip_vision_model" and not v.get("vision_use_head", True) and head is None:
        raise CheckpointError(
            f"{where}: vision_use_head false: this SigLIP has no pooling head, so it has no pooled feature to read"
        )
    size = v.get("image_size", 224)
    hint = image_size if image_size is not None else (size if isinstance(size, int) else tuple(size))
    fields = dict(
        FAMILIES[family], image_size=infer_image_size(num_patches, (ph, pw), image_size=hint, key="position embeddings",
        source=source), patch_size=(ph, pw), in_chans=in_chans, num_classes=0, width=width, depth=depth, mlp_dim=mlp_dim,
        num_heads=v["num_attention_heads"], mlp_act=ACTS[act], layer_norm_eps=v["layer_norm_eps"],
    )  # fmt: skip
    if dinov2:
        fields.update(layer_scale=v.get("layerscale_value", 1.0), mlp="swiglu" if swiglu else "plain")
        fields["reg_tokens"] = shape("embeddings.register_tokens")[1] if kind == "dinov2_with_registers" else 0
    if head is not None:
        fields.update(CLASSIFYING[kind][1], num_classes=head.shape[0])
    fields.update({k: v[f"vitkit_{k}"] for k in ("dynamic_img_size", "pos_embed_resample") if f"vitkit_{k}" in v})
    try:
        return ViTConfig(**fields)
    except ConfigError as err:
        raise CheckpointError(f"{where}: describes a model vitkit cannot build: {err}") from None


def _at_run_size(config: ViTConfig, state: dict, processor: dict | None, vision: dict, image_size, source):
    """The config and state with mean and std of the preprocessor, at the size it crops to (E_pos resampled the way
    the family resamples it) unless `image_size` is asked for."""
    fields = {}
    if processor:  # each number within its key's domain (checkpoint.values), as for ViT's folders
        fields.update(hf.preprocessing(processor, config.in_chans, Path(source) / hf.PREPROCESSOR_NAME))
    crop = _crop_size(processor)
    if image_size is None and crop is not None and crop != config.image_size:
        fields["image_size"] = crop
    try:
        resized = config.replace(**fields)
    except ConfigError as err:
        raise CheckpointError(f"{source / hf.PREPROCESSOR_NAME}: describes inputs vitkit cannot build: {err}") from None
    if resized.grid_size != config.grid_size:
        state = {**state, "pos_embed": resample_pos_embed(
            state["pos_embed"], resized.grid_size, old_grid=config.grid_size,
            num_prefix_tokens=config.pos_prefix_tokens, mode=config.pos_embed_resample,
        )}  # fmt: skip
    return resized, state


def _crop_size(processor: dict | None) -> tuple[int, int] | None:
    """The (height, width) an image processor hands the model: its crop where it crops, else its resize to a size."""
    if not isinstance(processor, dict):
        return None
    for key, on in (("crop_size", processor.get("do_center_crop")), ("size", True)):
        value = processor.get(key)
        if on and isinstance(value, dict) and all(isinstance(value.get(s), int) for s in ("height", "width")):
            return (value["height"], value["width"])
        if on and isinstance(value, int) and not isinstance(value, bool):
            return (value, value)
    return None


# -- writing --------------------------------------------------------------------------------------
def family_of(c: ViTConfig) -> str | None:
    """The vision model_type that holds a model of config `c`, None for the paper's ViT (hf.py writes it)."""
    if c.classifier == "map":
        return "siglip_vision_model"
    if c.pre_norm or not c.patch_bias or c.mlp_act == "quick_gelu":
        return "clip_vision_model"
    if c.layer_scale is not None or c.reg_tokens or c.mlp == "swiglu":
        return "dinov2_with_registers" if c.reg_tokens else "dinov2"
    return None


def refuse_unheld(c: ViTConfig, kind: str, directory: Path) -> None:
    """One line naming the first piece of `c` that the HF class of `kind` cannot hold, and the formats that do."""
    classify = bool(c.num_classes)
    name, reads = CLASSIFYING[kind] if classify else (TYPES[kind][1], {})
    wants = {  # the piece: (what the class has, what the model has)
        "distillation token (distilled)": (False, c.distilled),
        "classifier": (reads.get("classifier", "map" if kind == "siglip_vision_model" else "token"), c.classifier),
        "classification head's input (head_pool)": (reads.get("head_pool", "classifier"), c.head_pool),
        "final_norm": (reads.get("final_norm", True), c.final_norm),
        "pre_norm": (kind == "clip_vision_model", c.pre_norm),
        "patch_bias": (kind != "clip_vision_model", c.patch_bias),
        "layer_scale": (kind.startswith("dinov2"), c.layer_scale is not None),
        "reg_tokens": (kind == "dinov2_with_registers", bool(c.reg_tokens)),
        "mlp=swiglu": (kind.startswith("dinov2") or c.mlp != "swiglu", True),
        "MLP size (an integer multiple of the width; SwiGLU: 2/3 of one, in 8s)": (
            True, not kind.startswith("dinov2") or _mlp_ratio(c) is not None,
        ),
        "pos_embed": ("learned", c.pos_embed),
        "a hybrid backbone": (False, c.backbone is not None),
        "a pre-logits layer": (False, bool(c.representation_size)),
        f"{c.in_chans} input channels": (True, c.in_chans == 3),
        "a non-square image or patch": (True, c.image_size[0] == c.image_size[1] and c.patch_size[0] == c.patch_size[1]),
    }  # fmt: skip
    for piece, (held, has) in wants.items():
        if held != has:
            raise CheckpointError(
                f"{directory}: transformers' {name} cannot hold this model's {piece} ({has!r}); save it as vitkit "
                "(or timm where timm has the piece) instead"
            )


def write_family(
    model: VisionTransformer, directory: str | os.PathLike, *, metadata: dict | None = None, metrics: list | None = None
) -> Path:
    """Write the HF folder of the class that holds `model` (family_of): config.json, preprocessor_config.json and the
    model card, with no local path in any of them (`publishable`)."""
    directory, c, metadata = Path(directory), model.config, publishable(metadata or {})
    kind = family_of(c)
    refuse_unheld(c, kind, directory)
    # a classifying class holds the backbone under an attribute: vision_model (CLIP, SigLIP), dinov2 ...
    prefix = (TOWER if kind in TOWERS.values() else kind + ".") if c.num_classes else ""
    tensors = from_vitkit(family_rules(c, kind, prefix=prefix), model.state_dict())
    if kind.startswith("dinov2"):
        tensors[f"{prefix}embeddings.mask_token"] = torch.zeros(1, c.width)  # the class has one; vitkit never reads it
    if not c.final_norm:  # CLIPForImageClassification has a post_layernorm its head does not read: the identity
        tensors.update(
            {
                f"{prefix}post_layernorm.weight": torch.ones(c.width),
                f"{prefix}post_layernorm.bias": torch.zeros(c.width),
            }
        )
    hf_config = _family_config(c, kind, metadata)
    preprocessor = hf._preprocessor_config(c, metadata.get("preprocess") or {})
    card = model_card(model, metadata, format="hf", metrics=metrics)
    refuse_foreign(directory)
    with atomic_dir(directory) as tmp:
        write_safetensors(tmp / hf.WEIGHTS_NAMES[0], tensors, metadata={"format": "pt"})
        write_json(tmp / hf.PREPROCESSOR_NAME, preprocessor)
        write_json(tmp / hf.CONFIG_NAME, hf_config)
        write_text(tmp / CARD_NAME, card)
    return directory


def _mlp_ratio(c: ViTConfig) -> int | None:
    """DINOv2's integer mlp_ratio that makes `c.mlp_dim`: D * ratio, or for SwiGLU 2/3 of it rounded up to 8s."""
    for ratio in range(1, 65):
        hidden = c.width * ratio
        if (c.mlp_dim == hidden) if c.mlp != "swiglu" else (c.mlp_dim == (int(hidden * 2 / 3) + 7) // 8 * 8):
            return ratio
    return None


def _family_config(c: ViTConfig, kind: str, metadata: dict) -> dict:
    """config.json of the HF class of `kind`: the architecture in its names, and vitkit's metadata and run choices."""
    config = {
        "architectures": [TYPES[kind][1]], "model_type": kind, "hidden_size": c.width, "num_hidden_layers": c.depth,
        "num_attention_heads": c.num_heads, "hidden_act": HF_ACTS[c.mlp_act], "layer_norm_eps": c.layer_norm_eps,
        "image_size": c.image_size[0], "patch_size": c.patch_size[0], "num_channels": 3, "dtype": "float32",
        "vitkit": metadata, "vitkit_dynamic_img_size": c.dynamic_img_size, "vitkit_pos_embed_resample": c.pos_embed_resample,
    }  # fmt: skip
    if kind.startswith("dinov2"):
        config.update(
            mlp_ratio=_mlp_ratio(c), layerscale_value=c.layer_scale, use_swiglu_ffn=c.mlp == "swiglu",
            qkv_bias=True, hidden_dropout_prob=c.dropout, attention_probs_dropout_prob=c.attn_dropout,
        )  # fmt: skip
        if c.reg_tokens:
            config["num_register_tokens"] = c.reg_tokens
    else:
        config.update(intermediate_size=c.mlp_dim, attention_dropout=c.attn_dropout)
        if kind == "siglip_vision_model":
            config["vision_use_head"] = True
    if not c.num_classes:
        return config
    top = {"architectures": [CLASSIFYING[kind][0]], "vitkit": metadata, "dtype": "float32"}
    top.update(hf.label_config(c, metadata, metadata.get("class_names")))
    if kind not in TOWERS.values():
        return {**config, **top}
    image_text = next(t for t, vision in TOWERS.items() if vision == kind)  # its config nests the vision model's
    vision = {k: v for k, v in config.items() if k not in ("architectures", "vitkit", "dtype")}
    return {**top, "model_type": image_text, "vision_config": vision}
