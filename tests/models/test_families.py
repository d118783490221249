"""The family pieces (LayerScale, registers, attention pooling, SwiGLU, QuickGELU, pre-norm, no patch bias, E_pos
resampling per family), each checked against its sums written out here."""

import pytest
import torch
import torch.nn.functional as F

import vitkit
from vitkit.errors import ConfigError
from vitkit.kernels import block_kernels
from vitkit.models import ViTConfig, resample_pos_embed
from vitkit.models.registry import FAMILIES


def test_attention_pooling_is_torch_multihead_attention_then_a_residual_mlp():
    model = vitkit.create_model("siglip_test", num_classes=0).eval()
    pool = model.attn_pool
    with torch.no_grad():
        for p in pool.parameters():
            p.normal_(0, 0.3)
    mha = torch.nn.MultiheadAttention(32, 2, batch_first=True)
    mha.load_state_dict(
        {
            "in_proj_weight": pool.qkv.weight,
            "in_proj_bias": pool.qkv.bias,
            "out_proj.weight": pool.proj.weight,
            "out_proj.bias": pool.proj.bias,
        }
    )
    tokens = torch.randn(3, 16, 32)
    with torch.no_grad():
        a = mha(pool.probe.expand(3, -1, -1), tokens, tokens)[0]
        mlp = pool.mlp.fc2(F.gelu(pool.mlp.fc1(pool.norm(a)), approximate="tanh"))
        expected = (a + mlp)[:, 0]
        torch.testing.assert_close(model.forward_head(tokens, pre_logits=True), expected)
    assert model.config.num_prefix_tokens == 0 and model.cls_token is None


def test_layer_scale_scales_each_branch_and_zero_makes_a_block_the_identity():
    model = vitkit.create_model("vit_test", layer_scale=1e-5).eval()
    block = model.blocks[0]
    assert torch.equal(block.ls1.gamma, torch.full((32,), 1e-5)) and "blocks.0.ls2.gamma" in model.state_dict()
    x = torch.randn(2, 17, 32)
    with torch.no_grad():
        block.ls1.gamma.fill_(0.5)
        block.ls2.gamma.fill_(0.25)
        y = x + 0.5 * block.attn(block.norm1(x))
        torch.testing.assert_close(block(x), y + 0.25 * block.mlp(block.norm2(y)))
        block.ls1.gamma.zero_()
        block.ls2.gamma.zero_()
        torch.testing.assert_close(block(x), x)


def test_registers_follow_the_class_token_without_position_and_the_paths_agree():
    model = vitkit.create_model("vit_test", reg_tokens=3, layer_scale=0.1, num_classes=0).eval()
    c = model.config
    assert (c.num_prefix_tokens, c.pos_prefix_tokens) == (4, 1) and model.pos_embed.shape == (1, 1 + 16, 32)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        tokens = model.embed(x)
        assert tokens.shape == (2, 4 + 16, 32)
        torch.testing.assert_close(tokens[:, 1:4], model.reg_token.expand(2, -1, -1))  # no E_pos on registers
        torch.testing.assert_close(tokens[:, 0], (model.cls_token + model.pos_embed[:, :1])[:, 0].expand(2, -1))
        fast = model.forward_features(x)
        slow, maps = model.forward_features_explicit(x)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    assert maps[0].shape == (2, 2, 20, 20)


def test_swiglu_quick_gelu_pre_norm_and_no_patch_bias_are_their_sums():
    model = vitkit.create_model("clip_test", mlp="swiglu").eval()
    assert model.patch_embed.bias is None and "norm_pre.weight" in model.state_dict()
    mlp = model.blocks[0].mlp
    assert mlp.fc1.weight.shape == (128, 32) and mlp.fc2.weight.shape == (32, 64)
    h = torch.randn(2, 5, 32)
    gate, value = F.linear(h, mlp.fc1.weight, mlp.fc1.bias).chunk(2, dim=-1)
    torch.testing.assert_close(mlp(h), F.linear(F.silu(gate) * value, mlp.fc2.weight, mlp.fc2.bias))
    quick = vitkit.create_model("clip_test").blocks[0].mlp
    torch.testing.assert_close(quick.act(h), h * torch.sigmoid(1.702 * h))
    assert not block_kernels.takes_kernels(quick)  # the GELU kernels never stand in for QuickGELU
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        patches = F.conv2d(x, model.patch_embed.weight, stride=4).flatten(2).transpose(1, 2)
        z0 = torch.cat([model.cls_token.expand(2, -1, -1), patches], 1) + model.pos_embed
        torch.testing.assert_close(model.embed(x), model.norm_pre(z0))


@pytest.mark.parametrize("mode", ["bicubic", "bicubic_antialias"])
def test_position_embeddings_resample_as_the_family_does(mode):
    pe = torch.randn(1, 1 + 64, 8)
    grid = pe[:, 1:].reshape(1, 8, 8, 8).permute(0, 3, 1, 2)
    expected = F.interpolate(grid, size=(5, 6), mode="bicubic", align_corners=False, antialias=mode != "bicubic")
    got = resample_pos_embed(pe, (5, 6), mode=mode)
    torch.testing.assert_close(got[:, 1:], expected.permute(0, 2, 3, 1).reshape(1, 30, 8))
    assert torch.equal(got[:, :1], pe[:, :1])
    model = vitkit.create_model("vit_test", pos_embed_resample=mode, dynamic_img_size=True).eval()
    with torch.no_grad():
        at_24 = model.position_embedding((6, 6))
    stored = model.pos_embed.detach()
    torch.testing.assert_close(at_24, resample_pos_embed(stored, (6, 6), old_grid=(4, 4), mode=mode))


@pytest.mark.parametrize(
    "key, value",
    [("layer_scale", -1.0), ("reg_tokens", -1), ("mlp", "geglu"), ("pos_embed_resample", "area"), ("pre_norm", 1)],
)
def test_a_bad_piece_is_one_error_naming_its_key(key, value):
    with pytest.raises(ConfigError, match=f"^{key}: "):
        ViTConfig(**{key: value})


def test_every_family_row_builds():
    for name, row in FAMILIES.items():
        c = ViTConfig(**row, depth=1, width=32, mlp_dim=64, num_heads=2, image_size=16, patch_size=4)
        out = vitkit.models.build_model(c).eval()(torch.randn(1, 3, 16, 16))
        assert out.shape == (1, 1000) and torch.isfinite(out).all(), name
