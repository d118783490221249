"""A pure-NumPy (float64) forward of the official Flax ViT, written from its semantics, and official-layout test arrays.

The forward follows google-research/vision_transformer (models_vit.py, models_resnet.py) and
big_vision (models/vit.py) as described in PAPER.md: NHWC images, Flax Dense kernels (in, out),
attention kernels (D, heads, head_dim) and (heads, head_dim, D), tanh-GELU, LayerNorm eps 1e-6,
weight-standardised 'SAME' convolutions, GroupNorm(32, eps 1e-6), 'SAME' max-pool, GAP after the
final LayerNorm. It knows nothing of vitkit: it reads the arrays by their names in the file.

`official_arrays` builds the parameter arrays with the names, shapes and dtype (float32) of the
release files, in any of the layouts in the wild, filled with arbitrary values.
"""

from __future__ import annotations

import math

import numpy as np

PRE_LINEN = {"attn": "MultiHeadDotProductAttention_1", "ln1": "LayerNorm_0", "ln2": "LayerNorm_2", "mlp": "MlpBlock_3"}
LINEN = {"attn": "MultiHeadDotProductAttention_0", "ln1": "LayerNorm_0", "ln2": "LayerNorm_1", "mlp": "MlpBlock_0"}


# -- layers ------------------------------------------------------------------------------
def layer_norm(x, scale, bias, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def same_pads(size, kernel, stride):
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def conv(x, kernel, stride, padding):
    """NHWC x HWIO convolution, 'SAME' (TensorFlow's asymmetric padding) or 'VALID'."""
    kh, kw = kernel.shape[:2]
    if padding == "SAME":
        x = np.pad(x, ((0, 0), same_pads(x.shape[1], kh, stride), same_pads(x.shape[2], kw, stride), (0, 0)))
    oh, ow = (x.shape[1] - kh) // stride + 1, (x.shape[2] - kw) // stride + 1
    out = np.zeros((x.shape[0], oh, ow, kernel.shape[3]))
    for i in range(kh):
        for j in range(kw):
            out += x[:, i : i + stride * oh : stride, j : j + stride * ow : stride, :] @ kernel[i, j]
    return out


def std_conv(x, kernel, stride=1):
    kernel = kernel - kernel.mean(axis=(0, 1, 2))
    kernel = kernel / (kernel.std(axis=(0, 1, 2)) + 1e-5)
    return conv(x, kernel, stride, "SAME")


def group_norm(x, scale, bias, groups=32, eps=1e-6):
    n, h, w, c = x.shape
    g = x.reshape(n, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = ((g - mean) ** 2).mean(axis=(1, 2, 4), keepdims=True)
    g = (g - mean) / np.sqrt(var + eps)
    return g.reshape(n, h, w, c) * scale.reshape(-1) + bias.reshape(-1)


def max_pool_same(x, window=3, stride=2):
    x = np.pad(
        x,
        ((0, 0), same_pads(x.shape[1], window, stride), same_pads(x.shape[2], window, stride), (0, 0)),
        constant_values=-np.inf,
    )
    oh, ow = (x.shape[1] - window) // stride + 1, (x.shape[2] - window) // stride + 1
    views = [
        x[:, i : i + stride * oh : stride, j : j + stride * ow : stride, :]
        for i in range(window)
        for j in range(window)
    ]
    return np.max(views, axis=0)


def relu(x):
    return np.maximum(x, 0)


# -- the official model ------------------------------------------------------------------
def forward(arrays: dict, images_nhwc: np.ndarray, *, num_heads: int, prefix: str = "", names=PRE_LINEN) -> np.ndarray:
    """Logits (or pooled features without a head) of the official model holding `arrays`."""
    p = {k[len(prefix) :]: np.asarray(v, dtype=np.float64) for k, v in arrays.items() if k.startswith(prefix)}
    x = np.asarray(images_nhwc, dtype=np.float64)
    if "conv_root/kernel" in p:
        x = relu(group_norm(std_conv(x, p["conv_root/kernel"], 2), p["gn_root/scale"], p["gn_root/bias"]))
        x = max_pool_same(x)
        s = 1
        while f"block{s}/unit1/conv1/kernel" in p:
            u = 1
            while f"block{s}/unit{u}/conv1/kernel" in p:
                x = _unit(p, f"block{s}/unit{u}/", x, stride=2 if s > 1 and u == 1 else 1)
                u += 1
            s += 1
    ph, pw = p["embedding/kernel"].shape[:2]
    assert ph == pw
    x = conv(x, p["embedding/kernel"], ph, "VALID") + p["embedding/bias"]
    n, h, w, d = x.shape
    x = x.reshape(n, h * w, d)
    if "pos_embedding" in p:  # big_vision: position embedding before the class token
        x = x + p["pos_embedding"]
    if "cls" in p:
        x = np.concatenate([np.tile(p["cls"], (n, 1, 1)), x], axis=1)
    if "Transformer/posembed_input/pos_embedding" in p:
        x = x + p["Transformer/posembed_input/pos_embedding"]
    i = 0
    while f"Transformer/encoderblock_{i}/{names['ln1']}/scale" in p:
        x = _block(p, f"Transformer/encoderblock_{i}/", x, num_heads, names)
        i += 1
    x = layer_norm(x, p["Transformer/encoder_norm/scale"], p["Transformer/encoder_norm/bias"])
    x = x[:, 0] if "cls" in p else x.mean(axis=1)
    if "pre_logits/kernel" in p:
        x = np.tanh(x @ p["pre_logits/kernel"] + p["pre_logits/bias"])
    if "head/kernel" in p:
        x = x @ p["head/kernel"] + p["head/bias"]
    return x


def _unit(p, b, x, stride):
    residual = x
    if f"{b}conv_proj/kernel" in p:
        residual = group_norm(
            std_conv(x, p[f"{b}conv_proj/kernel"], stride), p[f"{b}gn_proj/scale"], p[f"{b}gn_proj/bias"]
        )
    y = relu(group_norm(std_conv(x, p[f"{b}conv1/kernel"]), p[f"{b}gn1/scale"], p[f"{b}gn1/bias"]))
    y = relu(group_norm(std_conv(y, p[f"{b}conv2/kernel"], stride), p[f"{b}gn2/scale"], p[f"{b}gn2/bias"]))
    y = group_norm(std_conv(y, p[f"{b}conv3/kernel"]), p[f"{b}gn3/scale"], p[f"{b}gn3/bias"])
    return relu(residual + y)


def _block(p, b, x, num_heads, names):
    y = layer_norm(x, p[f"{b}{names['ln1']}/scale"], p[f"{b}{names['ln1']}/bias"])
    a = f"{b}{names['attn']}/"
    q, k, v = (
        np.einsum("btd,dnh->btnh", y, p[f"{a}{n}/kernel"]) + p[f"{a}{n}/bias"] for n in ("query", "key", "value")
    )
    logits = np.einsum("bqnh,bknh->bnqk", q, k) / math.sqrt(q.shape[-1])
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    y = np.einsum("bnqk,bknh->bqnh", probs, v)
    x = x + np.einsum("bqnh,nhd->bqd", y, p[f"{a}out/kernel"]) + p[f"{a}out/bias"]
    y = layer_norm(x, p[f"{b}{names['ln2']}/scale"], p[f"{b}{names['ln2']}/bias"])
    m = f"{b}{names['mlp']}/"
    y = gelu_tanh(y @ p[f"{m}Dense_0/kernel"] + p[f"{m}Dense_0/bias"])
    return x + y @ p[f"{m}Dense_1/kernel"] + p[f"{m}Dense_1/bias"]


# -- arrays as the release files lay them out -----------------------------------------------
def official_arrays(
    *,
    seed: int = 0,
    width: int = 32,
    depth: int = 2,
    heads: int = 2,
    mlp: int = 64,
    patch: int = 4,
    grid: tuple[int, int] = (4, 4),
    in_chans: int = 3,
    classifier: str = "token",
    representation: int | None = None,
    classes: int = 5,
    resnet: tuple[tuple[int, ...], int] | None = None,
    names=PRE_LINEN,
    prefix: str = "",
    big_vision_posemb: bool = False,
    groupnorm_4d: bool = False,
) -> dict[str, np.ndarray]:
    """Arbitrary float32 weights under the official names and shapes. `resnet` = (units per stage, root width)."""
    rng = np.random.default_rng(seed)
    a: dict[str, np.ndarray] = {}

    def put(key, *shape, scale=0.3, offset=0.0):
        a[prefix + key] = (offset + scale * rng.standard_normal(shape)).astype(np.float32)

    def gn(key, c):
        shape = (1, 1, 1, c) if groupnorm_4d else (c,)
        put(f"{key}/scale", *shape, offset=1.0)
        put(f"{key}/bias", *shape, scale=0.1)

    embed_in = in_chans
    if resnet is not None:
        layers, root = resnet
        put("conv_root/kernel", 7, 7, in_chans, root)
        gn("gn_root", root)
        chans = root
        for s, units in enumerate(layers):
            mid = root * 2**s
            for u in range(units):
                b = f"block{s + 1}/unit{u + 1}/"
                if u == 0:
                    put(f"{b}conv_proj/kernel", 1, 1, chans, 4 * mid)
                    gn(f"{b}gn_proj", 4 * mid)
                for conv_name, gn_name, k, cin, cout in (
                    ("conv1", "gn1", 1, chans, mid),
                    ("conv2", "gn2", 3, mid, mid),
                    ("conv3", "gn3", 1, mid, 4 * mid),
                ):
                    put(f"{b}{conv_name}/kernel", k, k, cin, cout)
                    gn(f"{b}{gn_name}", cout)
                chans = 4 * mid
        embed_in = chans
    put("embedding/kernel", patch, patch, embed_in, width, scale=0.2)
    put("embedding/bias", width, scale=0.1)
    tokens = grid[0] * grid[1]
    if classifier == "token":
        put("cls", 1, 1, width)
    if big_vision_posemb:
        put("pos_embedding", 1, tokens, width)
    else:
        put("Transformer/posembed_input/pos_embedding", 1, tokens + (classifier == "token"), width)
    hd = width // heads
    for i in range(depth):
        b = f"Transformer/encoderblock_{i}/"
        for ln in ("ln1", "ln2"):
            put(f"{b}{names[ln]}/scale", width, scale=0.2, offset=1.0)
            put(f"{b}{names[ln]}/bias", width, scale=0.1)
        at = f"{b}{names['attn']}/"
        for n in ("query", "key", "value"):
            put(f"{at}{n}/kernel", width, heads, hd, scale=width**-0.5)
            put(f"{at}{n}/bias", heads, hd, scale=0.1)
        put(f"{at}out/kernel", heads, hd, width, scale=width**-0.5)
        put(f"{at}out/bias", width, scale=0.1)
        put(f"{b}{names['mlp']}/Dense_0/kernel", width, mlp, scale=width**-0.5)
        put(f"{b}{names['mlp']}/Dense_0/bias", mlp, scale=0.1)
        put(f"{b}{names['mlp']}/Dense_1/kernel", mlp, width, scale=mlp**-0.5)
        put(f"{b}{names['mlp']}/Dense_1/bias", width, scale=0.1)
    put("Transformer/encoder_norm/scale", width, scale=0.2, offset=1.0)
    put("Transformer/encoder_norm/bias", width, scale=0.1)
    if representation:
        put("pre_logits/kernel", width, representation, scale=width**-0.5)
        put("pre_logits/bias", representation, scale=0.1)
    if classes:
        put("head/kernel", representation or width, classes, scale=0.5)
        put("head/bias", classes, scale=0.1)
    return a
