"""The patch embedding E of Eq. 1 as one GEMM for bf16 inference on the CPU, swapped in through vitkit.kernels.swap.

E is stored as a strided convolution (the official checkpoints' layout). A bf16 convolution over so few input
channels (3) makes poor use of the CPU's matrix units, where one GEMM over all patches, as Eq. 1 writes it, keeps them
busy. `install(model)` makes the model's patch embedding a `PatchGemm`; vitkit.inference.precision installs it on
its bf16 copy of a model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.kernels import swap


class PatchGemm(nn.Conv2d):
    """The patch embedding's convolution (kernel = stride, no padding) that, for bf16 CPU inference, multiplies the
    flattened patches by E instead: the same (B, D, h, w) output; elsewhere the convolution."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ph, pw = self.kernel_size
        B, C, H, W = x.shape
        if x.device.type != "cpu" or x.dtype != torch.bfloat16 or self.training or torch.is_grad_enabled():
            return super().forward(x)
        if H % ph or W % pw:
            return super().forward(x)
        h, w = H // ph, W // pw
        # (B, N, C * ph * pw), patches in row-major order
        patches = x.reshape(B, C, h, ph, w, pw).permute(0, 2, 4, 1, 3, 5).reshape(B, h * w, C * ph * pw)
        tokens = F.linear(patches, self.weight.reshape(self.out_channels, -1), self.bias)
        # (B, D, h, w), a view of the (B, N, D) tokens
        return tokens.transpose(1, 2).view(B, self.out_channels, h, w)


def _takes(module: nn.Module) -> bool:
    return (
        type(module) is nn.Conv2d
        and module.stride == module.kernel_size
        and module.padding == (0, 0)
        and module.dilation == (1, 1)
        and module.groups == 1
    )


def install(model: nn.Module) -> nn.Module:
    """`model.patch_embed` as a `PatchGemm` where it is a patch convolution; returns the model."""
    embed = getattr(model, "patch_embed", None)
    if embed is not None and _takes(embed):
        model.patch_embed = swap.adopt(PatchGemm, embed)
    return model
