"""The conv-stem hybrid (Xiao et al. 2021): config, the stem's layers, shapes, BatchNorm modes, FLOPs, native files."""

import json

import pytest
import torch
from torch import nn

import vitkit
from vitkit.errors import ConfigError
from vitkit.models import ConvStemConfig, ResNetConfig, ViTConfig
from vitkit.models.summary import count_flops, describe

SMALL = dict(width=32, depth=2, mlp_dim=64, num_heads=2, num_classes=3)


def test_a_backbone_mapping_picks_its_kind_and_impossible_ones_name_the_key():
    c = ViTConfig(backbone={"convs": [8, 16]}, patch_size=1, image_size=(16, 24), **SMALL)
    assert c.backbone == ConvStemConfig(convs=(8, 16)) and c.backbone.out_channels == 16
    assert c.feature_stride == 4 and c.total_patch_size == (4, 4) and c.grid_size == (4, 6)
    stored = json.loads(json.dumps(c.to_dict()))  # config.json's form
    assert stored["backbone"] == {"convs": [8, 16]} and ViTConfig.from_dict(stored) == c
    # a hybrid's config.json as vitkit always wrote it (layers and width) is a BiT ResNet, as before; width alone too
    resnet = ViTConfig.from_dict({**stored, "backbone": {"layers": [1], "width": 32}, "image_size": [32, 32]})
    assert resnet.backbone == ResNetConfig(layers=(1,), width=32)
    assert ViTConfig(backbone={"width": 32}, patch_size=1, image_size=32).backbone == ResNetConfig(width=32)
    for bad, says in [
        ({"convs": []}, "backbone.convs: expected a list of 1 to 8"),
        ({"convs": [8, 0]}, "backbone.convs: expected"),
        ({"convs": "wide"}, "backbone.convs: expected"),
        ({"convs": [8] * 9}, "backbone.convs: expected a list of 1 to 8"),
        ({"convs": [8], "layers": [1]}, "backbone: give either convs .* or layers and width .*, got convs, layers"),
        ({}, "backbone: give either convs .* got an empty mapping"),
        ({"conv": [8]}, "backbone.conv: unknown key; known keys are convs, layers, strides, width"),
        (5, r"backbone: expected null or a mapping: \{layers: \[...\], width: N\} .* \{convs: \[...\]\}"),
    ]:
        with pytest.raises(ConfigError, match=says) as err:
            ViTConfig(backbone=bad, patch_size=1, image_size=16)
        assert "\n" not in str(err.value)
    # the image divides into stride x patch pixels, or the error says which sizes would
    with pytest.raises(ConfigError, match=r"height 20 .* patch size 8 \(backbone stride x patch size\).* 16 or 24"):
        ViTConfig(backbone={"convs": [8, 16]}, patch_size=2, image_size=(20, 24))


def test_the_stem_is_3x3_stride_2_convs_with_batchnorm_and_relu_and_batchnorm_follows_the_mode():
    torch.manual_seed(0)
    model = vitkit.create_model("vit_test", backbone={"convs": [8, 16]}, patch_size=1, image_size=(16, 24), **SMALL)
    layers = list(model.backbone.convs)
    assert [type(m) for m in layers] == [nn.Conv2d, nn.BatchNorm2d, nn.ReLU] * 2
    for conv, out in zip(layers[::3], (8, 16)):
        assert (conv.kernel_size, conv.stride, conv.padding, conv.bias) == ((3, 3), (2, 2), (1, 1), None)
        assert conv.out_channels == out
    assert model.patch_embed.kernel_size == (1, 1) and model.patch_embed.in_channels == 16
    x = torch.randn(4, 3, 16, 24)
    assert model.backbone(x).shape == (4, 16, 4, 6)  # H / 4, W / 4
    tokens = model.forward_features(x)
    assert tokens.shape == (4, 1 + 24, 32) and model(x).shape == (4, 3)
    norm = layers[1]
    assert norm.num_batches_tracked == 3  # the stem alone, forward_features and forward, in training mode
    model.eval()
    before = norm.running_mean.clone()
    with torch.no_grad():
        first = model(x[:1])
        assert torch.equal(model(x)[:1], first)  # eval: running statistics, the same whatever the batch
    assert torch.equal(norm.running_mean, before) and norm.num_batches_tracked == 3
    final, taken = model.forward_intermediates(x, indices=[0, 1])
    assert [t.shape for t in taken] == [(4, 32, 4, 6)] * 2 and final.shape == tokens.shape


def test_flops_are_the_stems_convs_plus_a_vit_on_the_feature_map():
    c = ViTConfig(backbone={"convs": [8, 16]}, patch_size=1, image_size=32, **SMALL)
    stem = 2 * (3 * 8 * 9 * 16 * 16) + 2 * (8 * 16 * 9 * 8 * 8)  # 2 x multiply-adds of each 3x3 conv at its output
    on_the_map = c.replace(backbone=None, in_chans=16, image_size=8)
    assert count_flops(c) == stem + count_flops(on_the_map)
    row = describe(c)
    assert row["backbone"] == "conv 8-16" and row["patch"] == 4 and row["gflops"] == count_flops(c) / 1e9
    assert row["params"] == sum(p.numel() for p in vitkit.VisionTransformer(c).parameters())


def test_a_native_checkpoint_keeps_the_stem_and_its_running_statistics(tmp_path):
    torch.manual_seed(0)
    model = vitkit.create_model("vit_test", backbone={"convs": [8]}, patch_size=2, image_size=16, **SMALL)
    model(torch.randn(8, 3, 16, 16))  # training mode: BatchNorm's running statistics move off their start
    model.eval()
    vitkit.save_pretrained(model, tmp_path / "m")
    assert json.loads((tmp_path / "m" / "config.json").read_text())["model"]["backbone"] == {"convs": [8]}
    back = vitkit.load_pretrained(tmp_path / "m")
    assert back.config == model.config and not back.training
    state = back.state_dict()
    assert state["backbone.convs.1.num_batches_tracked"] == 1 and state["backbone.convs.1.running_var"].ne(1).all()
    for key, value in model.state_dict().items():
        assert torch.equal(state[key], value), key  # exact: the file holds the tensors themselves
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(back(x), model(x), rtol=1e-4, atol=1e-6)
    back.set_image_size(32)  # the stem takes any size; E_pos is resampled to the 8 x 8 grid
    assert back(torch.randn(1, 3, 32, 32)).shape == (1, 3)


def test_strides_set_each_convs_step_and_the_grid_and_are_kept_in_files(tmp_path):
    c = ViTConfig(backbone={"convs": [8, 8, 16], "strides": [1, 2, 1]}, patch_size=1, image_size=(16, 24), **SMALL)
    assert c.backbone.stride == 2 and c.grid_size == (8, 12)
    torch.manual_seed(0)
    model = vitkit.VisionTransformer(c)
    assert [m.stride for m in model.backbone.convs if isinstance(m, nn.Conv2d)] == [(1, 1), (2, 2), (1, 1)]
    assert model.backbone(torch.randn(2, 3, 16, 24)).shape == (2, 16, 8, 12)
    model.eval()
    vitkit.save_pretrained(model, tmp_path / "m")
    stored = json.loads((tmp_path / "m" / "config.json").read_text())["model"]["backbone"]
    assert stored == {"convs": [8, 8, 16], "strides": [1, 2, 1]}
    back = vitkit.load_pretrained(tmp_path / "m")
    x = torch.randn(2, 3, 16, 24)
    with torch.no_grad():
        torch.testing.assert_close(back(x), model(x), rtol=1e-4, atol=1e-6)
    for bad in ([1, 2], [1, 3, 1], "1,2,1"):
        with pytest.raises(ConfigError, match=r"backbone.strides: expected one stride \(1 or 2\) per entry"):
            ViTConfig(backbone={"convs": [8, 8, 16], "strides": bad}, patch_size=1, image_size=16, **SMALL)


def test_depth_0_is_a_conv_net_its_stems_map_pooled_into_the_head_and_kept_in_files(tmp_path):
    """With a conv stem and average pooling, depth 0 is a CNN: no block, the stem's map projected, normed and averaged
    into the head. Its one level (embed, features) is that map. Without a backbone, or with a class token, 0 is
    refused in one line."""
    stem = {"convs": [8, 16], "strides": [1, 2]}
    c = ViTConfig(backbone=stem, patch_size=1, image_size=8, classifier="gap", **{**SMALL, "depth": 0})
    model = vitkit.VisionTransformer(c).eval()
    x = torch.rand(2, 3, 8, 8)
    assert len(model.blocks) == 0 and model(x).shape == (2, 3) and model.levels == 1
    tokens = model.norm(model.patch_tokens(model.backbone(x)) + model.position_embedding(c.grid_size))
    with torch.no_grad():
        torch.testing.assert_close(model(x), model.head(tokens.mean(dim=1)), rtol=1e-4, atol=1e-6)
    (level,) = model.forward_intermediates(x, [-1], intermediates_only=True)
    assert level.shape == (2, 32, 4, 4) and model.feature_info[0]["module"] == "patch_embed"
    vitkit.save_pretrained(model, tmp_path / "conv_net")
    again = vitkit.load_pretrained(tmp_path / "conv_net")
    assert again.config.depth == 0
    with torch.no_grad():
        torch.testing.assert_close(again(x), model(x), rtol=1e-4, atol=1e-6)
    for changes in ({"backbone": None, "patch_size": 4}, {"classifier": "token"}):
        with pytest.raises(ConfigError, match=r"depth: expected a positive integer \(0 only with model.backbone"):
            ViTConfig(
                **{**dict(backbone=stem, patch_size=1, image_size=8, classifier="gap"), **changes, **SMALL, "depth": 0}
            )
