"""Parity of vitkit's .npz loader with the official Flax ViT, in fp32.

Builds the official architecture (google-research/vision_transformer models_vit.py / models_resnet.py
semantics) with flax.linen, here written anew, initialises it, overwrites every parameter with
arbitrary values, saves the parameters as an .npz laid out like the release files (pre-linen block
names; hybrids with GroupNorm parameters as (1, 1, 1, C)), loads that file with
`vitkit.load_pretrained`, and compares the logits of both on the same images.

Needs jax and flax, which vitkit does not depend on:
    pip install --target /tmp/flaxpkgs "flax>=0.12,<0.13" jax
    PYTHONPATH=src:/tmp/flaxpkgs python benchmarks/npz_flax_parity.py
Prints one line per case and the worst relative error (max |diff| / max |flax|); exits 1 above 1e-4.
--results also writes the rows npz-flax-worst-SLUG, npz-flax-token-SLUG, npz-flax-gap-SLUG and
npz-flax-hybrid-r22-SLUG of benchmarks/results/checkpoint_parity.csv through benchmarks/rows.py (SLUG: the machine
kind); off by default so a quick run doesn't overwrite published figures. Then run `python benchmarks/render.py`.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
import torch
from flax import linen as nn
from flax.traverse_util import flatten_dict, unflatten_dict

import vitkit

jax.config.update("jax_default_matmul_precision", "highest")


# -- the official architecture in flax.linen ---------------------------------------------------
class StdConv(nn.Conv):
    """Conv whose kernel is weight-standardised over (H, W, in): (w - mean) / (std + 1e-5)."""

    def param(self, name, *args, **kwargs):
        value = super().param(name, *args, **kwargs)
        if name == "kernel":
            value = value - jnp.mean(value, axis=(0, 1, 2))
            value = value / (jnp.std(value, axis=(0, 1, 2)) + 1e-5)
        return value


class ResidualUnit(nn.Module):
    features: int
    strides: tuple = (1, 1)

    @nn.compact
    def __call__(self, x):
        residual = x
        if x.shape[-1] != 4 * self.features or self.strides != (1, 1):
            residual = StdConv(4 * self.features, (1, 1), self.strides, use_bias=False, name="conv_proj")(residual)
            residual = nn.GroupNorm(name="gn_proj")(residual)
        y = nn.relu(nn.GroupNorm(name="gn1")(StdConv(self.features, (1, 1), use_bias=False, name="conv1")(x)))
        y = nn.relu(
            nn.GroupNorm(name="gn2")(StdConv(self.features, (3, 3), self.strides, use_bias=False, name="conv2")(y))
        )
        y = nn.GroupNorm(name="gn3")(StdConv(4 * self.features, (1, 1), use_bias=False, name="conv3")(y))
        return nn.relu(residual + y)


class MlpBlock(nn.Module):
    mlp_dim: int

    @nn.compact
    def __call__(self, x):
        y = nn.gelu(nn.Dense(self.mlp_dim)(x))  # flax's gelu: the tanh approximation
        return nn.Dense(x.shape[-1])(y)


class Encoder1DBlock(nn.Module):
    mlp_dim: int
    num_heads: int

    @nn.compact
    def __call__(self, inputs):
        x = nn.LayerNorm()(inputs)
        x = nn.MultiHeadDotProductAttention(num_heads=self.num_heads)(x, x)
        x = x + inputs
        y = nn.LayerNorm()(x)
        return x + MlpBlock(self.mlp_dim)(y)


class OfficialViT(nn.Module):
    num_classes: int
    patch: int
    hidden: int
    depth: int
    mlp_dim: int
    heads: int
    classifier: str = "token"
    representation_size: int | None = None
    resnet: Sequence[int] | None = None  # units per stage; () = stem only
    resnet_width: int = 64

    @nn.compact
    def __call__(self, x):
        if self.resnet is not None:
            w = self.resnet_width
            x = nn.relu(nn.GroupNorm(name="gn_root")(StdConv(w, (7, 7), (2, 2), use_bias=False, name="conv_root")(x)))
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            for s, units in enumerate(self.resnet):
                for u in range(units):
                    stride = (2, 2) if s > 0 and u == 0 else (1, 1)
                    x = ResidualUnit(w * 2**s, stride, name=f"block{s + 1}_unit{u + 1}")(x)
        x = nn.Conv(
            self.hidden, (self.patch, self.patch), strides=(self.patch, self.patch), padding="VALID", name="embedding"
        )(x)
        n, h, w, c = x.shape
        x = x.reshape(n, h * w, c)
        if self.classifier == "token":
            cls = self.param("cls", nn.initializers.zeros, (1, 1, c))
            x = jnp.concatenate([jnp.tile(cls, (n, 1, 1)), x], axis=1)
        x = Transformer(self.depth, self.mlp_dim, self.heads, name="Transformer")(x)
        x = x[:, 0] if self.classifier == "token" else jnp.mean(x, axis=1)
        if self.representation_size is not None:
            x = jnp.tanh(nn.Dense(self.representation_size, name="pre_logits")(x))
        return nn.Dense(self.num_classes, name="head")(x)


class AddPosEmbs(nn.Module):
    @nn.compact
    def __call__(self, x):
        return x + self.param("pos_embedding", nn.initializers.normal(0.02), (1, x.shape[1], x.shape[2]))


class Transformer(nn.Module):
    """The encoder of models_vit.py: position embeddings, the blocks, the final LayerNorm."""

    depth: int
    mlp_dim: int
    heads: int

    @nn.compact
    def __call__(self, x):
        x = AddPosEmbs(name="posembed_input")(x)
        for i in range(self.depth):
            x = Encoder1DBlock(self.mlp_dim, self.heads, name=f"encoderblock_{i}")(x)
        return nn.LayerNorm(name="encoder_norm")(x)


# -- parameters as the release files lay them out ------------------------------------------------
PRE_LINEN = {
    "MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
    "LayerNorm_1": "LayerNorm_2",
    "MlpBlock_0": "MlpBlock_3",
}


def release_arrays(params: Any, *, groupnorm_4d: bool) -> dict[str, np.ndarray]:
    out = {}
    for path, value in flatten_dict(flax.core.unfreeze(params)).items():
        parts = [PRE_LINEN.get(p, p) if path[0] == "Transformer" else p for p in path]
        parts = (
            parts[0].split("_", 1) + parts[1:] if parts[0].startswith("block") else parts
        )  # block1_unit1 -> block1/unit1
        value = np.asarray(value, dtype=np.float32)
        if groupnorm_4d and len(parts) > 1 and parts[-2].startswith("gn"):
            value = value.reshape(1, 1, 1, -1)
        out["/".join(parts)] = value
    return out


def params_from_release(arrays: dict[str, np.ndarray]) -> Any:
    """The Flax parameter tree of a plain ViT from release-layout arrays (the inverse of release_arrays)."""
    linen = {v: k for k, v in PRE_LINEN.items()}
    return unflatten_dict({tuple(linen.get(p, p) for p in key.split("/")): jnp.asarray(v) for key, v in arrays.items()})


def randomise(params: Any, seed: int) -> Any:
    rng = np.random.default_rng(seed)
    flat = flatten_dict(flax.core.unfreeze(params))
    new = {}
    for path, v in flat.items():
        fan_in = int(np.prod(v.shape[:-1])) if path[-1] == "kernel" else 1
        scale = fan_in**-0.5 if path[-1] == "kernel" else 0.2
        offset = 1.0 if path[-1] == "scale" else 0.0
        new[path] = jnp.asarray(offset + scale * rng.standard_normal(v.shape), dtype=jnp.float32)
    return unflatten_dict(new)


CASES = {
    "token": dict(model=dict(classifier="token"), image=(32, 32)),
    "token+pre_logits": dict(model=dict(classifier="token", representation_size=48), image=(32, 32)),
    "gap": dict(model=dict(classifier="gap"), image=(32, 32)),
    "gap+pre_logits": dict(model=dict(classifier="gap", representation_size=48), image=(32, 32)),
    "token non-square 32x48": dict(model=dict(classifier="token"), image=(32, 48)),
    "hybrid R(2,2)+ViT, GN (1,1,1,C)": dict(
        model=dict(resnet=(2, 2), resnet_width=32, patch=1), image=(64, 64), gn4d=True
    ),
    "hybrid R(1,1,1)+ViT non-square": dict(
        model=dict(resnet=(1, 1, 1), resnet_width=32, patch=1), image=(64, 96), gn4d=False
    ),
    "hybrid stem-only R+ViT": dict(model=dict(resnet=(), resnet_width=32, patch=2), image=(32, 32), gn4d=True),
}


def run_case(name: str, case: dict, seed: int, tmp: Path) -> tuple[float, float]:
    """(max relative error of the load, worst of load and write) for one case; prints its line."""
    kw = dict(num_classes=7, patch=4, hidden=64, depth=2, mlp_dim=128, heads=4) | case["model"]
    model = OfficialViT(**kw)
    h, w = case["image"]
    x = np.random.default_rng(seed + 100).uniform(-1, 1, (2, h, w, 3)).astype(np.float32)
    params = randomise(model.init(jax.random.PRNGKey(seed), jnp.asarray(x))["params"], seed)
    want = np.asarray(model.apply({"params": params}, jnp.asarray(x)), dtype=np.float64)
    path = tmp / f"case{seed}.npz"
    np.savez(path, **release_arrays(params, groupnorm_4d=case.get("gn4d", False)))
    ours = vitkit.load_pretrained(path, image_size=(h, w))
    with torch.no_grad():
        got = ours(torch.from_numpy(x).permute(0, 3, 1, 2)).double().numpy()
    err = load_err = float(np.abs(got - want).max() / np.abs(want).max())
    line = f"{name:<34} logits {tuple(want.shape)}  load: max rel err {err:.2e}"
    if "resnet" not in case["model"]:  # vitkit writes plain ViTs: the Flax model runs the .npz vitkit wrote
        back = tmp / f"written{seed}.npz"
        vitkit.checkpoint.save_checkpoint(ours, back, "npz")
        arrays = dict(np.load(back))
        assert sorted(arrays) == sorted(release_arrays(params, groupnorm_4d=False)), (
            "written keys differ from the release layout"
        )
        flax_out = np.asarray(model.apply({"params": params_from_release(arrays)}, jnp.asarray(x)), dtype=np.float64)
        write_err = float(np.abs(flax_out - got).max() / np.abs(got).max())
        line += f"  write: max rel err {write_err:.2e}"
        err = max(err, write_err)
    print(line)
    return load_err, err


# The cases with a row of their own in checkpoint_parity.csv (--results), by the id's middle part.
CASE_IDS = {"token": "token", "gap": "gap", "hybrid R(2,2)+ViT, GN (1,1,1,C)": "hybrid-r22"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--results",
        action="store_true",
        help="write the rows npz-flax-{worst,token,gap,hybrid-r22}-SLUG of benchmarks/results/checkpoint_parity.csv",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        pairs = {name: run_case(name, case, seed, Path(tmp)) for seed, (name, case) in enumerate(CASES.items())}
    errors = [both for _, both in pairs.values()]
    worst = max(errors)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(
        f"worst max rel err {worst:.2e} over {len(errors)} cases (jax {jax.__version__}, flax {flax.__version__}, "
        f"torch {torch.__version__}, {platform.machine()} {platform.processor() or ''} CPU, {stamp})"
    )
    if args.results:
        write_results(pairs, worst)
    return 0 if worst <= 1e-4 else 1


def write_results(pairs: dict[str, tuple[float, float]], worst: float) -> None:
    from rows import write_rows

    common = {"benchmark": "Checkpoint parity", "unit": "relative", "setting": "fp32, 2 images"}
    out = [
        {
            **common,
            "id": "npz-flax-worst",
            "claim": f"worst max relative logit error, .npz loaded or written, {len(pairs)} cases",
            "figure": f"{worst:.2e}",
            "against": "the official Flax ViT on the same arrays",
            "model": "random weights in the release layout, plain and hybrid",
        }
    ]
    for name, middle in CASE_IDS.items():
        out.append(
            {
                **common,
                "id": f"npz-flax-{middle}",
                "claim": f"max relative logit error, load: {name}",
                "figure": f"{pairs[name][0]:.2e}",
                "against": "the official Flax ViT",
                "model": name,
            }
        )
    write_rows("checkpoint_parity", out)


if __name__ == "__main__":
    sys.exit(main())
