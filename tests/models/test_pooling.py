"""The frozen feature per family (models/pooling.py): DINOv2's class token with the mean of the patch tokens against
transformers' own model, the other pools by hand, and the pools a model cannot give refused in one line."""

import pytest
import torch

import vitkit
from vitkit.errors import ConfigError
from vitkit.models.pooling import with_feature_pool


def features(model, x):
    with torch.no_grad():
        return model(x, pre_logits=True)


def test_dinov2_reads_with_its_linear_protocol_as_transformers_computes_it(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.Dinov2WithRegistersConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=16, patch_size=4, num_register_tokens=2
    )
    torch.manual_seed(0)
    theirs = transformers.Dinov2WithRegistersModel(config).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.3)
    theirs.save_pretrained(tmp_path / "dinov2")
    model = vitkit.load_pretrained(tmp_path / "dinov2")
    assert model.config.feature_pool == "cls_mean"
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        hidden = theirs(pixel_values=x).last_hidden_state  # after the final LayerNorm: class, 2 registers, patches
    want = torch.cat([hidden[:, 0], hidden[:, 3:].mean(dim=1)], dim=-1)  # the registers are no patches
    got = features(with_feature_pool(model), x)
    assert got.shape == (2, 64) and (got - want).abs().max() <= 1e-4


def test_each_pool_reads_the_final_tokens():
    model = vitkit.create_model("vit_test", reg_tokens=2).eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        tokens = model.forward_features(x)
    cls, mean = tokens[:, 0], tokens[:, 3:].mean(dim=1)
    assert with_feature_pool(model) is model  # the paper's ViT: what the head reads
    torch.testing.assert_close(features(with_feature_pool(model, "cls"), x), cls)
    torch.testing.assert_close(features(with_feature_pool(model, "mean"), x), mean)
    torch.testing.assert_close(features(with_feature_pool(model, "cls_mean"), x), torch.cat([cls, mean], -1))
    assert vitkit.create_model("dinov2_test").config.feature_pool == "cls_mean"
    assert vitkit.create_model("siglip_test").config.feature_pool == "head"  # its attention-pooled output


def test_a_pool_without_its_token_is_one_line():
    siglip = vitkit.create_model("siglip_test")
    with pytest.raises(ConfigError, match="--pool cls_mean: reads the class token"):
        with_feature_pool(siglip, "cls_mean")
    with pytest.raises(ConfigError, match="feature_pool: cls reads the class token"):
        vitkit.create_model("siglip_test", feature_pool="cls")
    with pytest.raises(ConfigError, match="feature_pool: expected one of head, cls, mean, cls_mean"):
        vitkit.create_model("vit_test", feature_pool="max")


def test_the_head_reads_its_head_pool_written_out_by_hand():
    x = torch.randn(2, 3, 16, 16)
    for head_pool, final_norm in (("cls_mean", True), ("mean", False)):
        torch.manual_seed(0)
        model = vitkit.create_model("vit_test", reg_tokens=2, head_pool=head_pool, final_norm=final_norm).eval()
        torch.nn.init.normal_(model.head.weight)
        grid = model.input_grid(x)
        z = model.embed(x)
        for block in model.blocks:
            z = model._block(block, z, grid)  # (B, 1 + 2 + N, D): class token, registers, patches
        z = torch.nn.functional.layer_norm(z, (32,), model.norm.weight, model.norm.bias, 1e-6) if final_norm else z
        mean = z[:, 3:].mean(dim=1)  # the registers are no patches
        pooled = torch.cat([z[:, 0], mean], dim=-1) if head_pool == "cls_mean" else mean
        with torch.no_grad():
            assert (model(x) - model.head(pooled)).abs().max() <= 1e-5
        assert model.head.in_features == pooled.shape[-1] and final_norm == hasattr(model.norm, "weight")


def test_a_head_pool_without_a_class_token_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="head_pool: mean pools beside one class token.*classifier=token") as caught:
        vitkit.create_model("vit_test", classifier="gap", head_pool="mean")
    assert "\n" not in str(caught.value)
