"""The Vision Transformer of Dosovitskiy et al. (ICLR 2021), Eq. 1-4, read next to the paper.

    z_0  = [x_class; x_p^1 E; ...; x_p^N E] + E_pos          (1)  VisionTransformer.embed
    z'_l = MSA(LN(z_{l-1})) + z_{l-1}                         (2)  Block.forward, first line
    z_l  = MLP(LN(z'_l)) + z'_l                               (3)  Block.forward, second line
    y    = LN(z_L^0)                                          (4)  forward_features + forward_head

Attention has one fused path (torch's scaled_dot_product_attention) and one explicit path that also returns the
attention probabilities (`forward_explicit`), used only for inspection. Faster paths for particular settings are
swap-in modules that take the place of an Attention, Mlp, Block or the patch embedding's Conv2d, sharing its
parameters (the state dict keeps its keys). They enter through one seam, vitkit.kernels.swap, installed by whoever runs
the model where they pay: written-out attention for training short sequences, inference kernels for attention and the
MLP's bias + GELU, the patch embedding as one GEMM for bf16 on the CPU, a dense class-token row for compiled int8.
Nothing in this file branches on them.

Position embeddings (App. D.4, `pos_embed`): "learned" E_pos of Eq. 1; "learned_2d", a row and a column
embedding of D/2 each, concatenated; "relative", a learned bias per head and layer for every 2D offset
between two patches, added to the attention logits (to SDPA as its float attn_mask); "sincos2d"; "none".

Any image size (`dynamic_img_size`): an input of another size whose sides are multiples of the patch size gets E_pos
(or the relative bias table) resampled to its grid of patches, as `set_image_size` would, kept per grid.
Per-layer features: `forward_intermediates` returns z_l of the layers asked for (timm's semantics).

The families people start from are rows of small pieces (`ViTConfig`, registry.FAMILIES), each a module here:
LayerScale on both residual branches (CaiT, DeiT III, DINOv2), register tokens (`reg_token`, Darcet et al. 2024),
AttentionPool for "map" pooling (SigLIP), SwiGLU (DINOv2 giant), QuickGELU and a LayerNorm before the blocks with no
patch bias (CLIP); E_pos is resampled to another grid the way each family does it (`pos_embed_resample`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from vitkit.errors import ConfigError
from vitkit.limits import check_batch_room

from .backbones import ConvStem, ResNetBackbone
from .config import POS_RESAMPLES, Backbone, ConvStemConfig, ViTConfig
from .distill import dist_token, two_heads
from .interface import TimmInterface, feature_level
from .intermediates import cached, check_output_fmt, take_indices, tracing
from .pooling import pool_tokens


class Attention(nn.Module):
    """Multi-head self-attention: softmax(Q K^T / sqrt(d_head)) V per head, heads projected back to D.

    One fused path (torch's scaled_dot_product_attention) and one explicit path that also returns the probabilities
    (`forward_explicit`); a swap-in (vitkit.kernels.swap) may compute `fused` faster.
    """

    def __init__(
        self, *, width: int, num_heads: int, attn_dropout: float, dropout: float, position_bias: nn.Module | None = None
    ):
        super().__init__()
        self.position_bias = position_bias  # RelativePositionBias: (nh, T, T) added to the logits, or None
        self.num_heads = num_heads
        self.head_dim = width // num_heads
        self.attn_dropout = attn_dropout
        self.qkv = nn.Linear(width, 3 * width)  # Q, K and V in one matmul
        self.proj = nn.Linear(width, width)
        self.proj_drop = nn.Dropout(dropout)
        self.softmax = nn.Softmax(dim=-1)  # a named module, so inspection can hook it

    def forward(
        self, x: torch.Tensor, *, queries: int | None = None, grid: tuple[int, int] | None = None
    ) -> torch.Tensor:
        """(B, T, D) -> (B, T, D); with `queries=n` only the first n tokens attend: (B, n, D).
        `grid`: the input's (h, w) patches where it is not the configured one (relative position bias)."""
        y = self.fused(x, self.logit_bias(queries, grid), queries)
        return self.proj_drop(self.proj(y))

    def logit_bias(self, queries: int | None = None, grid: tuple[int, int] | None = None) -> torch.Tensor | None:
        """The position bias added to the logits, (nh, Tq, T) for the first `queries` rows; None without one."""
        if self.position_bias is None:
            return None
        bias = self.position_bias(grid)  # (nh, T, T)
        return bias if queries is None else bias[:, :queries]

    def fused(self, x: torch.Tensor, bias: torch.Tensor | None, queries: int | None) -> torch.Tensor:
        """The fused path: (B, T, D) -> (B, Tq, D), heads side by side before the output projection."""
        q, k, v = self.project(x, queries)
        dropout = self.attn_dropout if self.training else 0.0
        return self.merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout))

    def project(self, x: torch.Tensor, queries: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K and V per head, each (B, nh, T, hd); with `queries=n`, Q for the first n tokens only."""
        if queries is not None:
            return self._qkv_first(x, queries)
        B, T, D = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim)
        # unbind along Q/K/V in place (not after a permute): backward then stacks the three gradients
        # straight into qkv's layout, with no extra copy
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))  # each (B, nh, T, hd)
        return q, k, v

    def _qkv_first(self, x: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries for the first n tokens, keys and values for all: the same weights, fewer rows."""
        B, T, D = x.shape
        w, b = self.qkv.weight, self.qkv.bias
        q = F.linear(x[:, :n], w[:D], b[:D]).view(B, n, self.num_heads, self.head_dim).transpose(1, 2)
        kv = F.linear(x, w[D:], b[D:]).view(B, T, 2, self.num_heads, self.head_dim)
        k, v = (t.transpose(1, 2) for t in kv.unbind(2))  # each (B, nh, T, hd)
        return q, k, v

    @staticmethod
    def merge_heads(y: torch.Tensor) -> torch.Tensor:
        """(B, nh, T, hd) -> (B, T, nh * hd), the heads side by side."""
        B, nh, T, hd = y.shape
        return y.transpose(1, 2).reshape(B, T, nh * hd)

    def forward_explicit(
        self, x: torch.Tensor, grid: tuple[int, int] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The same attention written out; also returns the probabilities (B, nh, T, T)."""
        q, k, v = self.project(x)
        probs = self.probabilities(q, k, self.logit_bias(None, grid), self.softmax)  # (B, nh, T, T)
        y = F.dropout(probs, self.attn_dropout, self.training) @ v  # (B, nh, T, hd)
        return self.proj_drop(self.proj(self.merge_heads(y))), probs

    def probabilities(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        bias: torch.Tensor | None,
        softmax: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """softmax(Q K^T / sqrt(d_head) + bias) per head, (B, nh, Tq, T)."""
        logits = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        if bias is not None:
            logits = logits + bias
        return softmax(logits) if softmax is not None else logits.softmax(-1)


class Mlp(nn.Module):
    """Two linear layers with GELU between (hidden size "MLP size"); CLIP's QuickGELU where `act` says so."""

    def __init__(self, *, width: int, mlp_dim: int, dropout: float, act: str):
        super().__init__()
        self.fc1 = nn.Linear(width, mlp_dim)
        self.act = QuickGELU() if act == "quick_gelu" else nn.GELU(approximate="tanh" if act == "gelu_tanh" else "none")
        self.fc2 = nn.Linear(mlp_dim, width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class QuickGELU(nn.Module):
    """x * sigmoid(1.702 x): OpenAI CLIP's approximation of GELU, which its weights were trained with."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class SwiGLU(nn.Module):
    """The gated MLP of DINOv2 giant (Shazeer 2020): fc1 makes a gate and a value of `mlp_dim` each (packed, gate
    first), fc2 reads SiLU(gate) * value."""

    def __init__(self, *, width: int, mlp_dim: int, dropout: float):
        super().__init__()
        self.fc1 = nn.Linear(width, 2 * mlp_dim)
        self.fc2 = nn.Linear(mlp_dim, width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = self.fc1(x).chunk(2, dim=-1)  # each (B, T, mlp_dim)
        return self.drop(self.fc2(self.drop(F.silu(gate) * value)))


def make_mlp(c: ViTConfig) -> nn.Module:
    """The MLP of Eq. 3 that `c.mlp` names."""
    if c.mlp == "swiglu":
        return SwiGLU(width=c.width, mlp_dim=c.mlp_dim, dropout=c.dropout)
    return Mlp(width=c.width, mlp_dim=c.mlp_dim, dropout=c.dropout, act=c.mlp_act)


class LayerScale(nn.Module):
    """A learned scale per channel on a residual branch (CaiT, Touvron et al. 2021; DeiT III; DINOv2), starting at
    `init` so that each block starts close to the identity."""

    def __init__(self, width: int, init: float):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((width,), float(init)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


def layer_scale(c: ViTConfig) -> nn.Module:
    """LayerScale where `c.layer_scale` gives its initial value, else nothing."""
    return nn.Identity() if c.layer_scale is None else LayerScale(c.width, c.layer_scale)


class AttentionPool(nn.Module):
    """Multihead attention pooling, "MAP" (big_vision; SigLIP): a learned probe attends over the patch tokens, then a
    residual MLP, y = a + MLP(LN(a)) with a = MHA(probe, tokens). (B, N, D) -> (B, D)."""

    def __init__(self, c: ViTConfig):
        super().__init__()
        D = c.width
        self.num_heads = c.num_heads
        self.probe = nn.Parameter(torch.zeros(1, 1, D))
        self.qkv = nn.Linear(D, 3 * D)  # Q (of the probe), K and V (of the tokens) packed, as Attention packs them
        self.proj = nn.Linear(D, D)
        self.norm = nn.LayerNorm(D, eps=c.layer_norm_eps)
        self.mlp = make_mlp(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape
        nh = self.num_heads
        w, b = self.qkv.weight, self.qkv.bias
        q = F.linear(self.probe, w[:D], b[:D]).view(1, 1, nh, D // nh).transpose(1, 2).expand(B, -1, -1, -1)
        kv = F.linear(x, w[D:], b[D:]).view(B, N, 2, nh, D // nh)
        k, v = (t.transpose(1, 2) for t in kv.unbind(2))  # each (B, nh, N, hd); q (B, nh, 1, hd)
        a = self.proj(Attention.merge_heads(F.scaled_dot_product_attention(q, k, v)))  # (B, 1, D)
        return (a + self.mlp(self.norm(a)))[:, 0]


class DropPath(nn.Module):
    """Stochastic depth: drop a sample's whole residual branch with probability `rate` while training."""

    def __init__(self, rate: float):
        super().__init__()
        self.rate = rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.rate == 0.0 or not self.training:
            return x
        keep = 1.0 - self.rate
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep


class Block(nn.Module):
    """One pre-norm Transformer layer, Eq. 2 and 3."""

    def __init__(self, config: ViTConfig, *, drop_path: float):
        super().__init__()
        c = config
        self.norm1 = nn.LayerNorm(c.width, eps=c.layer_norm_eps)
        bias = (
            RelativePositionBias(c.grid_size, c.num_heads, c.num_prefix_tokens) if c.pos_embed == "relative" else None
        )
        self.attn = Attention(
            width=c.width, num_heads=c.num_heads, attn_dropout=c.attn_dropout, dropout=c.dropout, position_bias=bias
        )
        self.ls1 = layer_scale(c)  # LayerScale on each branch where the family has it, else the identity
        self.norm2 = nn.LayerNorm(c.width, eps=c.layer_norm_eps)
        self.mlp = make_mlp(c)
        self.ls2 = layer_scale(c)
        self.drop_path = DropPath(drop_path)

    def forward(
        self, x: torch.Tensor, *, class_token_only: bool = False, grid: tuple[int, int] | None = None
    ) -> torch.Tensor:
        if class_token_only:
            # the last layer when only z_L^0 is read (Eq. 4): the same sums for one row, (B, 1, D)
            x = x[:, :1] + self.drop_path(self.ls1(self.attn(self.norm1(x), queries=1, grid=grid)))  # (2)
        else:
            x = x + self.drop_path(self.ls1(self.attn(self.norm1(x), grid=grid)))  # (2)
        x = x + self.drop_path(self.ls2(self.mlp(self.norm2(x))))  # (3)
        return x

    def forward_explicit(
        self, x: torch.Tensor, grid: tuple[int, int] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        a, probs = self.attn.forward_explicit(self.norm1(x), grid)
        x = x + self.drop_path(self.ls1(a))
        x = x + self.drop_path(self.ls2(self.mlp(self.norm2(x))))
        return x, probs


def build_backbone(config: Backbone | None, *, in_chans: int) -> nn.Module | None:
    """A hybrid's CNN (a BiT ResNet or a conv stem), None for a plain ViT; `.out_channels` is what E reads."""
    if config is None:
        return None
    if isinstance(config, ConvStemConfig):
        return ConvStem(config, in_chans=in_chans)
    return ResNetBackbone(config, in_chans=in_chans)


def check_room(config: ViTConfig, batch: int = 1, what: str = "", hint: str = "choose a smaller --image-size") -> None:
    """Raise ConfigError before a model of `config` is built (or resized) if it and a forward pass over `batch`
    images at its resolution cannot fit in the memory this process may use; `what` names the flags that chose them."""
    h, w = config.image_size
    check_batch_room(
        batch, config.image_size, config.in_chans, what or f"image size {h}x{w}", ConfigError, hint=hint,
        tokens=config.num_prefix_tokens + config.num_patches, width=config.width, mlp=config.mlp_dim,
    )  # fmt: skip


class VisionTransformer(TimmInterface, nn.Module):
    """ViT and hybrid ViT. Build with a `ViTConfig` (or `vitkit.create_model(name)`).

    forward_features(x) -> (B, prefix + N, D) tokens after the final LayerNorm
    forward_head(tokens, pre_logits=False) -> pooled features or logits
    forward(x) -> logits (DeiT's distilled model while training: class-token and distillation-token logits)
    forward_intermediates(x, indices) -> (final tokens, [z_l of the layers asked for])

    timm's model API (`interface.TimmInterface`): num_classes, num_features = embed_dim = D, get_classifier,
    reset_classifier, pretrained_cfg, group_matcher, feature_info (one entry per block), prune_intermediate_layers.
    """

    def __init__(self, config: ViTConfig | None = None, **overrides):
        super().__init__()
        config = (config or ViTConfig()).replace(**overrides)
        check_room(config)
        self.config = c = config
        D = c.width
        self.backbone = build_backbone(c.backbone, in_chans=c.in_chans)
        embed_in = self.backbone.out_channels if self.backbone else c.in_chans
        self.patch_embed = nn.Conv2d(embed_in, D, kernel_size=c.patch_size, stride=c.patch_size, bias=c.patch_bias)  # E
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D)) if c.classifier == "token" else None
        self.dist_token = dist_token(D) if c.distilled else None  # DeiT (models/distill.py)
        self.reg_token = nn.Parameter(torch.randn(1, c.reg_tokens, D) * 1e-6) if c.reg_tokens else None
        self.pos_embed: torch.Tensor | None
        if c.pos_embed == "learned":
            self.pos_embed = nn.Parameter(torch.randn(1, c.pos_prefix_tokens + c.num_patches, D) * 0.02)
        elif c.pos_embed == "learned_2d":  # E_pos[i, j] = [row_i; col_j], built in position_embedding()
            self.pos_embed = None
            self.pos_embed_row = nn.Parameter(torch.randn(c.grid_size[0], D // 2) * 0.02)
            self.pos_embed_col = nn.Parameter(torch.randn(c.grid_size[1], D // 2) * 0.02)
        elif c.pos_embed == "sincos2d":
            self.register_buffer(
                "pos_embed", sincos_2d_pos_embed(c.grid_size, D, c.pos_prefix_tokens), persistent=False
            )
        else:
            self.pos_embed = None
        self.pos_drop = nn.Dropout(c.dropout)
        self.norm_pre = nn.LayerNorm(D, eps=c.layer_norm_eps) if c.pre_norm else nn.Identity()
        rates = [c.drop_path * i / max(c.depth - 1, 1) for i in range(c.depth)]  # 0 ... drop_path
        self.blocks = nn.ModuleList(Block(c, drop_path=r) for r in rates)
        self.norm = nn.LayerNorm(D, eps=c.layer_norm_eps) if c.final_norm else nn.Identity()
        self.attn_pool = AttentionPool(c) if c.classifier == "map" else None
        self.pre_logits = self._make_pre_logits(c.representation_size)
        self.head = self._make_head(c.num_classes)
        self.head_dist = self._make_head(c.num_classes) if c.distilled else None
        self.grad_checkpointing = False  # recompute each block in backward instead of storing activations
        self._grid_cache: dict = {}  # E_pos per input grid (dynamic_img_size), `intermediates.cached`
        self._init_weights()

    # -- construction -------------------------------------------------------------------
    def _make_pre_logits(self, size: int | None) -> nn.Module:
        if size is None:
            return nn.Identity()
        layer = nn.Sequential(nn.Linear(self.config.width, size), nn.Tanh())
        _lecun_normal_(layer[0].weight)
        nn.init.zeros_(layer[0].bias)
        return layer

    def _make_head(self, num_classes: int) -> nn.Module:
        if num_classes == 0:
            return nn.Identity()
        head = nn.Linear(self.head_hidden_size, num_classes)
        nn.init.zeros_(head.weight)  # fine-tuning starts from a zero-initialised D x K layer
        nn.init.zeros_(head.bias)
        return head

    def _init_weights(self) -> None:
        """The official initialisation: Xavier-uniform dense layers, LeCun-normal patch embedding; attention mimetic
        where the config says so."""
        _lecun_normal_(self.patch_embed.weight)
        if self.patch_embed.bias is not None:
            nn.init.zeros_(self.patch_embed.bias)
        if self.attn_pool is not None:
            nn.init.trunc_normal_(self.attn_pool.probe, std=self.config.width**-0.5)
        for block in self.blocks:
            for q_k_or_v in block.attn.qkv.weight.chunk(3, dim=0):
                nn.init.xavier_uniform_(q_k_or_v)
            nn.init.zeros_(block.attn.qkv.bias)
            nn.init.xavier_uniform_(block.attn.proj.weight)
            nn.init.zeros_(block.attn.proj.bias)
            for fc in (block.mlp.fc1, block.mlp.fc2):  # (SwiGLU's fc1 holds gate and value)
                nn.init.xavier_uniform_(fc.weight)
                nn.init.normal_(fc.bias, std=1e-6)
            if self.config.attention_init == "mimetic":
                _mimetic_(block.attn)

    # -- forward ------------------------------------------------------------------------
    def embed(self, x: torch.Tensor, corrupt: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """Eq. 1: (B, C, H, W) images -> (B, prefix + N, D) tokens with position embeddings added; the registers
        (which carry no position) join after the class token, and CLIP's LayerNorm (`pre_norm`) follows.

        `corrupt` maps the (B, N, D) patch embeddings x_p^i E to new ones before the class token and
        E_pos join them (masked patch prediction, paper §4.6).
        """
        grid = self.input_grid(x)
        if self.backbone is not None:
            x = self.backbone(x)  # (B, C', H/s, W/s)
        x = self.patch_tokens(x)  # (B, N, D)
        if corrupt is not None:
            x = corrupt(x)
        prefix = [t.expand(x.shape[0], -1, -1) for t in (self.cls_token, self.dist_token) if t is not None]
        x = torch.cat([*prefix, x], dim=1) if prefix else x  # (B, prefix + N, D)
        pos = self.position_embedding(grid)
        if pos is not None:
            x = x + pos
        if self.reg_token is not None:
            p = self.config.pos_prefix_tokens
            x = torch.cat([x[:, :p], self.reg_token.expand(x.shape[0], -1, -1), x[:, p:]], dim=1)  # (B, prefix + N, D)
        return self.norm_pre(self.pos_drop(x))

    def input_grid(self, x: torch.Tensor) -> tuple[int, int]:
        """The (h, w) grid of patches of images `x`, (B, C, H, W): the configured image size, or with
        `dynamic_img_size` any size whose sides are multiples of the patch size (of the backbone's stride x patch)."""
        c = self.config
        if x.ndim != 4 or x.shape[1] != c.in_chans or (not c.dynamic_img_size and tuple(x.shape[-2:]) != c.image_size):
            raise ConfigError(
                f"input: expected images of shape (B, {c.in_chans}, {c.image_size[0]}, {c.image_size[1]}), "
                f"got {tuple(x.shape)}; resize the images or call model.set_image_size(...)"
            )
        if not c.dynamic_img_size:
            return c.grid_size
        (H, W), (ph, pw) = x.shape[-2:], c.total_patch_size
        if H % ph or W % pw:
            raise ConfigError(
                f"input: {H}x{W} images do not divide into {ph}x{pw} patches; with model.dynamic_img_size each side "
                f"must be a multiple of the patch size, e.g. {max(H // ph, 1) * ph}x{max(W // pw, 1) * pw}"
            )
        return (H // ph, W // pw)

    def patch_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """x_p^i E of Eq. 1 for every patch: (B, C, H, W) -> (B, N, D), patches in row-major order.

        E is stored as a strided convolution (the official checkpoints' layout)."""
        return self.patch_embed(x).flatten(2).transpose(1, 2)

    def position_embedding(self, grid: tuple[int, int] | None = None) -> torch.Tensor | None:
        """E_pos of Eq. 1 as added to the tokens, (1, prefix + N, D); None without one (relative, none).

        `grid`: an input's (h, w) patches other than the configured grid (`dynamic_img_size`): E_pos resampled to it
        as `set_image_size` resamples it, kept per grid while the weights are unchanged."""
        c = self.config
        if c.pos_embed in ("relative", "none"):
            return None
        # the stored embedding at the configured grid; a tracer keeps a dynamic grid symbolic: that one is resampled
        if grid is None or not c.dynamic_img_size or (tuple(grid) == c.grid_size and not tracing()):
            return self._pos_embed_at(c.grid_size, resample=False)
        sources = [self.pos_embed_row, self.pos_embed_col] if c.pos_embed == "learned_2d" else [self.pos_embed]
        return cached(self._grid_cache, tuple(grid), sources, lambda: self._pos_embed_at(grid, resample=True))

    def _pos_embed_at(self, grid: tuple[int, int], *, resample: bool) -> torch.Tensor:
        """E_pos on `grid`; `resample`: from the weights of the configured grid (which it need not differ from)."""
        c, (gh, gw) = self.config, grid
        if c.pos_embed == "sincos2d":
            pe = sincos_2d_pos_embed(grid, c.width, c.pos_prefix_tokens) if resample else self.pos_embed
            return pe.to(self.pos_embed.device)
        if c.pos_embed == "learned":
            if not resample:
                return self.pos_embed
            p = c.pos_prefix_tokens
            patches = _interpolate_grid(self.pos_embed[:, p:], c.grid_size, grid, c.pos_embed_resample)
            return torch.cat([self.pos_embed[:, :p], patches], dim=1)
        rows, cols = self.pos_embed_row, self.pos_embed_col  # learned_2d: [row_i; col_j]
        if resample:
            rows, cols = _interpolate_1d(rows, gh), _interpolate_1d(cols, gw)
        half = c.width // 2
        pe = torch.cat([rows[:, None].expand(gh, gw, half), cols[None].expand(gh, gw, half)], dim=-1)
        return F.pad(pe.reshape(1, gh * gw, 2 * half), (0, 0, c.pos_prefix_tokens, 0))  # the class token: no position

    def forward_features(
        self,
        x: torch.Tensor,
        corrupt: Callable[[torch.Tensor], torch.Tensor] | None = None,
        *,
        class_token_only: bool = False,
    ) -> torch.Tensor:
        """Eq. 1-3 and the final LayerNorm: (B, C, H, W) -> (B, prefix + N, D).

        class_token_only: the last layer computes the class token alone, (B, 1, D): all Eq. 4 reads,
        with one layer's MLP and attention output for one token instead of T (ViT-S/16: 7% fewer FLOPs).
        """
        grid = self.input_grid(x)
        x = self.embed(x, corrupt)
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            x = self._block(block, x, grid, class_token_only=class_token_only and i == last)
        return self.norm(x)

    def _block(self, block: Block, x: torch.Tensor, grid: tuple[int, int], *, class_token_only: bool = False):
        """One layer, Eq. 2-3; recomputed in backward where activation checkpointing is on."""
        grid = grid if self.config.dynamic_img_size else None  # None: the configured grid, as the blocks were built
        if self.grad_checkpointing and self.training:
            return checkpoint(block, x, class_token_only=class_token_only, grid=grid, use_reentrant=False)
        return block(x, class_token_only=class_token_only, grid=grid)

    def forward_features_explicit(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """forward_features through the explicit attention path; also the (B, nh, T, T) maps per layer."""
        grid = self.input_grid(x)
        x = self.embed(x)
        maps = []
        for block in self.blocks:
            x, probs = block.forward_explicit(x, grid if self.config.dynamic_img_size else None)
            maps.append(probs)
        return self.norm(x), maps

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | list[int] | None = None,
        *,
        norm: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
        return_prefix_tokens: bool = False,
        stop_early: bool = False,
    ) -> list | tuple[torch.Tensor, list]:
        """The outputs z_l of the layers `indices` picks (None: all; n: the last n; a list: those, -1 the last), in
        layer order, with timm's semantics:

            norm                  the final LayerNorm applied to each (z_L normed is forward_features' tokens)
            output_fmt            "NCHW": patch tokens as (B, D, h, w); "NLC": (B, N, D)
            return_prefix_tokens  each entry is (patch tokens, the class token (B, 1, D)) instead
            intermediates_only    return the list alone; else (forward_features' tokens, the list)
            stop_early            run no layer after the last one asked for (the final tokens are then its, normed)
        """
        check_output_fmt(output_fmt)
        take = take_indices(self.levels, indices)
        grid = self.input_grid(x)
        x = self.embed(x)
        taken = [] if self.blocks else [self.norm(x) if norm else x]  # a conv net's one level: its embedded map
        for i, block in enumerate(self.blocks[: take[-1] + 1] if stop_early else self.blocks):
            x = self._block(block, x, grid)
            if i in take:
                taken.append(self.norm(x) if norm else x)  # (B, prefix + N, D)
        p = self.config.num_prefix_tokens
        out = [z[:, p:] for z in taken]  # (B, N, D)
        if output_fmt == "NCHW":
            out = [z.reshape(z.shape[0], *grid, -1).permute(0, 3, 1, 2) for z in out]  # (B, D, h, w)
        if return_prefix_tokens:
            out = [(z, t[:, :p]) for z, t in zip(out, taken)]
        return out if intermediates_only else (self.norm(x), out)

    def forward_head(self, tokens: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Pool (class token, Eq. 4; mean of the patch tokens; or attention pooling over them), the pre-logits layer,
        the head."""
        if self.head_dist is not None:  # DeiT: the class and distillation tokens, a head each
            return two_heads(tokens, self.head, self.head_dist, pre_logits=pre_logits, training=self.training)
        if self.config.head_pool != "classifier":  # CLIP's and DINOv2's image classification heads
            y = pool_tokens(tokens, self.config.head_pool, self.config.num_prefix_tokens)
        elif self.config.classifier == "token":
            y = tokens[:, 0]
        elif self.attn_pool is not None:
            y = self.attn_pool(tokens[:, self.config.num_prefix_tokens :])
        else:
            y = tokens[:, self.config.num_prefix_tokens :].mean(dim=1)
        y = self.pre_logits(y)
        return y if pre_logits else self.head(y)

    def forward(self, x: torch.Tensor, *, pre_logits: bool = False) -> torch.Tensor:
        """Logits (or, with pre_logits=True, the pooled features the head reads)."""
        # the other tokens' last layer is never read (DeiT's heads read two)
        c = self.config
        class_token_only = c.classifier == "token" and not c.distilled and c.head_pool == "classifier"
        return self.forward_head(self.forward_features(x, class_token_only=class_token_only), pre_logits=pre_logits)

    # -- surgery for transfer -----------------------------------------------------------
    def reset_head(self, num_classes: int, *, keep_pre_logits: bool = True) -> None:
        """A fresh zero-initialised head for `num_classes`; optionally drop the pre-logits layer."""
        representation_size = self.config.representation_size if keep_pre_logits else None
        self.config = self.config.replace(num_classes=num_classes, representation_size=representation_size)
        if not keep_pre_logits:
            self.pre_logits = nn.Identity()
        device = next(self.parameters()).device
        self.head = self._make_head(num_classes).to(device)
        if self.head_dist is not None:
            self.head_dist = self._make_head(num_classes).to(device)

    def set_image_size(self, image_size: int | tuple[int, int]) -> None:
        """Change the input resolution; learned position embeddings are resampled (paper §3.2)."""
        old_grid = self.config.grid_size
        check_room(self.config.replace(image_size=image_size))
        self._grid_cache.clear()
        self.config = self.config.replace(image_size=image_size)
        new_grid = self.config.grid_size
        if self.config.pos_embed == "learned":
            c = self.config
            resampled = resample_pos_embed(
                self.pos_embed.data, new_grid, old_grid=old_grid, num_prefix_tokens=c.pos_prefix_tokens,
                mode=c.pos_embed_resample,
            )  # fmt: skip
            self.pos_embed = nn.Parameter(resampled)
        elif self.config.pos_embed == "sincos2d":
            pe = sincos_2d_pos_embed(new_grid, self.config.width, self.config.pos_prefix_tokens)
            self.pos_embed = pe.to(next(self.parameters()).device)
        elif self.config.pos_embed == "learned_2d":  # each axis linearly, corners onto corners
            self.pos_embed_row = nn.Parameter(_resample_1d(self.pos_embed_row.data, new_grid[0]))
            self.pos_embed_col = nn.Parameter(_resample_1d(self.pos_embed_col.data, new_grid[1]))
        elif self.config.pos_embed == "relative":
            for block in self.blocks:
                block.attn.position_bias.resize(new_grid)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Activation checkpointing per block: less memory in training for one more forward pass."""
        self.grad_checkpointing = enable

    def no_weight_decay(self) -> set[str]:
        """Parameter names that take no weight decay besides norms and biases."""
        names = {
            "cls_token",
            "dist_token",
            "reg_token",
            "pos_embed",
            "pos_embed_row",
            "pos_embed_col",
            "attn_pool.probe",
        }
        return names | {f"blocks.{i}.attn.position_bias.table" for i in range(len(self.blocks))}

    # -- timm's model API (interface.TimmInterface has the rest) ----------------------------
    @property
    def num_features(self) -> int:
        """D, the width of forward_features' tokens."""
        return self.config.width

    embed_dim = num_features

    @property
    def head_hidden_size(self) -> int:
        """The width the head reads: the pre-logits layer's, 2D for head_pool=cls_mean, else D."""
        c = self.config
        return c.representation_size or c.width * (2 if c.head_pool == "cls_mean" else 1)

    @property
    def global_pool(self) -> str:
        return "token" if self.config.classifier == "token" else "avg"

    @property
    def first_conv(self) -> str:
        if isinstance(self.backbone, ConvStem):
            return "backbone.convs.0"
        return "backbone.stem_conv" if self.backbone is not None else "patch_embed"

    def group_matcher(self, coarse: bool = False) -> dict:
        """Parameter groups as timm's layer-decay helpers read them: the embedding (hybrid CNN, patch and position
        embeddings, class token) first, then each block, the final norm with the last block; the head matches none."""
        return {
            "stem": r"^cls_token|^reg_token|^pos_embed|^patch_embed|^backbone|^norm_pre",
            "blocks": [(r"^blocks\.(\d+)", None), (r"^norm", (99999,))],
        }

    @property
    def feature_info(self) -> list[dict]:
        """One level per block: D channels, each cell `total_patch_size` pixels (one int for square patches)."""
        ph, pw = self.config.total_patch_size
        names = [f"blocks.{i}" for i in range(self.config.depth)] or ["patch_embed"]  # a conv net: its embedded map
        return [feature_level(name, self.config.width, ph if ph == pw else (ph, pw)) for name in names]

    @property
    def levels(self) -> int:
        """How many levels forward_intermediates numbers: one per block, or for a conv net (depth 0) its embedded map."""
        return max(len(self.blocks), 1)

    def prune_intermediate_layers(
        self, indices: int | list[int] = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """Drop the blocks after the last of `indices` (and the final norm, the head where asked), as timm's
        features_only does; returns the blocks `indices` picks (forward_intermediates' numbering)."""
        take = take_indices(self.levels, indices)
        self.blocks = self.blocks[: take[-1] + 1]
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.reset_head(0, keep_pre_logits=False)
        return take


# -- position embeddings ------------------------------------------------------------------
class RelativePositionBias(nn.Module):
    """App. D.4 "relative": a learned bias per head for each 2D offset (dy, dx) between a query and a key patch.

    forward() -> (nh, T, T) added to the attention logits; the class token's rows and columns get none.
    """

    def __init__(self, grid: tuple[int, int], num_heads: int, num_prefix_tokens: int):
        super().__init__()
        self.num_prefix_tokens = num_prefix_tokens
        # offsets -(g-1) .. g-1
        self.table = nn.Parameter(torch.randn(num_heads, 2 * grid[0] - 1, 2 * grid[1] - 1) * 0.02)
        self.register_buffer("index", _offset_index(grid), persistent=False)
        self.grid = tuple(grid)
        self._grid_cache: dict = {}  # table and index per input grid (dynamic_img_size)

    def forward(self, grid: tuple[int, int] | None = None) -> torch.Tensor:
        """(nh, T, T) for the configured grid, or for an input's `grid` (the table resampled as `resize` does it,
        kept per grid while the table is unchanged)."""
        if grid is None or (tuple(grid) == self.grid and not tracing()):
            table, index = self.table, self.index
        else:
            table = cached(self._grid_cache, ("table", *grid), [self.table], lambda: _resample_table(self.table, grid))
            index = cached(
                self._grid_cache, ("index", *grid), [self.table], lambda: _offset_index(grid, self.table.device)
            )
        bias = table.flatten(1)[:, index]  # (nh, N, N)
        p = self.num_prefix_tokens
        return F.pad(bias, (p, 0, p, 0))  # (nh, T, T)

    def resize(self, grid: tuple[int, int]) -> None:
        """A new grid: the table of offsets resampled linearly (offset 0 stays in the centre)."""
        if tuple(self.table.shape[1:]) != (2 * grid[0] - 1, 2 * grid[1] - 1):
            self.table = nn.Parameter(_resample_table(self.table.data, grid))
        self.index = _offset_index(grid).to(self.table.device)
        self.grid = tuple(grid)


def _resample_table(table: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """A (nh, 2h-1, 2w-1) table of offsets resampled linearly to `grid`'s offsets (offset 0 stays in the centre)."""
    size = (2 * grid[0] - 1, 2 * grid[1] - 1)
    return F.interpolate(table[None].float(), size=size, mode="bilinear", align_corners=True)[0].to(table.dtype)


def _offset_index(grid: tuple[int, int], device: torch.device | None = None) -> torch.Tensor:
    """(N, N) index into a flattened (2h-1, 2w-1) table: the offset of patch j from patch i."""
    h, w = grid
    ys, xs = torch.meshgrid(torch.arange(h, device=device), torch.arange(w, device=device), indexing="ij")
    ys, xs = ys.flatten(), xs.flatten()
    dy = ys[:, None] - ys[None] + h - 1  # (N, N) in 0 .. 2h-2
    dx = xs[:, None] - xs[None] + w - 1
    return dy * (2 * w - 1) + dx


def _resample_1d(emb: torch.Tensor, size: int) -> torch.Tensor:
    """(n, d) embeddings of n positions along one axis, linearly interpolated to `size` positions."""
    if emb.shape[0] == size:
        return emb
    return _interpolate_1d(emb, size).contiguous()


def _interpolate_1d(emb: torch.Tensor, size: int) -> torch.Tensor:
    """`_resample_1d` without its shortcut for the same size (a traced size may be symbolic); differentiable."""
    return F.interpolate(emb.T[None].float(), size=size, mode="linear", align_corners=True)[0].T.to(emb.dtype)


def _interpolate_grid(
    grid: torch.Tensor, old_grid: tuple[int, int], new_grid: tuple[int, int], mode: str = "bilinear"
) -> torch.Tensor:
    """(1, h*w, D) embeddings of `old_grid` resampled to `new_grid` as `mode` (config.POS_RESAMPLES) says: "bilinear",
    corners onto corners; "bicubic", corners not aligned; "bicubic_antialias", the same, antialiased where it shrinks.
    No shortcut for the same grid (a traced grid may be symbolic); differentiable."""
    D = grid.shape[-1]
    work = grid.reshape(1, old_grid[0], old_grid[1], D).permute(0, 3, 1, 2)  # (1, D, h, w)
    dtype = work.dtype
    work = work if dtype in (torch.float32, torch.float64) else work.float()  # low precision interpolated in fp32
    out = F.interpolate(
        work, size=tuple(new_grid), mode="bilinear" if mode == "bilinear" else "bicubic",
        align_corners=(mode == "bilinear"), antialias=(mode == "bicubic_antialias"),
    ).to(dtype)  # fmt: skip
    return out.permute(0, 2, 3, 1).reshape(1, -1, D)


def resample_pos_embed(
    posemb: torch.Tensor,
    new_grid: tuple[int, int],
    *,
    old_grid: tuple[int, int] | None = None,
    num_prefix_tokens: int = 1,
    mode: str = "bilinear",
) -> torch.Tensor:
    """2D-interpolate a (1, prefix + h*w, D) position embedding to a new (h', w') grid.

    The class-token slot is kept as is. "bilinear" maps the corner patches onto each other, which
    is what the official code's scipy.ndimage.zoom(order=1) does; "bicubic" (corners not aligned) is DINOv2's and
    CLIP's in transformers, "bicubic_antialias" timm's. The same grid returns the input unchanged.
    """
    prefix, grid = posemb[:, :num_prefix_tokens], posemb[:, num_prefix_tokens:]
    n = grid.shape[1]
    if old_grid is None:
        side = math.isqrt(n)
        if side * side != n:
            raise ConfigError(f"pos_embed: {n} positions are not a square grid; pass old_grid=(h, w)")
        old_grid = (side, side)
    if old_grid[0] * old_grid[1] != n:
        raise ConfigError(f"pos_embed: {n} positions do not form the grid {old_grid}")
    new_grid = tuple(new_grid)
    if tuple(old_grid) == new_grid:
        return posemb
    if mode not in POS_RESAMPLES:
        raise ConfigError(f"mode: expected one of {', '.join(POS_RESAMPLES)}, got {mode!r}")
    return torch.cat([prefix, _interpolate_grid(grid, old_grid, new_grid, mode)], dim=1)


def sincos_2d_pos_embed(
    grid: tuple[int, int], width: int, num_prefix_tokens: int = 1, temperature: float = 10_000.0
) -> torch.Tensor:
    """Fixed 2D sine-cosine position embedding (1, prefix + h*w, D); the prefix slots are zero."""
    h, w = grid
    quarter = width // 4
    omega = 1.0 / temperature ** (torch.arange(quarter, dtype=torch.float64) / max(quarter - 1, 1))
    y, x = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64), indexing="ij")
    x = x.flatten()[:, None] * omega[None]  # (N, D/4)
    y = y.flatten()[:, None] * omega[None]
    pe = torch.cat([x.sin(), x.cos(), y.sin(), y.cos()], dim=1).float()  # (N, D)
    return torch.cat([torch.zeros(num_prefix_tokens, width), pe])[None]


def _mimetic_(attn: Attention, qk: tuple[float, float] = (0.7, 0.7), vo: tuple[float, float] = (0.4, 0.4)) -> None:
    """Mimetic initialisation (Trockman & Kolter 2023, their ViT values): each head's W_q^T W_k is a rank-d_head
    approximation of a Z + b I, and over all heads W_v^T W_o^T is a Z - b I (Z ~ N(0, 1/D)), as in trained ViTs: a
    token starts out attending most to tokens like itself, and attention's output near minus the mix it reads. The
    biases stay zero."""
    d, hd = attn.proj.in_features, attn.head_dim
    wq, wk, wv = attn.qkv.weight.detach().chunk(3, dim=0)
    with torch.no_grad():
        for h in range(attn.num_heads):
            rows = slice(h * hd, (h + 1) * hd)
            wq[rows], wk[rows] = _split(_near_identity(d, *qk), hd)
        left, right = _split(_near_identity(d, vo[0], -vo[1]), d)
        wv.copy_(left)
        attn.proj.weight.copy_(right.T)


def _near_identity(d: int, a: float, b: float) -> torch.Tensor:
    """a Z + b I, Z a (d, d) Gaussian of variance 1/d."""
    return a * torch.randn(d, d) / math.sqrt(d) + b * torch.eye(d)


def _split(m: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(k, d) A and B whose A^T B is m (k = d) or a rank-k approximation of it, m's singular values shared evenly:
    m = U S V^T, A = S^1/2 U^T, B = S^1/2 V^T. Cheap forms of the SVD (a full one per head, cubic in D, is slow on a
    large ViT): a randomized one for rank k, and for all of m the eigenvectors V of m^T m, with U S^1/2 = m V S^-1/2."""
    if k < len(m):
        u, s, v = torch.svd_lowrank(m, q=k, niter=2)
        return (u * s.sqrt()).T, (v * s.sqrt()).T
    squares, v = torch.linalg.eigh(m.T @ m)
    root = squares.clamp_min(1e-12).sqrt().sqrt()  # S^1/2
    return (m @ v / root).T, (v * root).T


def _lecun_normal_(weight: torch.Tensor) -> None:
    """Truncated normal with variance 1 / fan_in (Flax's default kernel initialiser)."""
    fan_in = weight[0].numel()
    std = math.sqrt(1.0 / fan_in) / 0.87962566103423978  # the std of a normal truncated at +-2
    nn.init.trunc_normal_(weight, std=std, a=-2 * std, b=2 * std)
