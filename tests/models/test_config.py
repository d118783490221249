import json

import pytest

from vitkit.errors import ConfigError
from vitkit.models import ResNetConfig, ViTConfig


def test_defaults_are_vit_b16_at_224():
    c = ViTConfig()
    assert (c.width, c.depth, c.mlp_dim, c.num_heads) == (768, 12, 3072, 12)
    assert c.grid_size == (14, 14) and c.num_patches == 196 and c.num_prefix_tokens == 1
    assert c.layer_norm_eps == 1e-6 and c.mean == (0.5,) * 3 and c.std == (0.5,) * 3


def test_json_round_trip_rebuilds_the_same_config():
    c = ViTConfig(
        image_size=(32, 48),
        patch_size=2,
        in_chans=1,
        classifier="gap",
        representation_size=64,
        backbone=ResNetConfig(layers=(1, 1), width=32),
        width=64,
        mlp_dim=128,
        num_heads=4,
        depth=2,
    )
    again = ViTConfig.from_dict(json.loads(json.dumps(c.to_dict())))
    assert again == c
    assert again.backbone.stride == 8 and again.grid_size == (2, 3)


@pytest.mark.parametrize(
    "changes, key",
    [
        ({"num_heads": 5}, "num_heads"),
        ({"image_size": 230}, "patch_size"),
        ({"classifier": "mean"}, "classifier"),
        ({"pos_embed": "rope"}, "pos_embed"),
        ({"dropout": 1.5}, "dropout"),
        ({"width": 0}, "width"),
        ({"mean": (0.1, 0.2)}, "mean"),
        ({"image_size": "big"}, "image_size"),
    ],
)
def test_impossible_values_name_the_key(changes, key):
    with pytest.raises(ConfigError, match=key):
        ViTConfig().replace(**changes)


def test_unknown_keys_are_rejected_with_their_name():
    with pytest.raises(ConfigError, match="model.hidden_size: unknown key"):
        ViTConfig().replace(hidden_size=10)
    with pytest.raises(ConfigError, match="backbone.depth: unknown key"):
        ViTConfig.from_dict({"backbone": {"depth": 3}})


def test_per_channel_stats_follow_the_channel_count():
    assert ViTConfig(in_chans=1).mean == (0.5,)
    assert ViTConfig().replace(in_chans=4).std == (0.5,) * 4


def test_hybrid_stride_and_channels():
    assert ResNetConfig(layers=()).stride == 4 and ResNetConfig(layers=()).out_channels == 64
    assert ResNetConfig(layers=(3, 4, 9)).stride == 16 and ResNetConfig(layers=(3, 4, 9)).out_channels == 1024
    assert ResNetConfig(layers=(2, 2, 2, 2)).stride == 32 and ResNetConfig(layers=(2, 2, 2, 2)).out_channels == 2048
    with pytest.raises(ConfigError, match="backbone.width"):
        ResNetConfig(width=48)
