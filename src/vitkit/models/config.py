"""The architecture config: one frozen dataclass that rebuilds any vitkit model.

Named sizes (Table 1 of the paper and friends) live in `registry.py`; this file only says
what a config may hold and rejects anything impossible, naming the key.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from vitkit.errors import ConfigError, key_shown, shown
from vitkit.limits import number_problem

# "token": the class token (Eq. 4); "gap": the mean of the patch tokens; "map": multihead attention pooling, a learned
# probe attending over the patch tokens (big_vision, SigLIP)
CLASSIFIERS = ("token", "gap", "map")
POS_EMBEDS = ("learned", "learned_2d", "relative", "sincos2d", "none")
BIT_STEMS = ("bit", "small")
MLP_ACTS = ("gelu", "gelu_tanh", "quick_gelu")  # quick_gelu: x * sigmoid(1.702 x), OpenAI's CLIP
MLPS = ("plain", "swiglu")  # swiglu: SiLU(x W_gate) * (x W_value), then W_out (Shazeer 2020; DINOv2 giant)
# how learned E_pos is resampled to another grid of patches: "bilinear", corners onto corners (the paper's
# scipy.ndimage.zoom); "bicubic", corners not aligned (DINOv2's and CLIP's in transformers); "bicubic_antialias"
# (timm's, and DINOv2 with registers in transformers)
POS_RESAMPLES = ("bilinear", "bicubic", "bicubic_antialias")
MAX_REG_TOKENS = 256  # register tokens; Darcet et al. use 4 to 16
# the frozen feature a linear probe, k-NN or few-shot reads (models/pooling.py): "head", what the head reads (the class
# token, the mean of the patches or attention pooling: CLIP's and SigLIP's pooled output); "cls", the class token;
# "mean", the mean of the patch tokens; "cls_mean", the two concatenated (DINOv2's linear protocol)
FEATURE_POOLS = ("head", "cls", "mean", "cls_mean")
# what the head reads beside a class token (classifier=token): "classifier", the class token; "mean", the mean of the
# patch tokens (CLIPForImageClassification); "cls_mean", [class token; mean of the patch tokens], 2D wide
# (Dinov2ForImageClassification)
HEAD_POOLS = ("classifier", "mean", "cls_mean")
# how attention's weights start: "xavier", the official initialisation; "mimetic" (Trockman & Kolter 2023), each head's
# W_q W_k^T near the identity and W_v W_o near minus it, as trained ViTs have them: from scratch on small data it
# learns faster
ATTENTION_INITS = ("xavier", "mimetic")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """A finite int or float (not a bool, not NaN or infinity)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def size_pair(value: Any, key: str, *, domain: str = "image_size") -> tuple[int, int]:
    """A size as (H, W), the one parser of "H [W]": an int N is (N, N); a list or tuple of one or two ints is H [W],
    each in the `domain` of DOMAINS (image_size, patch_size). `key` names what gave it (image_size, --image-size) in
    the error."""
    if isinstance(value, int) and not isinstance(value, bool):
        pair = (value, value)
    elif isinstance(value, (tuple, list)) and len(value) in (1, 2):
        pair = (value[0], value[-1])
    else:
        raise ConfigError(f"{key}: expected an int or [height, width], got {shown(value)}")
    problem = number_problem(domain, pair, given=value)
    if problem:
        raise ConfigError(f"{key}: {problem}")
    return pair


def _per_channel(config: Any, key: str) -> tuple[float, ...]:
    """config.mean / config.std / config.background as one float per input channel (a single value is repeated),
    each in its key's domain (DOMAINS)."""
    problem = number_problem("in_chans", config.in_chans)
    if problem:
        raise ConfigError(f"in_chans: {problem}")
    value = getattr(config, key)
    values = (value,) if not isinstance(value, (list, tuple)) else tuple(value)
    problem = number_problem(key, values, given=value)
    if problem:
        raise ConfigError(f"{key}: {problem}")
    values = tuple(float(v) for v in values)
    if len(values) != config.in_chans:
        if len(set(values)) != 1:
            raise ConfigError(
                f"{key}: expected {config.in_chans} value{'s' * (config.in_chans != 1)} (one per input channel), "
                f"got {shown(value)}"
            )
        values = values[:1] * config.in_chans
    return values


def _put_input(config: Any) -> None:
    """config.mean, .std and .background as one float per input channel, each in its domain (DOMAINS)."""
    for key in INPUT_KEYS:
        object.__setattr__(config, key, _per_channel(config, key))


# how the model's input is made from pixels in [0, 1]: normalisation, and the colour that transparent pixels are
# composited on and that crops fill uncovered borders with (not in any weights file: every format keeps them beside)
INPUT_KEYS = ("mean", "std", "background")
WHITE = (1.0, 1.0, 1.0)


@dataclass(frozen=True)
class ResNetConfig:
    """BiT ResNet in front of a hybrid ViT (paper §3.1, App. B).

    Post-activation bottleneck units with weight-standardised convs and GroupNorm(32);
    `layers` holds the units per stage, () for the stem alone. Root width is 64 * width factor.
    """

    layers: tuple[int, ...] = (3, 4, 9)
    width: int = 64

    def __post_init__(self) -> None:
        if not isinstance(self.layers, (list, tuple)) or not all(_is_int(n) and n > 0 for n in self.layers):
            raise ConfigError(f"backbone.layers: expected a list of positive unit counts, got {shown(self.layers)}")
        layers = tuple(self.layers)
        if not _is_int(self.width) or self.width <= 0 or self.width % 32:
            raise ConfigError(
                f"backbone.width: expected a positive multiple of 32 (GroupNorm has 32 groups), got {shown(self.width)}"
            )
        object.__setattr__(self, "layers", layers)

    @property
    def stride(self) -> int:
        """Total stride: stem conv /2 and max-pool /2, then /2 for every stage after the first."""
        return 4 * 2 ** max(len(self.layers) - 1, 0)

    @property
    def out_channels(self) -> int:
        if not self.layers:
            return self.width
        return 4 * self.width * 2 ** (len(self.layers) - 1)


MAX_STEM_CONVS = 8  # a stride of 256; the early-convolution stems have 4 or 5
MAX_STEM_CHANNELS = 4096  # per conv; the early-convolution stems have a few hundred


@dataclass(frozen=True)
class ConvStemConfig:
    """A convolutional stem in front of a hybrid ViT (Xiao et al. 2021, "Early Convolutions Help Transformers See
    Better"): one 3x3 conv (padding 1, no bias) + BatchNorm + ReLU per entry of `convs`, its output channels, each of
    stride 2 unless `strides` says otherwise (1 or 2 per conv: a stride-1 conv adds depth at its resolution, as in a
    small CNN). The ViT's patch embedding (a 1x1 conv for patch_size 1) then makes the tokens."""

    convs: tuple[int, ...] = (24, 48)
    strides: tuple[int, ...] | None = None  # None: 2 for every conv

    def __post_init__(self) -> None:
        convs = self.convs
        if (
            not isinstance(convs, (list, tuple))
            or not 0 < len(convs) <= MAX_STEM_CONVS
            or not all(_is_int(n) and 0 < n <= MAX_STEM_CHANNELS for n in convs)
        ):
            raise ConfigError(
                f"backbone.convs: expected a list of 1 to {MAX_STEM_CONVS} output channel counts (each 1 to "
                f"{MAX_STEM_CHANNELS}), one per 3x3 conv, e.g. [24, 48], got {shown(convs)}"
            )
        object.__setattr__(self, "convs", tuple(convs))
        strides = self.strides
        if strides is None:
            return
        if (
            not isinstance(strides, (list, tuple))
            or len(strides) != len(convs)
            or not all(_is_int(n) and n in (1, 2) for n in strides)
        ):
            raise ConfigError(
                f"backbone.strides: expected one stride (1 or 2) per entry of backbone.convs ({len(convs)}), "
                f"e.g. {[1, *([2] * (len(convs) - 1))]}, got {shown(strides)}"
            )
        object.__setattr__(self, "strides", tuple(strides))

    @property
    def conv_strides(self) -> tuple[int, ...]:
        """Each conv's stride."""
        return self.strides or (2,) * len(self.convs)

    @property
    def stride(self) -> int:
        """Total stride: the product of the convs' strides."""
        return math.prod(self.conv_strides)

    @property
    def out_channels(self) -> int:
        return self.convs[-1]


Backbone = ResNetConfig | ConvStemConfig
RESNET_KEYS = ("layers", "width")


def backbone_config(value: Any) -> Backbone | None:
    """`model.backbone` as stored or written: a mapping with `convs` is a conv stem, one with `layers`/`width` a BiT
    ResNet; a config object or None as it is."""
    if value is None or isinstance(value, (ResNetConfig, ConvStemConfig)):
        return value
    if not isinstance(value, dict):
        raise ConfigError(
            "backbone: expected null or a mapping: {layers: [...], width: N} for a BiT ResNet, {convs: [...]} for a "
            f"conv stem; got {shown(value)}"
        )
    known = ("convs", "strides", *RESNET_KEYS)
    for key in value:
        if key not in known:
            raise ConfigError(f"backbone.{key_shown(key)}: unknown key; known keys are {', '.join(sorted(known))}")
    resnet = [key for key in RESNET_KEYS if key in value]
    if ("convs" in value) == bool(resnet):
        raise ConfigError(
            f"backbone: give either convs (a conv stem) or layers and width (a BiT ResNet), got "
            f"{', '.join(value) or 'an empty mapping'}"
        )
    return ConvStemConfig(**value) if "convs" in value else ResNetConfig(**value)


def check_distilled(config: Any) -> None:
    """`distilled` is a bool, and a distilled model is DeiT's: a class token and no pre-logits layer."""
    if not isinstance(config.distilled, bool):
        raise ConfigError(f"distilled: expected true or false, got {shown(config.distilled)}")
    if config.distilled and config.classifier != "token":
        raise ConfigError(
            f"distilled: the distillation token sits beside a class token; set classifier=token (got {config.classifier!r})"
        )
    if config.distilled and config.representation_size is not None:
        raise ConfigError("distilled: DeiT's two heads read the tokens directly; set representation_size=null")


MAX_DEPTH = 1_000  # layers; ViT-22B has 48
MAX_WEIGHTS = 10**11  # about 4x ViT-22B


@dataclass(frozen=True)
class ViTConfig:
    """Everything that defines a VisionTransformer, its input and its preprocessing."""

    image_size: tuple[int, int] = (224, 224)
    patch_size: tuple[int, int] = (16, 16)  # on the backbone's feature map for hybrids
    in_chans: int = 3
    num_classes: int = 1000  # 0: no head, forward returns pooled features
    width: int = 768  # hidden size D
    depth: int = 12  # layers L; 0 with a backbone and classifier gap or map: the backbone's map pooled, a CNN
    mlp_dim: int = 3072
    num_heads: int = 12
    classifier: str = "token"  # "token" (class token, Eq. 4) or "gap" (global average pooling)
    representation_size: int | None = None  # pre-logits layer (Linear + tanh), pre-training only
    # App. D.4: "learned" (1D, Eq. 1), "learned_2d" (row + column embeddings of D/2 each, concatenated),
    # "relative" (learned attention biases per head over 2D offsets), "sincos2d" (fixed) or "none"
    pos_embed: str = "learned"
    dropout: float = 0.0
    attn_dropout: float = 0.0
    drop_path: float = 0.0  # stochastic depth rate of the last block (linear in depth)
    layer_norm_eps: float = 1e-6
    mlp_act: str = "gelu"  # "gelu" (exact), "gelu_tanh" (the official Flax models' default) or "quick_gelu" (CLIP)
    # The family pieces (each one value with one meaning; a family is a row of them, see registry.FAMILIES):
    mlp: str = "plain"  # "plain" (Linear, act, Linear) or "swiglu" (gated; mlp_dim is the gated width)
    layer_scale: float | None = None  # LayerScale's initial value (CaiT, DeiT III, DINOv2); null: none
    reg_tokens: int = 0  # register tokens after the class token, without position (Darcet et al. 2024)
    pre_norm: bool = False  # a LayerNorm on z_0, before the first block (CLIP)
    patch_bias: bool = True  # the patch embedding E has a bias (CLIP's has none)
    pos_embed_resample: str = "bilinear"  # POS_RESAMPLES: how learned E_pos meets another grid
    feature_pool: str = "head"  # FEATURE_POOLS: the frozen feature linear-probe, knn and fewshot read
    head_pool: str = "classifier"  # HEAD_POOLS: what the head reads beside a class token
    final_norm: bool = True  # the LayerNorm after the last block (CLIPForImageClassification's head reads none)
    backbone: Backbone | None = None  # hybrid: patches come from a CNN feature map (BiT ResNet or conv stem)
    # any input size whose sides are multiples of the patch size: E_pos resampled to its grid (cached per grid)
    dynamic_img_size: bool = False
    mean: tuple[float, ...] = field(default=(0.5, 0.5, 0.5))  # inputs scaled to [-1, 1]
    std: tuple[float, ...] = field(default=(0.5, 0.5, 0.5))
    # transparent pixels (RGBA, LA, palette) are composited on this colour when an image is decoded, and crops fill
    # what they uncover (padded crop) with it: one value in [0, 1] per input channel, or one for all; white
    background: tuple[float, ...] = field(default=WHITE)
    # DeiT's distillation token (models/distill.py): a second token after the class token with its own head, trained
    # on a teacher's labels (train.teacher); in eval the two heads' logits averaged
    distilled: bool = False
    attention_init: str = "xavier"  # ATTENTION_INITS: a model's fresh weights only (a checkpoint's are read)

    def __post_init__(self) -> None:
        self._put("image_size", size_pair(self.image_size, "image_size"))
        self._put("patch_size", size_pair(self.patch_size, "patch_size", domain="patch_size"))
        self._check_sizes()
        self._check_options()
        self._put("backbone", backbone_config(self.backbone))
        if self.pos_embed == "sincos2d" and self.width % 4:
            raise ConfigError(f"pos_embed: sincos2d needs a width divisible by 4, got {self.width}")
        if self.pos_embed == "learned_2d" and self.width % 2:
            raise ConfigError(f"pos_embed: learned_2d needs an even width (D/2 per axis), got {self.width}")
        _put_input(self)
        self._check_patch_grid()

    def _put(self, key: str, value: Any) -> None:
        object.__setattr__(self, key, value)

    def _check_sizes(self) -> None:
        """The layer sizes: positive integers, within the limits, heads dividing the width."""
        for key in ("in_chans", "width", "depth", "mlp_dim", "num_heads"):
            value = getattr(self, key)
            if key == "depth" and value == 0 and self.backbone is not None and self.classifier != "token":
                continue  # no layer: the backbone's map, projected and pooled into the head (a CNN)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                zero = " (0 only with model.backbone and classifier gap or map: a CNN)" if key == "depth" else ""
                raise ConfigError(f"{key}: expected a positive integer{zero}, got {shown(value)}")
        if not _is_int(self.num_classes) or self.num_classes < 0:
            raise ConfigError(f"num_classes: expected an integer >= 0, got {shown(self.num_classes)}")
        if self.depth > MAX_DEPTH:
            raise ConfigError(
                f"depth: {self.depth} layers is over the limit of {MAX_DEPTH:,} (the paper's largest ViT has 32); "
                "the config is damaged or not a ViT's"
            )
        weights = self.depth * (4 * self.width**2 + 2 * self.width * self.mlp_dim) + self.num_classes * self.width
        if weights > MAX_WEIGHTS:  # built before any weight is read: memory for what no real ViT needs
            raise ConfigError(
                f"width {self.width}, mlp_dim {self.mlp_dim}, depth {self.depth} and num_classes {self.num_classes} make a "
                f"model of about {weights:.2g} weights, over the limit of {MAX_WEIGHTS:.0e}; the config is damaged or not a ViT's"
            )
        if self.width % self.num_heads:
            raise ConfigError(f"num_heads: {self.num_heads} heads do not divide width {self.width}")
        if self.representation_size is not None and (
            not _is_int(self.representation_size) or self.representation_size <= 0
        ):
            raise ConfigError(
                f"representation_size: expected a positive integer or null, got {shown(self.representation_size)}"
            )

    def _check_options(self) -> None:
        """The named choices and the rates."""
        for key, allowed in (
            ("classifier", CLASSIFIERS),
            ("pos_embed", POS_EMBEDS),
            ("mlp_act", MLP_ACTS),
            ("mlp", MLPS),
            ("pos_embed_resample", POS_RESAMPLES),
            ("feature_pool", FEATURE_POOLS),
            ("head_pool", HEAD_POOLS),
            ("attention_init", ATTENTION_INITS),
        ):
            if getattr(self, key) not in allowed:
                raise ConfigError(f"{key}: expected one of {', '.join(allowed)}, got {shown(getattr(self, key))}")
        for key in ("dropout", "attn_dropout", "drop_path"):
            value = getattr(self, key)
            if not _is_number(value) or not 0.0 <= value < 1.0:
                raise ConfigError(f"{key}: expected a rate in [0, 1), got {shown(value)}")
        problem = number_problem("layer_norm_eps", self.layer_norm_eps)
        if problem:
            raise ConfigError(f"layer_norm_eps: {problem}")
        for key in ("dynamic_img_size", "pre_norm", "patch_bias", "final_norm"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"{key}: expected true or false, got {shown(getattr(self, key))}")
        self._check_pieces()

    def _check_pieces(self) -> None:
        """Layer scale, registers and the distillation token."""
        scale = self.layer_scale
        if scale is not None and (not _is_number(scale) or scale <= 0):
            raise ConfigError(f"layer_scale: expected a positive initial value (e.g. 1e-5) or null, got {shown(scale)}")
        if not _is_int(self.reg_tokens) or not 0 <= self.reg_tokens <= MAX_REG_TOKENS:
            raise ConfigError(
                f"reg_tokens: expected an integer from 0 to {MAX_REG_TOKENS} (register tokens), got "
                f"{shown(self.reg_tokens)}"
            )
        check_distilled(self)
        if self.feature_pool in ("cls", "cls_mean") and self.classifier != "token":
            raise ConfigError(
                f"feature_pool: {self.feature_pool} reads the class token, and classifier={self.classifier} has none; "
                "use head or mean"
            )
        if self.head_pool != "classifier" and (
            self.classifier != "token" or self.distilled or self.representation_size is not None
        ):
            raise ConfigError(
                f"head_pool: {self.head_pool} pools beside one class token under a plain head; it needs classifier=token, "
                "distilled=false and representation_size=null (or use head_pool=classifier)"
            )

    def _check_patch_grid(self) -> None:
        """The image divides into whole patches (of the backbone's feature map for hybrids)."""
        stride = self.total_patch_size
        for axis, (size, step) in enumerate(zip(self.image_size, stride)):
            if size % step:
                name = "height" if axis == 0 else "width"
                raise ConfigError(
                    f"patch_size: image {name} {size} is not divisible by the patch size {step}"
                    + (" (backbone stride x patch size)" if self.backbone else "")
                    + "; choose an image_size that is a multiple of it, e.g. "
                    + " or ".join(str(m) for m in (size // step * step, size // step * step + step) if m > 0)
                )

    @property
    def feature_stride(self) -> int:
        """Stride of the map the patch embedding sees: 1 for a plain ViT."""
        return self.backbone.stride if self.backbone else 1

    @property
    def total_patch_size(self) -> tuple[int, int]:
        """Image pixels per token along (h, w): the patch size times the backbone stride."""
        s = self.feature_stride
        return (self.patch_size[0] * s, self.patch_size[1] * s)

    @property
    def grid_size(self) -> tuple[int, int]:
        """The (h, w) grid of patches; N = h * w."""
        ph, pw = self.total_patch_size
        return (self.image_size[0] // ph, self.image_size[1] // pw)

    @property
    def num_patches(self) -> int:
        gh, gw = self.grid_size
        return gh * gw

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches: the class token, DeiT's distillation token where there is one, the registers."""
        return self.pos_prefix_tokens + self.reg_tokens

    @property
    def pos_prefix_tokens(self) -> int:
        """Prefix tokens that E_pos covers: the class and distillation tokens (registers carry no position)."""
        return (1 if self.classifier == "token" else 0) + int(self.distilled)

    def replace(self, **changes: Any) -> ViTConfig:
        """A copy with some fields changed; unknown keys are an error naming the key."""
        return dataclasses.replace(self, **_known(changes, ViTConfig, "model"))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tuples become lists). A conv stem of stride-2 convs only is written without `strides`,
        and the official initialisation without `attention_init`, as before those keys were."""
        data = dataclasses.asdict(self)
        if isinstance(self.backbone, ConvStemConfig) and self.backbone.strides is None:
            del data["backbone"]["strides"]
        if self.attention_init == "xavier":
            del data["attention_init"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ViTConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"model config: expected a mapping, got {type(data).__name__}")
        return cls(**_known(data, cls, "model"))


@dataclass(frozen=True)
class BiTConfig:
    """A BiT ResNet-v2 classifier (Kolesnikov et al. 2020), the paper's baseline (Fig. 3-5, Table 2).

    Pre-activation bottleneck units, weight-standardised convs and GroupNorm(32) everywhere. Stage s
    has `layers[s]` units of 4 * width * width_factor * 2^s output channels (stride 2 from the second
    stage on, on the 3x3 conv). stem "bit": 7x7/2 conv and padded 3x3/2 max-pool (the release);
    "small": one 3x3/1 conv, no pool, for 28-32 px images.
    """

    layers: tuple[int, ...] = (3, 4, 6, 3)
    width_factor: int = 1
    width: int = 64  # root width before the width factor
    stem: str = "bit"
    image_size: tuple[int, int] = (224, 224)
    in_chans: int = 3
    num_classes: int = 1000  # 0: no head, forward returns pooled features
    mean: tuple[float, ...] = field(default=(0.5, 0.5, 0.5))  # BiT scales inputs to [-1, 1] too
    std: tuple[float, ...] = field(default=(0.5, 0.5, 0.5))
    background: tuple[float, ...] = field(default=WHITE)  # as ViTConfig's

    ARCH = "bit"  # the tag that tells a stored BiT config from a ViT one (not a field)

    def __post_init__(self) -> None:
        object.__setattr__(self, "image_size", size_pair(self.image_size, "image_size"))
        layers = tuple(self.layers) if isinstance(self.layers, (list, tuple)) else self.layers
        if (
            not isinstance(layers, tuple)
            or not layers
            or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in layers)
        ):
            raise ConfigError(f"layers: expected a list of positive unit counts per stage, got {self.layers!r}")
        object.__setattr__(self, "layers", layers)
        for key in ("width_factor", "width", "in_chans"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{key}: expected a positive integer, got {value!r}")
        if (self.width * self.width_factor) % 32:
            raise ConfigError(
                f"width: width x width_factor must be a multiple of 32 (GroupNorm has 32 groups), got {self.width} x {self.width_factor}"
            )
        if not isinstance(self.num_classes, int) or isinstance(self.num_classes, bool) or self.num_classes < 0:
            raise ConfigError(f"num_classes: expected an integer >= 0, got {self.num_classes!r}")
        if self.stem not in BIT_STEMS:
            raise ConfigError(f"stem: expected one of {', '.join(BIT_STEMS)}, got {self.stem!r}")
        _put_input(self)

    @property
    def depth(self) -> int:
        """Weight layers: three convs per unit, the stem conv and the head (R50 for (3, 4, 6, 3))."""
        return 3 * sum(self.layers) + 2

    @property
    def num_features(self) -> int:
        """Channels of the final feature map, which the head reads."""
        return 4 * self.width * self.width_factor * 2 ** (len(self.layers) - 1)

    @property
    def stride(self) -> int:
        return (4 if self.stem == "bit" else 1) * 2 ** (len(self.layers) - 1)

    def replace(self, **changes: Any) -> BiTConfig:
        return dataclasses.replace(self, **_known(changes, BiTConfig, "model"))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with the architecture tag."""
        return {"arch": self.ARCH, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BiTConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"model config: expected a mapping, got {type(data).__name__}")
        return cls(**_known({k: v for k, v in data.items() if k != "arch"}, cls, "model"))


ModelConfig = ViTConfig | BiTConfig


def config_from_dict(data: dict[str, Any]) -> ModelConfig:
    """A stored model config: BiT when tagged "arch": "bit", else a ViT (untagged, as vitkit always wrote them)."""
    if isinstance(data, dict) and data.get("arch", "vit") == BiTConfig.ARCH:
        return BiTConfig.from_dict(data)
    if isinstance(data, dict) and data.get("arch", "vit") != "vit":
        raise ConfigError(f"model.arch: expected vit or bit, got {data['arch']!r}")
    return ViTConfig.from_dict({k: v for k, v in data.items() if k != "arch"} if isinstance(data, dict) else data)


# timm's constructor names of the same fields, so code written for timm passes them as they are
# (timm.create_model(name, drop_path_rate=0.1)); None, as timm reads it, is the default
TIMM_NAMES = {
    "drop_path_rate": "drop_path",
    "drop_rate": "dropout",
    "attn_drop_rate": "attn_dropout",
    "img_size": "image_size",
    "init_values": "layer_scale",
    "act_layer": "mlp_act",
}

# timm's constructor arguments that vitkit spells otherwise, and how: said where one is given
TIMM_HINTS = {
    "global_pool": "classifier: token, gap (the mean of the patch tokens, no class token) or map",
    "class_token": "classifier=gap or classifier=map for none",
    "mlp_ratio": "mlp_dim, the MLP's width (mlp_ratio x width)",
    "embed_dim": "width, with mlp_dim (the MLP's own width, which does not follow it)",
    "qkv_bias": "none: attention always has biases",
    "no_embed_class": "none: the class token always has a position (timm's files without one read as they are)",
    "fc_norm": "none: gap pools after the final LayerNorm, as the paper's",
}


def _known(data: dict[str, Any], cls: type, where: str) -> dict[str, Any]:
    """`data` with timm's names as the fields they name (`TIMM_NAMES`) if every key is a field of `cls`; otherwise a
    ConfigError naming the stranger."""
    names = {f.name for f in dataclasses.fields(cls)}
    known = {}
    for key, value in data.items():
        own = TIMM_NAMES.get(key) if isinstance(key, str) else None
        if own is not None and own in data:
            raise ConfigError(f"{where}.{key}: timm's name of {own}, which is given too; give one of them")
        if own is not None and own not in names and value:
            raise ConfigError(f"{where}.{key}: this model has no {own} ({cls.__name__} has none); leave it out or 0")
        if own is not None and (own not in names or value is None):
            continue
        if (own or key) not in names and key in TIMM_HINTS:
            raise ConfigError(f"{where}.{key}: timm's argument; vitkit's is {TIMM_HINTS[key]}")
        if (own or key) not in names:
            raise ConfigError(f"{where}.{key_shown(key)}: unknown key; known keys are {', '.join(sorted(names))}")
        known[own or key] = value
    return known
