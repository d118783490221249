"""Inference kernels for a transformer block's two hot spots, and the attention core that runs them.

`VisionTransformer.set_inference_kernels(kernels)` installs `KernelAttention(kernels.attention)` as each block's
`Attention.core` and `kernels.bias_gelu_` as its `Mlp.kernel`; vitkit.kernels.cpu_inference is one such set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn


class InferenceKernels(Protocol):
    """Stand-ins for a block's two hot spots in inference (eval mode, no gradients); a module may be one."""

    def attention(self, qkv: torch.Tensor, bias: torch.Tensor, num_heads: int) -> torch.Tensor:
        """(B, T, 3D) fused Q/K/V projections before their bias -> (B, T, D), heads side by side."""
        ...

    def bias_gelu_(self, h: torch.Tensor, bias: torch.Tensor, approximate: bool) -> torch.Tensor:
        """GELU(h + bias), the tanh form if `approximate`; may write over h. None: the MLP keeps torch's ops."""
        ...


class KernelAttention:
    """An attention core (vitkit.models.vit.AttentionCore) running an inference kernel: in eval mode without
    gradients, over every token and with no position bias; elsewhere the model's fused path.

    Holds the kernel function, not the kernels' module: a model with it still deep-copies."""

    def __init__(self, attention: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]):
        self.attention = attention

    def __call__(
        self, attention: nn.Module, x: torch.Tensor, bias: torch.Tensor | None, queries: int | None
    ) -> torch.Tensor:
        if queries is None and bias is None and not (attention.training or torch.is_grad_enabled()):
            qkv = F.linear(x, attention.qkv.weight)  # the kernel adds the bias
            return self.attention(qkv, attention.qkv.bias, attention.num_heads)
        return attention.fused(x, bias, queries)
