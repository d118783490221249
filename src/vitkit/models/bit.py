"""BiT ResNet-v2 (Kolesnikov et al., "Big Transfer", 2020): the ResNet baseline the paper compares ViT with.

    stem:  7x7/2 conv, zero pad 1, 3x3/2 max-pool      ("small": one 3x3/1 conv, no pool)
    unit:  y = x' + conv3(relu(GN(conv2(relu(GN(conv1(relu(GN(x)))))))))      pre-activation bottleneck
           x' = x, or a 1x1 projection of relu(GN(x)) where channels or stride change
    head:  relu(GN(.)) -> global average pool -> linear (zero-initialised)

Every conv is weight-standardised ((w - mean) / (std + 1e-10), biased std, as the release's PyTorch port)
with symmetric padding; every norm is GroupNorm with 32 groups (eps 1e-5). The stride sits on the 3x3 conv.
Shares StdConv2d and GroupNorm with the hybrid's backbone (`backbones.py`), which follows the ViT release's
post-activation ResNet instead.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from vitkit.errors import ConfigError

from .backbones import StdConv2d, group_norm
from .config import BiTConfig
from .interface import TimmInterface, feature_level
from .intermediates import check_output_fmt, take_indices

WS_EPS = 1e-10
GN_EPS = 1e-5


def _conv(cin: int, cout: int, kernel: int, stride: int = 1) -> StdConv2d:
    return StdConv2d(cin, cout, kernel, stride=stride, eps=WS_EPS, padding=kernel // 2)


class PreActBottleneck(nn.Module):
    """GN -> ReLU -> conv1x1 -> GN -> ReLU -> conv3x3/stride -> GN -> ReLU -> conv1x1, + shortcut."""

    def __init__(self, in_chans: int, mid_chans: int, *, stride: int):
        super().__init__()
        out_chans = 4 * mid_chans
        self.norm1, self.conv1 = group_norm(in_chans, GN_EPS), _conv(in_chans, mid_chans, 1)
        self.norm2, self.conv2 = group_norm(mid_chans, GN_EPS), _conv(mid_chans, mid_chans, 3, stride)
        self.norm3, self.conv3 = group_norm(mid_chans, GN_EPS), _conv(mid_chans, out_chans, 1)
        self.downsample = _conv(in_chans, out_chans, 1, stride) if in_chans != out_chans or stride != 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = F.relu(self.norm1(x))
        shortcut = x if self.downsample is None else self.downsample(pre)  # the projection sees the pre-activation
        y = self.conv1(pre)
        y = self.conv2(F.relu(self.norm2(y)))
        y = self.conv3(F.relu(self.norm3(y)))
        return y + shortcut


class ResNetV2(TimmInterface, nn.Module):
    """BiT ResNet-v2 classifier. Build with a `BiTConfig` (or `vitkit.create_model("bit_r50x1")`).

    forward_features(x) -> (B, C, h, w) feature map after the final GN + ReLU
    forward_head(features, pre_logits=False) -> pooled features (B, C) or logits
    forward(x) -> logits
    forward_intermediates(x, indices) -> (final feature map, [the stem's and the stages' outputs asked for])

    timm's model API (`interface.TimmInterface`): num_classes, num_features, get_classifier, reset_classifier,
    pretrained_cfg, group_matcher, feature_info (the stem, then each stage), prune_intermediate_layers.
    """

    def __init__(self, config: BiTConfig | None = None, **overrides):
        super().__init__()
        self.config = c = (config or BiTConfig()).replace(**overrides)
        root = c.width * c.width_factor
        self.stem = _conv(c.in_chans, root, 7, stride=2) if c.stem == "bit" else _conv(c.in_chans, root, 3)
        stages, chans = [], root
        for s, units in enumerate(c.layers):
            mid = root * 2**s
            stages.append(nn.Sequential(*(
                PreActBottleneck(chans if u == 0 else 4 * mid, mid, stride=2 if s > 0 and u == 0 else 1) for u in range(units)
            )))  # fmt: skip
            chans = 4 * mid
        self.stages = nn.ModuleList(stages)
        self.norm = group_norm(chans, GN_EPS)
        self.head = self._make_head(c.num_classes)
        self.grad_checkpointing = False
        for m in self.modules():
            if isinstance(m, StdConv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_head(self, num_classes: int) -> nn.Module:
        if num_classes == 0:
            return nn.Identity()
        head = nn.Linear(self.config.num_features, num_classes)  # the release's 1x1 conv on a 1x1 map
        nn.init.zeros_(head.weight)  # BiT fine-tunes from a zero-initialised head
        nn.init.zeros_(head.bias)
        return head

    @property
    def blocks(self) -> list[nn.Module]:
        """Every bottleneck unit in order (the units FSDP shards, as a ViT's blocks)."""
        return [unit for stage in self.stages for unit in stage]

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self._stem(x)
        for unit in self.blocks:
            x = self._unit(unit, x)
        return F.relu(self.norm(x))  # (B, C, H / stride, W / stride)

    def _stem(self, x: torch.Tensor) -> torch.Tensor:
        c = self.config
        if x.ndim != 4 or x.shape[1] != c.in_chans or tuple(x.shape[-2:]) != c.image_size:
            raise ConfigError(
                f"input: expected images of shape (B, {c.in_chans}, {c.image_size[0]}, {c.image_size[1]}), "
                f"got {tuple(x.shape)}; resize the images or call model.set_image_size(...)"
            )
        x = self.stem(x)
        if c.stem == "bit":
            x = F.max_pool2d(F.pad(x, (1, 1, 1, 1)), 3, stride=2)  # pads with 0, as the release does
        return x

    def _unit(self, unit: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(unit, x, use_reentrant=False) if self.grad_checkpointing and self.training else unit(x)

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | list[int] | None = None,
        *,
        norm: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
        stop_early: bool = False,
    ) -> list | tuple[torch.Tensor, list]:
        """Feature maps (B, C, h, w) of the levels `indices` picks (timm's semantics): level 0 the stem's output,
        level s the output of stage s; None: all, n: the last n, a list: those (-1 the last stage), in order.
        norm: the final GN + ReLU applied to the last stage's map (forward_features' map); intermediates_only:
        the list alone, else (forward_features' map, the list); stop_early: no stage after the last one asked for."""
        check_output_fmt(output_fmt, ("NCHW",))
        take = take_indices(1 + len(self.stages), indices, "levels (stem and stages)")
        x = self._stem(x)
        taken = [x] if 0 in take else []
        last = len(self.config.layers)  # the final GN + ReLU reads the last stage's channels (pruning leaves it)
        for level, stage in enumerate(self.stages[: take[-1]] if stop_early else self.stages, start=1):
            for unit in stage:
                x = self._unit(unit, x)
            if level in take:
                taken.append(F.relu(self.norm(x)) if norm and level == last else x)
        if intermediates_only:
            return taken
        return F.relu(self.norm(x)), taken

    def forward_head(self, features: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        y = features.mean(dim=(2, 3))  # global average pool, (B, C)
        return y if pre_logits else self.head(y)

    def forward(self, x: torch.Tensor, *, pre_logits: bool = False) -> torch.Tensor:
        return self.forward_head(self.forward_features(x), pre_logits=pre_logits)

    # -- the same surgery interface as the ViT ---------------------------------------------
    def reset_head(self, num_classes: int, *, keep_pre_logits: bool = True) -> None:
        """A fresh zero-initialised head for `num_classes` (a ResNet has no pre-logits layer to keep)."""
        self.config = self.config.replace(num_classes=num_classes)
        self.head = self._make_head(num_classes).to(self.stem.weight.device)

    def set_image_size(self, image_size: int | tuple[int, int]) -> None:
        """Another input resolution: a convolutional network needs no weight change."""
        self.config = self.config.replace(image_size=image_size)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def no_weight_decay(self) -> set[str]:
        return set()

    # -- timm's model API (interface.TimmInterface has the rest) ----------------------------
    @property
    def num_features(self) -> int:
        return self.config.num_features

    first_conv = "stem"

    def group_matcher(self, coarse: bool = False) -> dict:
        """Parameter groups as timm's layer-decay helpers read them: the stem, then each unit (each stage where
        `coarse`), the final norm with the last one; the head matches none."""
        return {
            "stem": r"^stem",
            "blocks": r"^stages\.(\d+)" if coarse else [(r"^stages\.(\d+)\.(\d+)", None), (r"^norm", (99999,))],
        }

    @property
    def feature_info(self) -> list[dict]:
        """forward_intermediates' levels: the stem's map, then each stage's (stride 2 from the second stage on)."""
        c = self.config
        root, first = c.width * c.width_factor, c.stride // 2 ** (len(c.layers) - 1)
        stages = [feature_level(f"stages.{s}", 4 * root * 2**s, first * 2**s) for s in range(len(c.layers))]
        return [feature_level("stem", root, first), *stages]

    def prune_intermediate_layers(
        self, indices: int | list[int] = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """Drop the stages after the last level `indices` picks (and the final norm, the head where asked), as timm's
        features_only does; returns the levels picked (forward_intermediates' numbering: 0 the stem)."""
        take = take_indices(1 + len(self.stages), indices, "levels (stem and stages)")
        self.stages = self.stages[: take[-1]]
        if prune_head:
            self.reset_head(0)
        if prune_norm:
            self.norm = nn.Identity()
        return take
