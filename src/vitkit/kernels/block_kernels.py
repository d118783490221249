"""Inference kernels for a transformer block's two hot spots, swapped in through vitkit.kernels.swap.

    block_kernels.install(model, kernels)          # eval + no_grad only; training keeps torch's ops
    with block_kernels.installed(model, kernels):  # for one call; afterwards the model is as it was

Each block's attention becomes a `KernelAttention` running `kernels.attention`, and its MLP a `BiasGeluMlp` running
`kernels.bias_gelu_` (where the set has one); vitkit.kernels.cpu_inference is one such set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.kernels import swap

# what a model's attention and MLP offer that the swap-ins override and call (vitkit.models.vit's Attention and Mlp)
ATTENTION = ("fused", "qkv", "num_heads")
MLP = ("fc1", "act", "fc2")


class InferenceKernels(Protocol):
    """Stand-ins for a block's two hot spots in inference (eval mode, no gradients); a module may be one."""

    def attention(self, qkv: torch.Tensor, bias: torch.Tensor, num_heads: int) -> torch.Tensor:
        """(B, T, 3D) fused Q/K/V projections before their bias -> (B, T, D), heads side by side."""
        ...

    def bias_gelu_(self, h: torch.Tensor, bias: torch.Tensor, approximate: bool) -> torch.Tensor:
        """GELU(h + bias), the tanh form if `approximate`; may write over h. None: the MLP keeps torch's ops."""
        ...


def _inference(module: nn.Module) -> bool:
    return not (module.training or torch.is_grad_enabled())


class KernelAttention:
    """A swap-in for attention (vitkit.kernels.swap) whose fused path runs an inference kernel (`kernel`, InferenceKernels.attention): in eval mode
    without gradients, over every token and with no position bias; elsewhere the model's own fused path.

    Holds the kernel function, not the kernels' module: a model with it still deep-copies."""

    kernel: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]

    def fused(self, x: torch.Tensor, bias: torch.Tensor | None, queries: int | None) -> torch.Tensor:
        if queries is None and bias is None and _inference(self):
            # the kernel adds the bias
            qkv = F.linear(x, self.qkv.weight)
            return self.kernel(qkv, self.qkv.bias, self.num_heads)
        return super().fused(x, bias, queries)


class BiasGeluMlp:
    """A swap-in for the MLP (vitkit.kernels.swap) with fc1's bias and GELU in one pass (`bias_gelu_`, InferenceKernels.bias_gelu_) in eval mode without
    gradients; elsewhere the model's own."""

    bias_gelu_: Callable[[torch.Tensor, torch.Tensor, bool], torch.Tensor]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _inference(self):
            return super().forward(x)
        h = self.bias_gelu_(F.linear(x, self.fc1.weight), self.fc1.bias, self.act.approximate == "tanh")
        return self.fc2(h)


def takes_kernels(model: nn.Module) -> bool:
    """Whether `model` has attention or an MLP the kernels can stand in for (a BiT ResNet has neither)."""
    return any(_is_attention(m) or _is_mlp(m) for m in model.modules())


def _is_attention(module: nn.Module) -> bool:
    return swap.offers(module, *ATTENTION)


def _is_mlp(module: nn.Module) -> bool:
    """An MLP whose activation is GELU (the kernels compute GELU; CLIP's QuickGELU keeps torch's ops)."""
    return swap.offers(module, *MLP) and isinstance(module.act, nn.GELU) and not _is_attention(module)


def _swap_in(kernels: InferenceKernels, module: nn.Module) -> nn.Module | None:
    bias_gelu_ = getattr(kernels, "bias_gelu_", None)
    if _is_attention(module):
        return swap.adopt(KernelAttention, swap.plain(module), kernel=kernels.attention)
    if _is_mlp(module) and bias_gelu_ is not None:
        return swap.adopt(BiasGeluMlp, swap.plain(module), bias_gelu_=bias_gelu_)
    return None


def replacement(kernels: InferenceKernels) -> swap.Replace:
    """What vitkit.kernels.swap replaces to run `kernels`: each attention and MLP by its swap-in, the same swap-in
    for a module every time it is asked (a compiled graph then sees the same modules on every call)."""
    made: dict[nn.Module, nn.Module] = {}

    def replace(module: nn.Module) -> nn.Module | None:
        new = made.get(module)
        if new is None and (new := _swap_in(kernels, module)) is not None:
            made[module] = new
        if new is not None:
            new.training = module.training
        return new

    return replace


def install(model: nn.Module, kernels: InferenceKernels) -> nn.Module:
    """Every block's attention and MLP of `model` through `kernels` (inference only); returns the model."""
    swap.swap(model, replacement(kernels))
    return model


def installed(model: nn.Module, kernels: InferenceKernels):
    """`install(model, kernels)` inside a with block; afterwards the model has what it had before."""
    return swap.swapped(model, replacement(kernels))
