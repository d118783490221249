"""Hugging Face transformers ViT directories: ViTModel and ViTForImageClassification.

A directory holds config.json (model_type "vit") and model.safetensors (or pytorch_model.bin, read
with weights_only; or a sharded *.index.json), and optionally preprocessor_config.json with the
image mean/std. Keys are the on-disk names (transformers 4 and 5 alike): embeddings.*,
encoder.layer.i.{layernorm_before, attention.attention.{query,key,value}, attention.output.dense,
layernorm_after, intermediate.dense, output.dense}, layernorm, pooler.dense, classifier; under
"vit." for ViTForImageClassification.

The config carries HF's own layer_norm_eps (default 1e-12, not the paper's 1e-6) and hidden_act
("gelu" exact, "gelu_pytorch_tanh"/"gelu_new" the tanh approximation). ViTModel's pooler (dense +
tanh on the class token) is vitkit's pre-logits layer; such a model loads with num_classes 0 and
returns the pooled output. HF ViT has a class token, learned position embeddings and no hybrid, and
ViTForImageClassification has no pre-logits layer: other models cannot be written.

DeiT (model_type "deit") is the same layout under "deit." with the distillation token
(embeddings.distillation_token, position embeddings for 2 + N): vitkit's distilled model reads and writes
DeiTForImageClassificationWithTeacher (cls_classifier and distillation_classifier, logits averaged). DeiTModel and
DeiTForImageClassification read the distillation token with no head, or the class token alone: refused.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch

from vitkit.errors import CheckpointError, ConfigError, shown
from vitkit.files import atomic_dir, read_json, refuse_foreign, says, snapshot_json, write_json, write_text
from vitkit.limits import is_number, number_problem
from vitkit.models import VisionTransformer, ViTConfig

from . import values
from .card import CARD_NAME, model_card, publishable
from .io import read_safetensors, read_torch, write_safetensors
from .keymap import (
    HEAD_PIECES,
    Rule,
    from_vitkit,
    fused,
    infer_image_size,
    refuse_conv_stem,
    refuse_pieces,
    same,
    to_vitkit,
)
from .native import INTERPOLATIONS, MULTI_LABEL

CONFIG_NAME = "config.json"
PREPROCESSOR_NAME = "preprocessor_config.json"
LUMA = (0.299, 0.587, 0.114)  # ITU-R 601, as PIL's convert("L"): gray = LUMA . (R, G, B)
WEIGHTS_NAMES = ("model.safetensors", "pytorch_model.bin")
INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
ACTS = {"gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh", "quick_gelu": "quick_gelu"}
MODEL_TYPES = ("vit", "deit")
DEIT_HEADS = ("cls_classifier", "distillation_classifier")  # DeiTForImageClassificationWithTeacher's, per token
# the backbones' model types, which hf_families reads and writes: DINOv2 (with registers), CLIP, SigLIP
FAMILY_TYPES = ("dinov2", "dinov2_with_registers", "clip_vision_model", "clip", "siglip_vision_model", "siglip")


def is_hf(path: str | os.PathLike) -> bool:
    return says_hf(snapshot_json(path, CONFIG_NAME).data)


def says_hf(config: Any) -> bool:
    """`config` (a parsed config.json) is a Hugging Face ViT's (or DeiT's), or one of the backbones' (FAMILY_TYPES)."""
    return any(says(config, "model_type", kind) for kind in MODEL_TYPES) or (
        isinstance(config, dict) and config.get("model_type") in FAMILY_TYPES
    )


def hf_rules(c: ViTConfig, *, prefix: str) -> list[Rule]:
    """The key map vitkit <-> HF ViT; `prefix` is "vit." for ViTForImageClassification, "" for ViTModel; a distilled
    model's is DeiTForImageClassificationWithTeacher's ("deit.")."""
    D, M = c.width, c.mlp_dim
    p = prefix
    rules = [
        same("patch_embed.weight", f"{p}embeddings.patch_embeddings.projection.weight", (D, c.in_chans, *c.patch_size)),
        same("patch_embed.bias", f"{p}embeddings.patch_embeddings.projection.bias", (D,)),
        same("cls_token", f"{p}embeddings.cls_token", (1, 1, D)),
        same("pos_embed", f"{p}embeddings.position_embeddings", (1, c.pos_prefix_tokens + c.num_patches, D)),
    ]
    if c.distilled:
        rules.append(same("dist_token", f"{p}embeddings.distillation_token", (1, 1, D)))
    for i in range(c.depth):
        o, h = f"blocks.{i}.", f"{p}encoder.layer.{i}."
        a = h + "attention.attention."
        rules += [
            *_linear(o + "norm1", h + "layernorm_before", (D,)),
            fused(o + "attn.qkv.weight", (a + "query.weight", a + "key.weight", a + "value.weight"), (D, D)),
            fused(o + "attn.qkv.bias", (a + "query.bias", a + "key.bias", a + "value.bias"), (D,)),
            *_linear(o + "attn.proj", h + "attention.output.dense", (D, D)),
            *_linear(o + "norm2", h + "layernorm_after", (D,)),
            *_linear(o + "mlp.fc1", h + "intermediate.dense", (M, D)),
            *_linear(o + "mlp.fc2", h + "output.dense", (D, M)),
        ]
    rules += _linear("norm", f"{p}layernorm", (D,))
    if c.representation_size:
        rules += _linear("pre_logits.0", f"{p}pooler.dense", (c.representation_size, D))
    if c.num_classes:
        heads = zip(("head", "head_dist"), DEIT_HEADS) if c.distilled else [("head", "classifier")]
        rules += [
            rule
            for ours, theirs in heads
            for rule in _linear(ours, theirs, (c.num_classes, c.representation_size or D))
        ]
    return rules


def _linear(ours: str, theirs: str, weight_shape: tuple[int, ...]) -> list[Rule]:
    """weight and bias of a Linear or LayerNorm under both names."""
    return [
        same(f"{ours}.weight", f"{theirs}.weight", weight_shape),
        same(f"{ours}.bias", f"{theirs}.bias", weight_shape[:1]),
    ]


def config_from_hf(
    hf: dict, state: dict[str, torch.Tensor], *, preprocessor: dict | None, image_size=None, source
) -> ViTConfig:
    """The ViTConfig of an HF ViT: sizes from config.json, head and pooler from which tensors exist. Every value read
    is checked against its domain first (`values`), naming the file and the key."""
    where = Path(source) / CONFIG_NAME
    missing = next((k for k in HF_SIZES if k not in hf), None)
    if missing:
        raise CheckpointError(f"{where}: missing key {missing!r}; not a ViT config")
    act = hf.get("hidden_act", "gelu")
    if act not in ACTS:
        raise CheckpointError(f"{where}: hidden_act {shown(act)} is not supported; vitkit has {', '.join(ACTS)}")
    if not values.flag(hf, "qkv_bias", True, where=where):
        raise CheckpointError(f"{where}: qkv_bias false is not supported; vitkit's attention always has q, k, v biases")
    prefix = _prefix(state)
    patch = values.size(hf, "patch_size", 16, domain="patch_size", where=where)
    distilled = hf.get("model_type") == "deit"  # DeiTForImageClassificationWithTeacher (read checked the heads)
    pos_key = f"{prefix}embeddings.position_embeddings"
    if pos_key not in state:
        raise CheckpointError(f"{source}: missing key {pos_key!r}; not a ViT checkpoint")
    grid_hint = (
        image_size if image_size is not None else values.size(hf, "image_size", 224, domain="image_size", where=where)
    )
    image = infer_image_size(
        state[pos_key].shape[1] - 1 - distilled, patch, image_size=grid_hint, key=pos_key, source=source
    )
    pooler = state.get(f"{prefix}pooler.dense.weight")
    head = state.get(f"{DEIT_HEADS[0] if distilled else 'classifier'}.weight")
    fields = dict(
        image_size=image, patch_size=patch, num_classes=0 if head is None else head.shape[0], mlp_act=ACTS[act],
        representation_size=None if pooler is None else pooler.shape[0],
        **{ours: values.whole(hf, theirs, None, where=where) for theirs, ours in HF_SIZES.items()},
        in_chans=values.number(hf, "num_channels", 3, domain="in_chans", where=where),
        layer_norm_eps=values.number(hf, "layer_norm_eps", 1e-12, domain="layer_norm_eps", where=where),
        dynamic_img_size=values.flag(hf, "vitkit_dynamic_img_size", False, where=where),
        dropout=values.share(hf, "hidden_dropout_prob", 0.0, where=where),
        attn_dropout=values.share(hf, "attention_probs_dropout_prob", 0.0, where=where),
        distilled=distilled,
    )  # fmt: skip
    if preprocessor:
        fields.update(preprocessing(preprocessor, fields["in_chans"], Path(source) / PREPROCESSOR_NAME))
    try:
        return ViTConfig(**fields)
    except ConfigError as err:
        raise CheckpointError(f"{where}: describes a model vitkit cannot build: {err}") from None


# config.json's sizes, and the ViTConfig fields they are
HF_SIZES = {
    "hidden_size": "width",
    "num_hidden_layers": "depth",
    "num_attention_heads": "num_heads",
    "intermediate_size": "mlp_dim",
}


def preprocessing(processor: dict, channels: int, where: Path) -> dict:
    """The ViTConfig fields an image processor's file `where` gives: mean and std (`_normalisation`), and the
    background vitkit wrote beside them (`_preprocessor_config`), each number within its key's domain."""
    fields = _normalisation(processor, channels, where)
    if "vitkit_background" in processor:
        given = values.number(processor, "vitkit_background", None, domain="background", where=where)
        fields["background"] = tuple(float(v) for v in given) if isinstance(given, list) else (float(given),)
    return fields


def _normalisation(processor: dict, channels: int, where: Path) -> dict:
    """mean and std on [0, 1] pixels that do what an image processor's rescale and normalise do: (x * rescale_factor
    - image_mean) / image_std, with x in [0, 255], is (x / 255 - mean) / std for mean = image_mean / k and
    std = image_std / k, k = 255 * rescale_factor; each in its domain (limits.DOMAINS), named by the file's key."""
    if not values.flag(processor, "do_normalize", True, where=where):
        return {"mean": (0.0,) * channels, "std": (1.0,) * channels}
    rescale = values.flag(processor, "do_rescale", True, where=where)
    factor = (
        values.number(processor, "rescale_factor", 1 / 255, domain="rescale_factor", where=where) if rescale else 1.0
    )
    k = 255 * factor
    given = {}
    for ours, theirs in (("mean", "image_mean"), ("std", "image_std")):
        raw = processor.get(theirs)
        if raw is None:
            continue
        numbers = tuple(raw) if isinstance(raw, list) else (raw,) * channels
        if not numbers or not all(is_number(v) for v in numbers):
            values.refuse(where, theirs, f"expected a number or a list of one per input channel, got {shown(raw)}")
        scaled = numbers if math.isclose(k, 1.0, rel_tol=1e-9) else tuple(v / k for v in numbers)
        problem = number_problem(ours, scaled, given=raw)
        if problem:
            values.refuse(
                where, theirs, problem + ("" if scaled is numbers else f" once divided by 255 x rescale_factor ({k:g})")
            )
        given[ours] = scaled
    if "std" in given and "mean" not in given:
        given["mean"] = (0.0,) * channels
    return given


def _prefix(state: dict[str, torch.Tensor]) -> str:
    return next((p for p in ("vit.", "deit.") if any(k.startswith(p) for k in state)), "")


def read_weights(directory: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """The tensors of an HF directory: model.safetensors, pytorch_model.bin, or the shards an index lists."""
    for name in WEIGHTS_NAMES:
        path = directory / name
        if path.exists():  # a device or a FIFO under the name: its reader refuses it
            return (read_safetensors(path) if name.endswith(".safetensors") else _tensors(read_torch(path), path)), path
    for name in INDEX_NAMES:
        index = directory / name
        if index.exists():
            data = read_json(index)
            weight_map = data.get("weight_map") if isinstance(data, dict) else None
            if not isinstance(weight_map, dict):
                raise CheckpointError(f"{index}: no 'weight_map'; the index is damaged")
            state: dict[str, torch.Tensor] = {}
            for shard in sorted(set(weight_map.values())):
                path = directory / shard
                state.update(
                    read_safetensors(path) if shard.endswith(".safetensors") else _tensors(read_torch(path), path)
                )
            return state, index
    raise CheckpointError(f"{directory}: no {' or '.join(WEIGHTS_NAMES)} beside config.json")


def _tensors(obj, path: Path) -> dict[str, torch.Tensor]:
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(f"{path}: not a state dict of tensors")
    return obj


def read(path: str | os.PathLike, *, image_size=None, config: Any = None) -> tuple[ViTConfig, dict[str, torch.Tensor]]:
    """(config, vitkit state dict) of an HF ViT directory; `config`: its config.json as already read."""
    directory = Path(path)
    hf = read_json(directory / CONFIG_NAME) if config is None else config
    if not says_hf(hf):
        found = hf.get("model_type") if isinstance(hf, dict) else None
        raise CheckpointError(
            f"{directory / CONFIG_NAME}: model_type is {found!r}, expected one of {', '.join(MODEL_TYPES)}"
        )
    preprocessor = read_json(directory / PREPROCESSOR_NAME) if (directory / PREPROCESSOR_NAME).is_file() else None
    state, weights = read_weights(directory)
    if hf["model_type"] == "deit":
        _refuse_deit_without_teacher(hf, state, directory)
    # a grayscale vitkit model written for RGB input: fold the luma weights back into one channel
    if hf.get("vitkit_luma"):
        kernel = f"{_prefix(state)}embeddings.patch_embeddings.projection.weight"
        if kernel in state and state[kernel].ndim == 4 and state[kernel].shape[1] == 3:
            state[kernel] = state[kernel].sum(dim=1, keepdim=True)
            hf = {**hf, "num_channels": 1}
            preprocessor = {
                k: v[:1] if k in ("image_mean", "image_std", "vitkit_background") and isinstance(v, list) else v
                for k, v in (preprocessor or {}).items()
            } or None
    config = config_from_hf(hf, state, preprocessor=preprocessor, image_size=image_size, source=directory)
    return config, to_vitkit(hf_rules(config, prefix=_prefix(state)), state, source=weights)


def _refuse_deit_without_teacher(hf: dict, state: dict, directory: Path) -> None:
    """A DeiT folder other than DeiTForImageClassificationWithTeacher: one line saying what vitkit reads."""
    if all(f"{head}.weight" in state for head in DEIT_HEADS):
        return
    kind = (
        (hf.get("architectures") or ["DeiTModel"])[0]
        if "classifier.weight" not in state
        else "DeiTForImageClassification"
    )
    raise CheckpointError(
        f"{directory}: a {kind} folder, whose distillation token has no head of its own; vitkit reads DeiT as "
        "DeiTForImageClassificationWithTeacher (a head on each token, logits averaged): save that class, or a timm "
        "deit_*_distilled_* state dict"
    )


def write(
    model: VisionTransformer, directory: str | os.PathLike, *, metadata: dict | None = None, metrics: list | None = None
) -> Path:
    """Write an HF directory: ViTForImageClassification with a head, ViTModel (pooler = pre-logits) without.

    Class names become id2label/label2id; the rest of `metadata` (crop, training data, without local paths) is kept
    in config.json under "vitkit". preprocessor_config.json also holds the model's background, which no image
    processor composites on, with what a user must do about it (`transparency_advice`) and the Python that does it.
    README.md is the model card (`card.model_card`, naming `metrics`)."""
    directory, c, metadata = Path(directory), model.config, publishable(metadata or {})
    if not isinstance(model, VisionTransformer):
        raise CheckpointError(
            f"{directory}: the Hugging Face format here is ViT's; save a BiT ResNet as vitkit, npz or timm"
        )
    refuse_conv_stem(c, directory, "Hugging Face ViT", "it has no hybrids")
    refuse_pieces(c, directory, "Hugging Face ViT", "vitkit", HEAD_PIECES)  # DINOv2's and CLIP's classes hold their own
    class_names = metadata.get("class_names")
    problems = [  # (the model has it, what, the formats that hold it)
        (c.backbone is not None, "hybrid (ResNet) models", "vitkit, npz or timm (.safetensors)"),
        (
            c.classifier != "token",
            f"classifier {c.classifier!r} (HF ViT pools the class token; SiglipForImageClassification is not written)",
            "vitkit, npz or timm (.safetensors), or train a model that converts with model.classifier=token",
        ),
        (c.pos_embed != "learned", f"pos_embed {c.pos_embed!r}", "vitkit"),
        (
            bool(c.num_classes and c.representation_size),
            "a pre-logits layer under a head (ViTForImageClassification has none)",
            "vitkit, npz or timm (.safetensors)",
        ),
        (
            c.distilled and not c.num_classes,
            "a distilled model without heads (DeiTForImageClassificationWithTeacher has one on each token)",
            "vitkit or timm (.safetensors)",
        ),
    ]
    for bad, what, holds in problems:
        if bad:
            raise CheckpointError(f"{directory}: Hugging Face ViT cannot hold {what}; save as {holds} instead")
    classify = c.num_classes > 0
    prefix = "deit." if c.distilled else "vit." if classify else ""
    tensors = from_vitkit(hf_rules(c, prefix=prefix), model.state_dict())
    if c.in_chans == 1:  # HF's pipeline feeds RGB: the patch embedding of a grayscale model reads luma from RGB instead
        kernel = f"{prefix}embeddings.patch_embeddings.projection.weight"
        tensors[kernel] = tensors[kernel] * torch.tensor(LUMA).view(1, 3, 1, 1)
    hf, preprocessor = _hf_config(c, metadata, class_names), _preprocessor_config(c, metadata.get("preprocess") or {})
    card = model_card(model, metadata, format="hf", metrics=metrics)
    refuse_foreign(directory)
    with atomic_dir(directory) as tmp:  # replaces an older directory as a whole
        write_safetensors(tmp / WEIGHTS_NAMES[0], tensors, metadata={"format": "pt"})
        write_json(tmp / PREPROCESSOR_NAME, preprocessor)
        write_json(tmp / CONFIG_NAME, hf)
        write_text(tmp / CARD_NAME, card)
    return directory


def _hf_config(c: ViTConfig, metadata: dict, class_names: list[str] | None) -> dict:
    """config.json of the HF directory: the architecture in HF's names, labels, and vitkit's metadata."""
    classify = c.num_classes > 0
    act = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "quick_gelu": "quick_gelu"}[c.mlp_act]
    square = c.image_size[0] == c.image_size[1] and c.patch_size[0] == c.patch_size[1]
    architecture = "ViTForImageClassification" if classify else "ViTModel"
    hf = {
        "architectures": ["DeiTForImageClassificationWithTeacher" if c.distilled else architecture],
        "model_type": "deit" if c.distilled else "vit",
        "hidden_size": c.width,
        "num_hidden_layers": c.depth,
        "num_attention_heads": c.num_heads,
        "intermediate_size": c.mlp_dim,
        "hidden_act": act,
        "hidden_dropout_prob": c.dropout,
        "attention_probs_dropout_prob": c.attn_dropout,
        "layer_norm_eps": c.layer_norm_eps,
        "image_size": c.image_size[0] if square else list(c.image_size),
        "patch_size": c.patch_size[0] if square else list(c.patch_size),
        "num_channels": 3,
        "qkv_bias": True,
        "encoder_stride": c.patch_size[0],
        "pooler_output_size": c.representation_size or c.width,
        "pooler_act": "tanh",
        "dtype": "float32",
        "vitkit": metadata,
    }
    if c.in_chans == 1:
        hf["vitkit_luma"] = list(LUMA)  # read back as the grayscale model it was
    if c.dynamic_img_size:  # HF's ViT takes other sizes when called with interpolate_pos_encoding=True
        hf["vitkit_dynamic_img_size"] = True
    return {**hf, **label_config(c, metadata, class_names)}


def label_config(c: ViTConfig, metadata: dict, class_names: list[str] | None) -> dict:
    """A classifying class's id2label, label2id and problem_type (the class names, else HF's LABEL_i); {} without a
    head."""
    if not c.num_classes:
        return {}
    labels = class_names or [f"LABEL_{i}" for i in range(c.num_classes)]
    hf = {"id2label": {str(i): name for i, name in enumerate(labels)}, "label2id": {n: i for i, n in enumerate(labels)}}
    if metadata.get("problem_type"):  # transformers picks its loss by it (multi-label: BCEWithLogitsLoss)
        hf["problem_type"] = metadata["problem_type"]
    return hf


def _preprocessor_config(c: ViTConfig, preprocess: dict) -> dict:
    """preprocessor_config.json with the model's size, mean and std (3 channels: RGB in) and the resize of
    `preprocess` (vitkit's record: crop_pct, crop_mode, interpolation). crop_mode squash: ViTImageProcessor, which
    resizes both sides to size / crop_pct and cuts the centre where that is larger; center, square: HF's
    CLIPImageProcessor, which resizes the shorter side to size / crop_pct and cuts the centre square, as vitkit does;
    center, not square: ViTImageProcessor resizing to the model's size (HF has no cover-the-box resize)."""
    h, w = c.image_size
    crop_pct = preprocess.get("crop_pct") or 1.0
    box = tuple(max(side, math.floor(side / crop_pct)) for side in (h, w))  # as vitkit.data.images.shorter_side
    if preprocess.get("crop_mode") == "squash":
        resize = {
            "image_processor_type": "ViTImageProcessor",
            "do_resize": True,
            "size": {"height": box[0], "width": box[1]},
            "do_center_crop": box != (h, w),
            "crop_size": {"height": h, "width": w},
        }
    elif h == w:
        resize = {
            "image_processor_type": "CLIPImageProcessor",
            "do_resize": True,
            "size": {"shortest_edge": box[0]},
            "do_center_crop": True,
            "crop_size": {"height": h, "width": w},
            "do_convert_rgb": True,
        }
    else:
        resize = {"image_processor_type": "ViTImageProcessor", "do_resize": True, "size": {"height": h, "width": w}}
    return {
        **resize,
        "resample": INTERPOLATIONS.index(preprocess.get("interpolation", "bilinear")),
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": list(c.mean) * (3 // c.in_chans),
        "image_std": list(c.std) * (3 // c.in_chans),
        # no image processor composites on a background: kept for vitkit and for the user, with what to do (and the
        # Python that does it) in the keys below; transformers keeps unknown keys as attributes of the processor
        "vitkit_background": list(c.background) * (3 // c.in_chans),
        "vitkit_transparency": transparency_advice(c, "vitkit_transparency_python"),
        "vitkit_transparency_python": transparency_snippet(c),
    }


def background_rgb(c: ViTConfig) -> tuple[int, int, int]:
    """The model's background as the 0-255 RGB colour a PIL image is composited on (a grayscale model's: its gray)."""
    values = [round(255 * v) for v in c.background]
    return tuple(values * 3 if len(values) == 1 else values)  # type: ignore[return-value]


def transparency_advice(c: ViTConfig, code: str) -> str:
    """What an HF export cannot say in an image processor, and what its user must do (as `code` names the Python that
    does it), in one sentence."""
    return (
        "transformers' image-classification pipeline drops transparency (it converts a path or PIL image to RGB, so a "
        "transparent RGBA or LA pixel shows the colour it stores; its processor puts a palette's on white), while this "
        f"model composites transparent pixels on its background, RGB {background_rgb(c)}; composite images on it before "
        f"calling the pipeline, as {code} does"
    )


def transparency_snippet(c: ViTConfig) -> str:
    """Python that gives the pipeline `pipe` a PIL image `image` as vitkit reads it (PIL's Image and ImageOps
    imported): upright by its EXIF tag, then composited on the background."""
    return (
        "rgba = ImageOps.exif_transpose(image).convert('RGBA'); "
        f"pipe(Image.alpha_composite(Image.new('RGBA', rgba.size, {(*background_rgb(c), 255)}), rgba).convert('RGB'))"
    )


def read_metadata(path: str | os.PathLike, *, config: Any = None) -> dict:
    """vitkit's record in config.json (`config`: as already read), else the class names of id2label (unless HF's
    placeholders LABEL_i) and the resize and crop of preprocessor_config.json (`preprocess_of`)."""
    hf = read_json(Path(path) / CONFIG_NAME) if config is None else config
    if isinstance(hf.get("vitkit"), dict) and hf["vitkit"]:
        return hf["vitkit"]
    labels = hf.get("id2label") or {}
    if not isinstance(labels, dict):
        values.refuse(
            Path(path) / CONFIG_NAME, "id2label", f"expected a mapping of class index to name, got {shown(labels)}"
        )
    names = [str(labels.get(str(i), "")) for i in range(len(labels))]
    metadata = {"class_names": names} if names and names != [f"LABEL_{i}" for i in range(len(names))] else {}
    if hf.get("problem_type") == MULTI_LABEL:  # a sigmoid per class (transformers' BCEWithLogitsLoss)
        metadata["problem_type"] = MULTI_LABEL
    processor = Path(path) / PREPROCESSOR_NAME
    preprocess = preprocess_of(read_json(processor), processor) if processor.is_file() else None
    return {**metadata, "preprocess": preprocess} if preprocess is not None else metadata


def preprocess_of(processor, where: str | os.PathLike = PREPROCESSOR_NAME) -> dict | None:
    """vitkit's "preprocess" record of an HF image processor (None for what is no processor's config): crop_pct
    (`crop_pct_of`; 1 where it cuts nothing), crop_mode (squash where it resizes to a height and width, center where
    it resizes the shortest edge) and interpolation (its resample; the processor's own default where it names none:
    bicubic for CLIP's, else bilinear)."""
    if not isinstance(processor, dict):
        return None
    size = processor.get("size")
    mode = "center" if isinstance(size, dict) and "shortest_edge" in size else "squash"
    resample = processor.get("resample")
    if isinstance(resample, int) and not isinstance(resample, bool) and 0 <= resample < len(INTERPOLATIONS):
        interpolation = INTERPOLATIONS[resample]
    else:
        interpolation = "bicubic" if "CLIP" in str(processor.get("image_processor_type", "")) else "bilinear"
    return {"crop_pct": crop_pct_of(processor, where) or 1.0, "crop_mode": mode, "interpolation": interpolation}


def crop_pct_of(processor, where: str | os.PathLike = PREPROCESSOR_NAME) -> float | None:
    """The crop_pct of an HF image processor that resizes, then cuts a centre crop: its own crop_pct (ConvNeXt's), else
    crop size / resized size (CLIP's shortest_edge, DeiT's height: 256 -> 224 is 0.875); None where it cuts none.
    Either in the domain of crop_pct (limits.DOMAINS), else a CheckpointError naming `where`."""
    if not isinstance(processor, dict):
        return None
    if processor.get("crop_pct") is not None:
        return float(values.number(processor, "crop_pct", None, domain="crop_pct", where=where))
    if not processor.get("do_center_crop"):
        return None

    def side(value, key: str) -> int | None:
        value = value.get(key, value.get("height")) if isinstance(value, dict) else value
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    crop, size = side(processor.get("crop_size"), "height"), side(processor.get("size"), "shortest_edge")
    if crop is None or size is None or crop > size:
        return None
    pct = crop / size
    problem = number_problem("crop_pct", pct, given=f"{crop} / {size}")
    if problem:
        values.refuse(where, "crop_size / size", problem)
    while math.floor(crop / pct) < size:  # as vitkit resizes (floor(size / crop_pct)), to exactly the processor's size
        pct = math.nextafter(pct, 0.0)
    return pct
