"""The CNN backbones of hybrid ViTs (paper §3.1 "Hybrid Architecture"; `model.backbone`): the BiT ResNet of the
paper's hybrids, and a cheap convolutional stem. The ViT's patch embedding makes the tokens from their feature map.

The BiT ResNet (App. B) matches the official hybrids: weight-standardised convolutions ((w - mean) / (std + 1e-5) over
each output filter), GroupNorm with 32 groups (eps 1e-6), post-activation bottleneck units with a
projection shortcut where shape or stride changes, the stride on the 3x3 conv, and TensorFlow
'SAME' padding (asymmetric: the extra pixel goes after) for every conv and the 3x3/2 max-pool.

The conv stem (Xiao et al. 2021, "Early Convolutions Help Transformers See Better"): a few 3x3 stride-2 convolutions,
each followed by BatchNorm and ReLU, in place of the BiT ResNet: far cheaper on a CPU than GroupNorm bottleneck units
(the ViT then embeds with a 1x1 conv for patch_size 1, as in the paper's stem, which ends in a 1x1 conv).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import ConvStemConfig, ResNetConfig


def pad_same(x: torch.Tensor, kernel: int, stride: int, value: float = 0.0) -> torch.Tensor:
    """Pad (B, C, H, W) the way TensorFlow's 'SAME' does: out = ceil(in / stride)."""
    pads = []
    for size in (x.shape[-1], x.shape[-2]):  # F.pad lists the last dim first
        total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
        pads += [total // 2, total - total // 2]
    if not any(pads):
        return x
    return F.pad(x, pads, value=value)


class StdConv2d(nn.Conv2d):
    """Conv2d with weight standardisation, no bias: each output filter (w - mean) / (std + eps), biased std.

    padding "same": TensorFlow's 'SAME' (the ViT release's hybrids); an int: symmetric (the BiT release).
    """

    def __init__(
        self,
        in_chans: int,
        out_chans: int,
        kernel_size: int,
        *,
        stride: int = 1,
        eps: float = 1e-5,
        padding: str | int = "same",
    ):
        super().__init__(
            in_chans, out_chans, kernel_size, stride=stride, padding=0 if padding == "same" else padding, bias=False
        )
        self.eps = eps
        self.same = padding == "same"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        mean = w.mean(dim=(1, 2, 3), keepdim=True)
        std = w.std(dim=(1, 2, 3), keepdim=True, unbiased=False)
        w = (w - mean) / (std + self.eps)
        if self.same:
            x = pad_same(x, self.kernel_size[0], self.stride[0])
        return F.conv2d(x, w, None, self.stride, self.padding)


def group_norm(channels: int, eps: float = 1e-6) -> nn.GroupNorm:
    """GroupNorm with 32 groups (eps 1e-6 as in Flax; the BiT release's PyTorch port uses torch's 1e-5)."""
    return nn.GroupNorm(32, channels, eps=eps)


class Bottleneck(nn.Module):
    """conv1x1 -> GN -> ReLU -> conv3x3/stride -> GN -> ReLU -> conv1x1 -> GN, + shortcut, ReLU."""

    def __init__(self, in_chans: int, mid_chans: int, *, stride: int):
        super().__init__()
        out_chans = 4 * mid_chans
        self.downsample = None
        if in_chans != out_chans or stride != 1:
            self.downsample = nn.Sequential(StdConv2d(in_chans, out_chans, 1, stride=stride), group_norm(out_chans))
        self.conv1, self.norm1 = StdConv2d(in_chans, mid_chans, 1), group_norm(mid_chans)
        self.conv2, self.norm2 = StdConv2d(mid_chans, mid_chans, 3, stride=stride), group_norm(mid_chans)
        self.conv3, self.norm3 = StdConv2d(mid_chans, out_chans, 1), group_norm(out_chans)
        nn.init.zeros_(self.norm3.weight)  # each unit starts as the identity, as in BiT

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        y = F.relu(self.norm1(self.conv1(x)))
        y = F.relu(self.norm2(self.conv2(y)))
        y = self.norm3(self.conv3(y))
        return F.relu(shortcut + y)


class ResNetBackbone(nn.Module):
    """Stem (7x7/2 conv, GN, ReLU, 3x3/2 max-pool) and bottleneck stages: (B, C, H, W) -> feature map."""

    def __init__(self, config: ResNetConfig, *, in_chans: int):
        super().__init__()
        self.config = config
        width = config.width
        self.stem_conv = StdConv2d(in_chans, width, 7, stride=2)
        self.stem_norm = group_norm(width)
        stages, chans = [], width
        for i, units in enumerate(config.layers):
            mid = width * 2**i
            blocks = [
                Bottleneck(chans if j == 0 else 4 * mid, mid, stride=(2 if i > 0 and j == 0 else 1))
                for j in range(units)
            ]
            stages.append(nn.Sequential(*blocks))
            chans = 4 * mid
        self.stages = nn.Sequential(*stages)
        self.out_channels = config.out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.stem_norm(self.stem_conv(x)))
        x = F.max_pool2d(pad_same(x, 3, 2, value=float("-inf")), 3, stride=2)
        return self.stages(x)


class ConvStem(nn.Module):
    """(B, C, H, W) -> (B, convs[-1], H / stride, W / stride): per conv, conv3x3 at its stride (no bias) -> BatchNorm
    -> ReLU."""

    def __init__(self, config: ConvStemConfig, *, in_chans: int):
        super().__init__()
        self.config = config
        layers: list[nn.Module] = []
        chans = in_chans
        for out, stride in zip(config.convs, config.conv_strides):
            layers += [nn.Conv2d(chans, out, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU()]
            chans = out
        self.convs = nn.Sequential(*layers)
        self.out_channels = config.out_channels
        for m in self.convs:
            if isinstance(m, nn.Conv2d):  # He initialisation for a conv followed by ReLU
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.convs(x)
