"""See inside a ViT: the analyses of paper §4.5 and App. D.7-D.8 as functions returning tensors.

    patch_embedding_pca(model)             Fig. 7 left: principal components of the patch-embedding filters
    pos_embed_similarity(model)            Fig. 7 centre: cosine similarity of every position embedding to all others
    mean_attention_distance(model, x)      Fig. 7 right: (layers, heads) attention distance in pixels
    attention_rollout(model, x)            Fig. 6 / App. D.8: Abnar & Zuidema's rollout, (B, T, T)
    rollout_maps / last_layer_attention    what the output token looks at, on the patch grid

Attention is read from the model's explicit path (`block.forward_explicit`) one layer and one batch at
a time, and every layer's (B, heads, T, T) probabilities are reduced before the next layer runs, so
memory stays bounded by one batch of one layer. The fused SDPA path that `model(x)` uses is never
touched; the model runs in eval mode under `torch.inference_mode` and gets its training flag back.

For a hybrid the grid is the CNN feature map and a "patch" is `config.total_patch_size` pixels.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from vitkit.errors import ConfigError, DataError
from vitkit.models import VisionTransformer, ViTConfig

Images = torch.Tensor | Iterable[torch.Tensor]  # (N, C, H, W) normalised, or batches of them


# -- Fig. 7 left: patch-embedding filters -------------------------------------------------
@dataclass(frozen=True)
class FilterPCA:
    """Principal components of the D patch-embedding filters, each filter a (C, ph, pw) sample.

    filters ~= mean + scores @ components (exactly, with all components).
    """

    components: torch.Tensor  # (k, C, ph, pw), unit norm, in order of explained variance
    scores: torch.Tensor  # (D, k) each filter's coordinates on the components
    mean: torch.Tensor  # (C, ph, pw) the mean filter
    explained_variance_ratio: torch.Tensor  # (k,)

    def reconstruct(self) -> torch.Tensor:
        """(D, C, ph, pw) filters rebuilt from the kept components."""
        k = self.components.shape[0]
        flat = self.mean.flatten() + self.scores @ self.components.reshape(k, -1)
        return flat.reshape(-1, *self.mean.shape)


def patch_embedding_pca(model: VisionTransformer, num_components: int | None = 28) -> FilterPCA:
    """The first `num_components` principal components of the patch embedding E (None: all of them).

    Each of the D output channels of E is one filter of C x ph x pw weights (C is the number of
    input channels, or the CNN's channels for a hybrid); the filters are centred and decomposed
    with an SVD. At most min(D, C*ph*pw) components exist.
    """
    weight = model.patch_embed.weight.detach().double().cpu()  # (D, C, ph, pw)
    flat = weight.flatten(1)  # (D, C*ph*pw)
    mean = flat.mean(dim=0)
    u, s, vh = torch.linalg.svd(flat - mean, full_matrices=False)
    k = len(s) if num_components is None else min(num_components, len(s))
    if k <= 0:
        raise ConfigError(f"num_components: expected a positive number, got {num_components!r}")
    variance = s**2
    ratio = variance / variance.sum().clamp_min(torch.finfo(variance.dtype).tiny)
    return FilterPCA(
        components=vh[:k].reshape(k, *weight.shape[1:]).float(),
        scores=(u[:, :k] * s[:k]).float(),
        mean=mean.reshape(weight.shape[1:]).float(),
        explained_variance_ratio=ratio[:k].float(),
    )


# -- Fig. 7 centre: position embeddings ----------------------------------------------------
def pos_embed_similarity(model: VisionTransformer) -> torch.Tensor:
    """(gh, gw, gh, gw): [i, j] is the cosine similarity of patch (i, j)'s position embedding to every patch.

    The class token's slot is left out. Works for any grid, including one resampled by
    `set_image_size`, and for fixed sin-cos embeddings.
    """
    c = model.config
    pos = model.position_embedding()
    if pos is None:
        raise ConfigError(f"pos_embed: this model has no position embeddings to compare (pos_embed={c.pos_embed!r})")
    emb = pos.detach().float().cpu()[0, c.pos_prefix_tokens :]  # (N, D)
    emb = F.normalize(emb, dim=-1)
    gh, gw = c.grid_size
    return (emb @ emb.T).reshape(gh, gw, gh, gw)


# -- Fig. 7 right: mean attention distance -------------------------------------------------
def patch_distances(config: ViTConfig) -> torch.Tensor:
    """(N, N) distances in pixels between the centres of patches, row-major over the grid."""
    gh, gw = config.grid_size
    ph, pw = config.total_patch_size
    y, x = torch.meshgrid(
        torch.arange(gh, dtype=torch.float64) * ph, torch.arange(gw, dtype=torch.float64) * pw, indexing="ij"
    )
    centres = torch.stack([y.flatten(), x.flatten()], dim=1)  # (N, 2); the half-patch offset cancels
    return torch.cdist(centres, centres)


def mean_attention_distance(
    model: VisionTransformer, images: Images, *, num_images: int | None = 128, batch_size: int = 32
) -> torch.Tensor:
    """(layers, heads) mean attention distance in pixels (paper Fig. 7 right).

    For every query patch: the distance from its centre to every patch centre, weighted by the
    attention weights over patch keys (the class token is dropped as query and as key, and the
    remaining weights are renormalised to sum to 1); averaged over queries and over the first
    `num_images` images (128 as in the paper; None: all of them).
    """
    c = model.config
    p = c.num_prefix_tokens
    dist = patch_distances(c).to(_device(model), torch.float32)
    total = torch.zeros(c.depth, c.num_heads, dtype=torch.float64, device=dist.device)
    count = 0
    with _inspecting(model):
        for x in _batches(images, batch_size, model, limit=num_images):
            for layer, probs in enumerate(attention_maps(model, x)):
                w = probs[:, :, p:, p:].float()  # (B, nh, N, N) patch queries -> patch keys
                per_query = torch.einsum("bhqk,qk->bhq", w, dist) / w.sum(dim=-1)  # renormalised
                total[layer] += per_query.double().mean(dim=-1).sum(dim=0)  # (nh,)
            count += x.shape[0]
    return (total / count).float().cpu()


# -- Fig. 6 / App. D.8: attention rollout ---------------------------------------------------
def attention_rollout(model: VisionTransformer, images: Images, *, batch_size: int = 32) -> torch.Tensor:
    """(B, T, T) attention rollout (Abnar & Zuidema 2020) over all layers, prefix tokens included.

    Per layer: average the attention over heads, add the identity for the residual and
    renormalise, A' = (A + I) / 2; then multiply through the layers, R = A'_L ... A'_1.
    Row t says how much token t at the output draws on each input token.
    """
    with _inspecting(model):
        out = torch.cat([_rollout(model, x) for x in _batches(images, batch_size, model)])
    return out.clone()


def rollout_maps(model: VisionTransformer, images: Images, *, batch_size: int = 32) -> torch.Tensor:
    """(B, gh, gw) rollout from the output token to the patches (App. D.8, Fig. 6).

    The output token is the class token, or for classifier="gap" the mean over the patch tokens.
    Only this row is kept per batch.
    """
    with _inspecting(model):
        out = torch.cat([_output_row(model, _rollout(model, x)) for x in _batches(images, batch_size, model)])
    return out.clone()


def last_layer_attention(model: VisionTransformer, images: Images, *, batch_size: int = 32) -> torch.Tensor:
    """(B, heads, gh, gw) the last layer's raw attention weights from the output token to the patches."""
    with _inspecting(model):
        maps = []
        for x in _batches(images, batch_size, model):
            for probs in attention_maps(model, x):  # only the last layer's survives the loop
                pass
            maps.append(_output_row(model, probs))
    return torch.cat(maps).clone()


def attention_maps(model: VisionTransformer, x: torch.Tensor) -> Iterator[torch.Tensor]:
    """Yield each layer's (B, heads, T, T) attention probabilities for one batch, one layer at a time.

    Runs the model's explicit attention path; call it under `torch.inference_mode()` with the
    model in eval mode (the public functions here do).
    """
    x = model.embed(x)
    for block in model.blocks:
        x, probs = block.forward_explicit(x)
        yield probs


def _rollout(model: VisionTransformer, x: torch.Tensor) -> torch.Tensor:
    rollout = None
    for probs in attention_maps(model, x):
        a = probs.double().mean(dim=1)  # (B, T, T) heads averaged
        a = 0.5 * a + 0.5 * torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)  # residual
        a = a / a.sum(dim=-1, keepdim=True)
        rollout = a if rollout is None else a @ rollout
    return rollout.float().cpu()


def _output_row(model: VisionTransformer, matrix: torch.Tensor) -> torch.Tensor:
    """(B, [heads,] T, T) -> (B, [heads,] gh, gw): the output token's weights on the patches."""
    c = model.config
    p = c.num_prefix_tokens
    row = matrix[..., 0, p:] if c.classifier == "token" else matrix[..., p:, p:].mean(dim=-2)
    return row.reshape(*row.shape[:-1], *c.grid_size).float().cpu()


# -- everything at once, for `vitkit inspect` ----------------------------------------------
def inspect_model(
    model: VisionTransformer,
    images: torch.Tensor,
    *,
    num_show: int = 8,
    num_components: int = 28,
    batch_size: int = 32,
) -> dict[str, torch.Tensor]:
    """All of the above for normalised `images` (N, C, H, W): the numbers behind every figure.

    Attention distance uses all N images; rollout and last-layer maps the first `num_show`.
    Entries a model cannot have (position similarity without position embeddings) are left out.
    """
    shown = images[:num_show]
    pca = patch_embedding_pca(model, num_components)
    out = {
        "filter_components": pca.components,
        "filter_explained_variance_ratio": pca.explained_variance_ratio,
        "mean_attention_distance": mean_attention_distance(model, images, num_images=None, batch_size=batch_size),
        "uniform_attention_distance": patch_distances(model.config).mean().float().reshape(()),
        "rollout": rollout_maps(model, shown, batch_size=batch_size),
        "last_layer_attention": last_layer_attention(model, shown, batch_size=batch_size),
    }
    if model.position_embedding() is not None:
        out["pos_embed_similarity"] = pos_embed_similarity(model)
    return out


# -- images --------------------------------------------------------------------------------
def load_images(
    paths: Sequence[str | os.PathLike], config: ViTConfig, *, limit: int | None = None, crop_pct: float = 1.0
) -> torch.Tensor:
    """(N, C, H, W) pixels in [0, 1] of the images under `paths` (files and folders, sorted), each read by `image_input`."""
    from vitkit.data.images import find_images

    return torch.stack([image_input(path, config, crop_pct) for path in find_images(paths)[:limit]])


def image_input(source, config: ViTConfig, crop_pct: float = 1.0) -> torch.Tensor:
    """(C, H, W) pixels in [0, 1] of one image (a path or a shard record) read as `vitkit predict` and `vitkit eval`
    read it: config.in_chans channels, the shorter side resized to the input size / crop_pct, the centre cut out."""
    from vitkit.data.images import load_image

    if config.in_chans not in (1, 3):
        raise ConfigError(
            f"in_chans: images can be read as 1 (grayscale) or 3 (RGB) channels, the model has {config.in_chans}"
        )
    pixels = load_image(source, config.in_chans, config.image_size, crop_pct, background=config.background)
    return torch.from_numpy(pixels.copy()).float() / 255.0


def normalize(pixels: torch.Tensor, config: ViTConfig) -> torch.Tensor:
    """Pixels in [0, 1] -> model input, with the model's per-channel mean and std."""
    mean = torch.tensor(config.mean, dtype=pixels.dtype).view(-1, 1, 1)
    std = torch.tensor(config.std, dtype=pixels.dtype).view(-1, 1, 1)
    return (pixels - mean) / std


# -- plumbing ------------------------------------------------------------------------------
@contextmanager
def _inspecting(model: VisionTransformer) -> Iterator[None]:
    """Eval mode and inference mode for the duration; the model's training flag comes back after."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)


def _device(model: VisionTransformer) -> torch.device:
    return model.norm.weight.device


def _batches(
    images: Images, batch_size: int, model: VisionTransformer, *, limit: int | None = None
) -> Iterator[torch.Tensor]:
    """Batches of images on the model's device: a tensor is split, an iterable yields tensors or (x, y) pairs.

    With `limit`, only the first `limit` images come out (the last batch cut short).
    """
    for key, value in (("batch_size", batch_size), ("num_images", limit if limit is not None else 1)):
        if value <= 0:
            raise ConfigError(f"{key}: expected a positive number, got {value}")
    if isinstance(images, torch.Tensor):
        images = images[:limit].split(batch_size) if images.numel() else []
    count = 0
    for x in images:
        x = x[0] if isinstance(x, (tuple, list)) else x
        if limit is not None:
            x = x[: limit - count]
        count += len(x)
        yield x.to(_device(model), model.norm.weight.dtype)
        if limit is not None and count >= limit:
            break
    if count == 0:
        raise DataError("images: got no images to inspect")
