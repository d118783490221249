"""Attention written out for training short sequences on the CPU: the same sums as torch's fused kernel, whose CPU
backward works block by block and so loses to plain matmuls where the sequence is short (in bf16 by far: the fused
backward takes several times its forward).

    short_attention.install(model)   # where the model for training is built; a no-op for models without attention
    torch.compile(model, options=short_attention.compile_options(device))   # a compiled training graph keeps it

The rule (`written_out_is_faster`) is checked on every call: fp32 or bf16 (autocast) on the CPU with gradients, at most
WRITTEN_OUT_MAX_TOKENS tokens and WRITTEN_OUT_MAX_SCORES attention scores; everything else, inference and export
included, keeps the model's fused path. In bf16 the softmax runs in fp32, as the fused kernel's does.
benchmarks/cpu_short_attention.py measures both sides of the rule; benchmarks/cpu_train_precision.py the bf16 step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.kernels import swap

# what a model's attention offers that the swap-in overrides and calls (vitkit.models.vit's Attention)
ATTENTION = ("fused", "project", "probabilities", "merge_heads", "attn_dropout")

# The rule stays well inside the region where written out wins: the gain shrinks as the sequence grows and turns
# into a loss around 200 tokens. The probabilities kept for backward are capped (16 MB a layer in fp32).
WRITTEN_OUT_MAX_TOKENS = 100
WRITTEN_OUT_MAX_SCORES = 4_000_000


WRITTEN_OUT_DTYPES = (torch.float32, torch.bfloat16)


def written_out_is_faster(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether attention over q (B, nh, Tq, hd) and k (B, nh, T, hd) runs written out: fp32 or bf16 on the CPU with
    gradients, short sequences, never while torch.export traces the model (an exported graph keeps the fused op)."""
    B, nh, Tq, _ = q.shape
    T = k.shape[2]
    return (
        q.device.type == "cpu"
        and q.dtype in WRITTEN_OUT_DTYPES
        and q.requires_grad
        and torch.is_grad_enabled()
        and T <= WRITTEN_OUT_MAX_TOKENS
        and B * nh * Tq * T <= WRITTEN_OUT_MAX_SCORES
        and not torch.compiler.is_exporting()
    )


def compile_options(device: torch.device | str) -> dict[str, bool]:
    """torch.compile's inductor options for a training graph on `device`. On the CPU, without inductor's pattern pass,
    which would rewrite the written-out attention back into the fused op (and its slow backward)."""
    return {"pattern_matcher": False} if torch.device(device).type == "cpu" else {}


def _softmax_fp32(logits: torch.Tensor) -> torch.Tensor:
    """softmax over the last axis summed in fp32, returned in the scores' dtype (bf16 scores under autocast)."""
    return logits.float().softmax(-1).to(logits.dtype)


class WrittenOutAttention:
    """A swap-in for attention (vitkit.kernels.swap) whose fused path is softmax(Q K^T / sqrt(d_head) + bias) V as matmuls where `written_out_is_faster`,
    else torch's fused kernel on the same Q, K and V."""

    def fused(self, x: torch.Tensor, bias: torch.Tensor | None, queries: int | None) -> torch.Tensor:
        q, k, v = self.project(x, queries)
        dropout = self.attn_dropout if self.training else 0.0
        if written_out_is_faster(q, k):
            softmax = None if q.dtype == torch.float32 else _softmax_fp32
            y = F.dropout(self.probabilities(q, k, bias, softmax), dropout, self.training) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout)
        return self.merge_heads(y)


def _plain_attention(module: nn.Module) -> bool:
    return swap.offers(module, *ATTENTION) and not isinstance(module, WrittenOutAttention)


def install(model: nn.Module) -> nn.Module:
    """Every attention layer of `model` as `WrittenOutAttention` (vitkit.kernels.swap); returns the model, unchanged
    where it has no attention."""
    swap.swap(model, lambda m: swap.adopt(WrittenOutAttention, m) if _plain_attention(m) else None)
    return model
