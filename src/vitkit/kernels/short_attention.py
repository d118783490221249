"""Attention written out for training short sequences in fp32 on the CPU: the same sums as torch's fused kernel,
whose CPU backward works block by block and so loses to plain matmuls where the sequence is short.

    short_attention.install(model)   # where the model for training is built; a no-op for models without attention

The rule (`written_out_is_faster`) is checked on every call: fp32 on the CPU with gradients, at most
WRITTEN_OUT_MAX_TOKENS tokens and WRITTEN_OUT_MAX_SCORES attention scores; everything else, inference included,
keeps the model's fused path. benchmarks/cpu_short_attention.py measures both sides of the rule.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# The rule stays well inside the region where written out wins: the gain shrinks as the sequence grows and turns
# into a loss around 200 tokens. The probabilities kept for backward are capped (16 MB a layer in fp32).
WRITTEN_OUT_MAX_TOKENS = 100
WRITTEN_OUT_MAX_SCORES = 4_000_000


def written_out_is_faster(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether attention over q (B, nh, Tq, hd) and k (B, nh, T, hd) runs written out: fp32 on the CPU with
    gradients, short sequences, never while torch.compile or torch.export trace the model (they keep the fused op)."""
    B, nh, Tq, _ = q.shape
    T = k.shape[2]
    return (
        q.device.type == "cpu"
        and q.dtype == torch.float32
        and q.requires_grad
        and torch.is_grad_enabled()
        and T <= WRITTEN_OUT_MAX_TOKENS
        and B * nh * Tq * T <= WRITTEN_OUT_MAX_SCORES
        and not torch.compiler.is_compiling()
    )


def written_out(attention: nn.Module, x: torch.Tensor, bias: torch.Tensor | None, queries: int | None) -> torch.Tensor:
    """An attention core (vitkit.models.vit.AttentionCore): softmax(Q K^T / sqrt(d_head) + bias) V as matmuls where
    `written_out_is_faster`, else torch's fused kernel on the same Q, K and V."""
    q, k, v = attention.project(x, queries)
    dropout = attention.attn_dropout if attention.training else 0.0
    if written_out_is_faster(q, k):
        y = F.dropout(attention.probabilities(q, k, bias), dropout, attention.training) @ v
    else:
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout)
    return attention.merge_heads(y)


def install(model: nn.Module) -> nn.Module:
    """Every attention layer of `model` through `written_out` (VisionTransformer.set_attention_core); returns the
    model, unchanged where it has no attention."""
    if hasattr(model, "set_attention_core"):
        model.set_attention_core(written_out)
    return model
