import math

import pytest
import torch

import vitkit
from vitkit.models import ResNetConfig
from vitkit.models.backbones import Bottleneck, ResNetBackbone, StdConv2d, pad_same


def tf_same_out(size: int, stride: int) -> int:
    return math.ceil(size / stride)


@pytest.mark.parametrize("h, w", [(64, 64), (37, 50), (33, 31)])
@pytest.mark.parametrize("layers", [(), (1, 1, 1), (1, 1, 1, 1)])
def test_feature_map_sizes_follow_tf_same_arithmetic(h, w, layers):
    backbone = ResNetBackbone(ResNetConfig(layers=layers, width=32), in_chans=3)
    out = backbone(torch.randn(1, 3, h, w))
    eh, ew = tf_same_out(tf_same_out(h, 2), 2), tf_same_out(tf_same_out(w, 2), 2)  # stem conv, max-pool
    for _ in layers[1:]:
        eh, ew = tf_same_out(eh, 2), tf_same_out(ew, 2)
    assert out.shape == (1, backbone.out_channels, eh, ew)


def test_same_padding_puts_the_extra_pixel_after():
    # even input, k=3, s=2: TF pads 0 before and 1 after
    x = torch.arange(16.0).reshape(1, 1, 4, 4)
    padded = pad_same(x, 3, 2)
    assert padded.shape == (1, 1, 5, 5)
    assert torch.equal(padded[..., :4, :4], x) and padded[..., 4, :].abs().sum() == 0
    # the 7x7/2 root conv on 8 pixels: total 5 -> 2 before, 3 after
    padded = pad_same(torch.ones(1, 1, 8, 8), 7, 2)[0, 0]
    assert padded.shape == (13, 13)
    assert padded[1, 1] == 0 and padded[2, 2] == 1 and padded[9, 9] == 1 and padded[10, 10] == 0


def test_max_pool_padding_never_wins():
    backbone = ResNetBackbone(ResNetConfig(layers=(), width=32), in_chans=1)
    x = torch.full((1, 1, 8, 8), -5.0)
    with torch.no_grad():
        stem = torch.relu(backbone.stem_norm(backbone.stem_conv(x)))
        pooled = torch.nn.functional.max_pool2d(pad_same(stem, 3, 2, value=float("-inf")), 3, stride=2)
    assert torch.isfinite(pooled).all()


def test_weight_standardisation_matches_the_official_formula():
    conv = StdConv2d(4, 6, 3)
    torch.nn.init.normal_(conv.weight, mean=0.3, std=2.0)
    x = torch.randn(1, 4, 5, 5)
    w = conv.weight.detach()
    mean = w.mean(dim=(1, 2, 3), keepdim=True)
    std = ((w - mean) ** 2).mean(dim=(1, 2, 3), keepdim=True).sqrt()  # population std
    expected = torch.nn.functional.conv2d(torch.nn.functional.pad(x, (1, 1, 1, 1)), (w - mean) / (std + 1e-5))
    torch.testing.assert_close(conv(x), expected)


def test_bottleneck_projection_and_identity_start():
    unit = Bottleneck(64, 32, stride=2)
    assert unit.downsample is not None
    assert Bottleneck(128, 32, stride=1).downsample is None
    assert torch.count_nonzero(unit.norm3.weight) == 0  # starts as the shortcut alone
    assert unit(torch.randn(1, 64, 8, 8)).shape == (1, 128, 4, 4)


def test_group_norm_has_32_groups_and_eps_1e_6():
    model = vitkit.create_model(
        "r50_vit_b16",
        width=32,
        depth=1,
        mlp_dim=32,
        num_heads=1,
        image_size=32,
        backbone=ResNetConfig(layers=(3, 4, 9), width=32),
    )
    norms = [m for m in model.modules() if isinstance(m, torch.nn.GroupNorm)]
    assert norms and all(m.num_groups == 32 and m.eps == 1e-6 for m in norms)
    convs = [m for m in model.backbone.modules() if isinstance(m, torch.nn.Conv2d)]
    assert all(isinstance(m, StdConv2d) for m in convs)
    assert len(model.backbone.stages) == 3 and [len(s) for s in model.backbone.stages] == [3, 4, 9]
