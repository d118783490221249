"""BiT ResNet-v2, the paper's baseline: parameter counts of the release's models, the ViT's interface, configs."""

import pytest
import torch

import vitkit
from vitkit.errors import ConfigError
from vitkit.models import BiTConfig, ResNetV2, config_from_dict, create_model, get_config
from vitkit.models.summary import count_parameters, describe

# Parameters with a 1000-class head, computed from the architecture; the same as timm's resnetv2_<n>_bit models
# (model cards: 25.5M, 217.3M, 44.5M, 387.9M, 236.3M, 936.5M) and, with BiT-M's 21,843 classes, 68.3M for R50x1.
RELEASED = {
    "bit_r50x1": 25_549_352,
    "bit_r50x3": 217_319_080,
    "bit_r101x1": 44_541_480,
    "bit_r101x3": 387_934_888,
    "bit_r152x2": 236_335_208,
    "bit_r152x4": 936_533_224,
}


@pytest.mark.parametrize("name", RELEASED)
def test_parameter_counts_equal_the_released_models(name):
    with torch.device("meta"):
        assert count_parameters(create_model(name)) == RELEASED[name]


def test_bit_m_r50x1_with_the_imagenet21k_head():
    with torch.device("meta"):
        assert count_parameters(create_model("bit_r50x1", num_classes=21843)) == 68_256_659


def test_architecture_of_r50x1():
    c = get_config("bit_r50x1")
    assert c.layers == (3, 4, 6, 3) and c.depth == 50 and c.num_features == 2048 and c.stride == 32
    with torch.device("meta"):
        m = create_model("BiT-R50x1".lower().replace("-", "_"))
    unit = m.stages[1][0]
    assert unit.conv2.stride == (2, 2) and unit.conv1.stride == (1, 1)  # the stride on the 3x3 conv
    assert m.stages[0][0].downsample is not None and m.stages[0][1].downsample is None
    assert all(n.num_groups == 32 for n in m.modules() if isinstance(n, torch.nn.GroupNorm))
    row = describe(c)
    assert row["params"] == RELEASED["bit_r50x1"] and 8.0 < row["gflops"] < 8.4  # 4.1 GMACs at 224


def test_interface_matches_the_vit():
    m = create_model("bit_test")
    x = torch.randn(3, 3, 16, 16)
    feats = m.forward_features(x)
    assert feats.shape == (3, m.config.num_features, 8, 8)  # two stages: stride 2
    pooled = m.forward_head(feats, pre_logits=True)
    assert pooled.shape == (3, m.config.num_features)
    assert torch.equal(m(x, pre_logits=True), pooled)
    assert torch.count_nonzero(m(x)) == 0  # zero-initialised head
    m.reset_head(4)
    assert m(x).shape == (3, 4) and m.config.num_classes == 4
    m.set_image_size(32)
    assert m(torch.randn(1, 3, 32, 32)).shape == (1, 4)
    with pytest.raises(ConfigError, match="expected images of shape"):
        m(x)


def test_trains_a_step_and_checkpointing_agrees():
    m = create_model("bit_test", num_classes=3)
    x, y = torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 2, 0])
    loss = torch.nn.functional.cross_entropy(m(x), y)
    loss.backward()
    assert all(p.grad is not None for p in m.parameters())
    ref = m.forward_features(x)
    m.train().set_grad_checkpointing(True)
    assert torch.allclose(m.forward_features(x), ref, atol=1e-6)


def test_small_variants_fit_28px_grayscale():
    for name in ("bit_r11_28", "bit_r20_28", "bit_r29_28"):
        m = create_model(name)
        assert m(torch.randn(2, 1, 28, 28)).shape == (2, 10)
    assert get_config("bit_r20_28").depth == 20


def test_config_round_trip_and_errors():
    c = get_config("bit_r20_28")
    assert config_from_dict(c.to_dict()) == c and c.to_dict()["arch"] == "bit"
    assert isinstance(config_from_dict(get_config("vit_test").to_dict()), vitkit.ViTConfig)
    with pytest.raises(ConfigError, match="GroupNorm"):
        BiTConfig(width=48)
    with pytest.raises(ConfigError, match="stem"):
        BiTConfig(stem="deep")
    with pytest.raises(ConfigError, match="model.heads"):
        c.replace(heads=3)
    assert isinstance(vitkit.create_model("bit_test"), ResNetV2)
