"""A convolutional stem for hybrid ViTs (Xiao et al. 2021, "Early Convolutions Help Transformers See Better").

A few 3x3 stride-2 convolutions, each followed by BatchNorm and ReLU, in place of the BiT ResNet of the paper's
hybrid (§3.1): far cheaper on a CPU than GroupNorm bottleneck units. The ViT's patch embedding then makes the
tokens from the feature map (a 1x1 conv for patch_size 1, as in the paper's stem, which ends in a 1x1 conv).
"""

from __future__ import annotations

import torch
from torch import nn

from .config import ConvStemConfig


class ConvStem(nn.Module):
    """(B, C, H, W) -> (B, convs[-1], H / 2^n, W / 2^n): n times conv3x3/2 (no bias) -> BatchNorm -> ReLU."""

    def __init__(self, config: ConvStemConfig, *, in_chans: int):
        super().__init__()
        self.config = config
        layers: list[nn.Module] = []
        chans = in_chans
        for out in config.convs:
            layers += [nn.Conv2d(chans, out, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU()]
            chans = out
        self.convs = nn.Sequential(*layers)
        self.out_channels = config.out_channels
        for m in self.convs:
            if isinstance(m, nn.Conv2d):  # He initialisation for a conv followed by ReLU
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.convs(x)
