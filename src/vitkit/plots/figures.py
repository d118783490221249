"""Figures for `vitkit.evaluate.inspection`: the paper's Fig. 7 (left, centre, right) and Fig. 6-style attention maps.

Each `*_figure` function takes the tensors an inspection function returned and gives back a
matplotlib Figure (drawn without pyplot, so no global backend is touched); `write_report` saves
all of them as PNGs beside the numbers (inspection.npz, inspection.json), every file atomically.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

from vitkit.files import atomic_path, write_json

FIGURES = {
    "filters": "patch_embedding_filters.png",
    "pos_embed": "pos_embed_similarity.png",
    "distance": "mean_attention_distance.png",
    "rollout": "attention_rollout.png",
    "last_layer": "last_layer_attention.png",
}


def tile(maps: np.ndarray, cols: int, *, pad: int = 1) -> np.ndarray:
    """(n, h, w[, c]) small images -> one (rows*(h+pad)-pad, cols*(w+pad)-pad[, c]) mosaic, gaps NaN."""
    n, h, w = maps.shape[:3]
    rows = -(-n // cols)
    out = np.full((rows * (h + pad) - pad, cols * (w + pad) - pad, *maps.shape[3:]), np.nan)
    for i, m in enumerate(maps):
        r, c = divmod(i, cols)
        out[r * (h + pad) : r * (h + pad) + h, c * (w + pad) : c * (w + pad) + w] = m
    return out


def filters_figure(components: torch.Tensor, explained: torch.Tensor | None = None) -> Figure:
    """Fig. 7 left: (k, C, ph, pw) principal components as RGB (C=3) or grayscale (C=1) patches, 7 per row."""
    comps = components.float().numpy()
    lo = comps.reshape(len(comps), -1).min(axis=1)[:, None, None, None]
    hi = comps.reshape(len(comps), -1).max(axis=1)[:, None, None, None]
    comps = (comps - lo) / np.maximum(hi - lo, 1e-12)  # each component stretched to [0, 1]; the sign is arbitrary
    comps = comps.transpose(0, 2, 3, 1)  # (k, ph, pw, C)
    if comps.shape[-1] == 1:
        comps = comps[..., 0]
    cols = min(7, len(comps))
    mosaic = tile(comps, cols)
    width = 0.8 * cols
    fig = Figure(figsize=(width, 0.4 + width * mosaic.shape[0] / mosaic.shape[1]), layout="constrained")
    ax = fig.add_subplot()
    if mosaic.ndim == 3:
        ax.imshow(np.where(np.isnan(mosaic), 1.0, mosaic), interpolation="nearest")
    else:
        ax.imshow(
            np.ma.masked_invalid(mosaic), cmap=_cmap("gray", bad="white"), interpolation="nearest", vmin=0, vmax=1
        )
    title = f"Patch-embedding filters: first {len(components)} principal components"
    if explained is not None:
        title += f" ({100 * float(explained.sum()):.0f}% of the variance)"
    ax.set_title(title, fontsize=9)
    ax.set_axis_off()
    return fig


def pos_embed_figure(similarity: torch.Tensor) -> Figure:
    """Fig. 7 centre: (gh, gw, gh, gw) similarities, one small map per patch laid out on the grid."""
    gh, gw = similarity.shape[:2]
    mosaic = tile(similarity.reshape(gh * gw, gh, gw).numpy(), gw)
    fig = Figure(figsize=(1.5 + 0.45 * gw, 0.8 + 0.45 * gh), layout="constrained")
    ax = fig.add_subplot()
    im = ax.imshow(
        np.ma.masked_invalid(mosaic), cmap=_cmap("viridis", bad="white"), vmin=-1, vmax=1, interpolation="nearest"
    )
    ax.set_xticks([c * (gw + 1) + (gw - 1) / 2 for c in range(gw)], [str(c + 1) for c in range(gw)], fontsize=7)
    ax.set_yticks([r * (gh + 1) + (gh - 1) / 2 for r in range(gh)], [str(r + 1) for r in range(gh)], fontsize=7)
    ax.tick_params(length=0)
    ax.set_xlabel("Input patch column")
    ax.set_ylabel("Input patch row")
    ax.set_title("Position embedding similarity", fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.8, label="Cosine similarity")
    return fig


def distance_figure(distance: torch.Tensor, *, uniform: float | None = None, caption: str | None = None) -> Figure:
    """Fig. 7 right: (layers, heads) mean attention distance against depth, one dot per head."""
    layers, heads = distance.shape
    fig = Figure(figsize=(4.2, 3.4), layout="constrained")
    ax = fig.add_subplot()
    cmap = _cmap("tab20" if heads > 10 else "tab10")
    depth = np.arange(1, layers + 1)
    for h in range(heads):
        ax.scatter(depth, distance[:, h].numpy(), s=14, color=cmap(h % cmap.N), label=f"Head {h + 1}")
    if uniform is not None:
        ax.axhline(uniform, color="0.5", linestyle="--", linewidth=1, label="uniform attention")
    ax.set_xlabel("Network depth (layer)")
    ax.set_ylabel("Mean attention distance (pixels)")
    ax.set_xticks(depth if layers <= 16 else depth[::2])
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=6, ncol=2 if heads > 6 else 1, loc="lower right")
    if caption:
        fig.suptitle(caption, fontsize=6, wrap=True)
    return fig


def rollout_figure(
    pixels: torch.Tensor, rollout: torch.Tensor, titles: list[str] | None = None, caption: str | None = None
) -> Figure:
    """Fig. 6 style: the images (top, titled e.g. with true and predicted label) and the output token's attention
    rollout over them (bottom), with a colour bar for the rollout's scale."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    n = len(rollout)
    fig = Figure(figsize=(1.4 * n + 1.2, 3.4 if titles else 3.0), layout="constrained")
    axes = fig.subplots(2, n, squeeze=False)
    heat = _upsample(rollout, pixels.shape[-2:])
    for i in range(n):
        _show_image(axes[0, i], pixels[i])
        _show_image(axes[1, i], pixels[i], heat[i])
        if titles:
            axes[0, i].set_title(titles[i], fontsize=7)
    axes[0, 0].set_ylabel("input", fontsize=8)
    axes[1, 0].set_ylabel("rollout", fontsize=8)
    bar = fig.colorbar(ScalarMappable(Normalize(0, 1), _cmap("inferno")), ax=axes[1, :].tolist(), shrink=0.9)
    bar.set_label("rollout / its maximum", fontsize=7)
    bar.ax.tick_params(labelsize=6)
    fig.suptitle(_fitted("Attention rollout from the output token" + _shown(n, caption), fig, 9), fontsize=9)
    return fig


def last_layer_figure(pixels: torch.Tensor, maps: torch.Tensor, caption: str | None = None) -> Figure:
    """The last layer's raw attention from the output token, one column per head, one row per image."""
    n, heads = maps.shape[:2]
    fig = Figure(figsize=(1.2 * (heads + 1) + 0.4, 1.2 * n + 0.5), layout="constrained")
    axes = fig.subplots(n, heads + 1, squeeze=False)
    for i in range(n):
        _show_image(axes[i, 0], pixels[i])
        heat = _upsample(maps[i], pixels.shape[-2:], mode="nearest")
        for h in range(heads):
            _show_image(axes[i, h + 1], pixels[i], heat[h])
    for h in range(heads):
        axes[0, h + 1].set_title(f"head {h + 1}", fontsize=8)
    fig.suptitle(
        _fitted("Last layer: attention from the output token to the patches" + _shown(n, caption), fig, 9), fontsize=9
    )
    return fig


def _fitted(title: str, fig: Figure, fontsize: float) -> str:
    """`title` wrapped to the figure's width: a narrow figure (few heads, few images) cut a long second line at both
    edges, and with it the count of images and of those the model trained on."""
    import textwrap

    chars = max(20, int(fig.get_figwidth() * 72 / (0.55 * fontsize)))  # an average character is ~0.55 em wide
    return "\n".join(wrapped for line in title.split("\n") for wrapped in (textwrap.wrap(line, chars) or [""]))


def _shown(n: int, caption: str | None) -> str:
    """A figure title's second line: which images, of what (`caption`)."""
    return f"\n{n} shown of {caption}" if caption else ""


def save_figure(fig: Figure, path: str | os.PathLike, *, dpi: int = 150) -> Path:
    """Write `fig` as a PNG atomically (an existing file is replaced only by a complete one)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi)
    return Path(path)


def write_report(
    results: dict[str, torch.Tensor],
    pixels: torch.Tensor,
    out_dir: str | os.PathLike,
    *,
    info: dict[str, Any],
    titles: list[str] | None = None,
    caption: str | None = None,
) -> list[Path]:
    """Write every figure `results` (from `inspection.inspect_model`) allows, plus inspection.npz and .json.

    `pixels` are the shown images in [0, 1]; `info` (model config, image count, ...) goes into the
    JSON, which also says which figures were skipped and why; `titles` label the shown images (e.g. true
    and predicted class); `caption` (which images, how many, how many the model trained on) goes under the title of
    every figure drawn from the images. Returns the written paths.
    """
    out = Path(out_dir)
    written: list[Path] = []
    skipped: dict[str, str] = {}
    comps = results["filter_components"]
    if info.get("hybrid"):
        skipped["filters"] = "hybrid model: the patch embedding filters CNN features, not pixels"
    elif comps.shape[1] not in (1, 3):
        skipped["filters"] = f"{comps.shape[1]} input channels cannot be drawn as gray or RGB"
    else:
        written.append(
            save_figure(filters_figure(comps, results["filter_explained_variance_ratio"]), out / FIGURES["filters"])
        )
    if "pos_embed_similarity" in results:
        written.append(save_figure(pos_embed_figure(results["pos_embed_similarity"]), out / FIGURES["pos_embed"]))
    else:
        skipped["pos_embed"] = "the model has no position embeddings"
    uniform = float(results["uniform_attention_distance"])
    written.append(
        save_figure(
            distance_figure(results["mean_attention_distance"], uniform=uniform, caption=caption),
            out / FIGURES["distance"],
        )
    )
    shown = pixels[: len(results["rollout"])]
    written.append(save_figure(rollout_figure(shown, results["rollout"], titles, caption), out / FIGURES["rollout"]))
    written.append(
        save_figure(last_layer_figure(shown, results["last_layer_attention"], caption), out / FIGURES["last_layer"])
    )

    with atomic_path(out / "inspection.npz") as tmp, open(tmp, "wb") as f:
        np.savez(f, **{k: v.numpy() for k, v in results.items()})
    written.append(out / "inspection.npz")
    summary = {
        **info,
        "mean_attention_distance": results["mean_attention_distance"].tolist(),
        "uniform_attention_distance": uniform,
        "filter_explained_variance_ratio": results["filter_explained_variance_ratio"].tolist(),
        "figures": [p.name for p in written if p.suffix == ".png"],
        "skipped": skipped,
    }
    write_json(out / "inspection.json", summary)
    written.append(out / "inspection.json")
    return written


# -- drawing helpers -----------------------------------------------------------------------
def _cmap(name: str, *, bad: str | None = None):
    import matplotlib

    cmap = matplotlib.colormaps[name]
    return cmap.with_extremes(bad=bad) if bad else cmap


def _upsample(maps: torch.Tensor, size: tuple[int, int], *, mode: str = "bilinear") -> np.ndarray:
    """(n, gh, gw) maps -> (n, H, W), each scaled so its largest value is 1."""
    up = F.interpolate(
        maps[:, None].float(), size=tuple(size), mode=mode, **({"align_corners": False} if mode == "bilinear" else {})
    )[:, 0]
    peak = up.flatten(1).amax(dim=1).clamp_min(1e-12)
    return (up / peak[:, None, None]).numpy()


def _show_image(ax, image: torch.Tensor, heat: np.ndarray | None = None) -> None:
    """An image in [0, 1] (C, H, W), optionally under a heat map in [0, 1]."""
    img = image.permute(1, 2, 0).numpy().clip(0, 1)
    if img.shape[-1] == 1:
        ax.imshow(img[..., 0], cmap="gray", vmin=0, vmax=1, interpolation="nearest")
    else:
        ax.imshow(img, interpolation="nearest")
    if heat is not None:
        ax.imshow(heat, cmap="inferno", alpha=0.6, vmin=0, vmax=1, interpolation="nearest")  # already upsampled
    ax.set_xticks([])
    ax.set_yticks([])
