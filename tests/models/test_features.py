"""Per-layer features (`forward_intermediates`, timm's semantics) and any image size (`dynamic_img_size`)."""

import copy

import pytest
import torch

import vitkit
from vitkit.errors import ConfigError
from vitkit.models import ResNetConfig

TOL = dict(rtol=1e-4, atol=1e-6)  # float32 computed two ways (CONTRIBUTING)
POS_EMBEDS = ["learned", "learned_2d", "relative", "sincos2d", "none"]


def perturbed(model):
    """Random weights everywhere (zero heads, zero position tables and identity units would hide mistakes)."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model.eval()


def explicit_layers(model, x):
    """z_0 .. z_L written out block by block, for reference."""
    zs, z, grid = [], model.embed(x), model.input_grid(x)
    for block in model.blocks:
        z = block(z, grid=grid)
        zs.append(z)
    return zs


@pytest.mark.parametrize("backbone", [None, ResNetConfig(layers=(1,), width=32)], ids=["vit", "hybrid"])
@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_intermediates_match_the_explicit_forward(backbone, classifier):
    model = perturbed(vitkit.create_model(
        "vit_test", depth=3, classifier=classifier, backbone=backbone, image_size=(32, 48) if backbone else (8, 12)
    ))  # fmt: skip
    x = torch.randn(2, 3, *model.config.image_size)
    p, (gh, gw), D = model.config.num_prefix_tokens, model.config.grid_size, model.config.width
    with torch.no_grad():
        zs = explicit_layers(model, x)
        final, maps = model.forward_intermediates(x)  # every layer, (B, D, h, w)
        assert len(maps) == 3 and all(m.shape == (2, D, gh, gw) for m in maps)
        for z, m in zip(zs, maps):
            torch.testing.assert_close(m, z[:, p:].transpose(1, 2).reshape(2, D, gh, gw), **TOL)
        torch.testing.assert_close(final, model.forward_features(x), **TOL)
        # the last layer normed is forward_features' tokens; NLC keeps the token axis; prefix tokens come apart
        ((last, prefix),) = model.forward_intermediates(
            x, [-1], norm=True, output_fmt="NLC", return_prefix_tokens=True, intermediates_only=True
        )
        torch.testing.assert_close(torch.cat([prefix, last], 1), model.forward_features(x), **TOL)
        assert prefix.shape == (2, p, D) and last.shape == (2, gh * gw, D)
        # the last n, a list with negatives (in layer order), and stopping early
        two = model.forward_intermediates(x, 2, output_fmt="NLC", intermediates_only=True)
        torch.testing.assert_close(two, [zs[1][:, p:], zs[2][:, p:]], **TOL)
        picked = model.forward_intermediates(x, [-1, 0], output_fmt="NLC", intermediates_only=True, stop_early=True)
        torch.testing.assert_close(picked, [zs[0][:, p:], zs[2][:, p:]], **TOL)
        early_final, _ = model.forward_intermediates(x, [0], stop_early=True)
        torch.testing.assert_close(early_final, model.norm(zs[0]), **TOL)
    for bad in ([3], [-4], 0, 4, "all"):
        with pytest.raises(ConfigError, match="indices"):
            model.forward_intermediates(x, bad)
    with pytest.raises(ConfigError, match="output_fmt"):
        model.forward_intermediates(x, output_fmt="NHWC")


def test_bit_intermediates_are_the_stem_and_stage_maps():
    model = perturbed(vitkit.create_model("bit_test", layers=(1, 1, 1), image_size=16))
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        stem = model.stem(x)  # "small" stem: no pool
        s1 = model.stages[0](stem)
        s2 = model.stages[1](s1)
        s3 = model.stages[2](s2)
        final, maps = model.forward_intermediates(x)
        torch.testing.assert_close(maps, [stem, s1, s2, s3], **TOL)
        torch.testing.assert_close(final, model.forward_features(x), **TOL)
        normed = model.forward_intermediates(x, [1, -1], norm=True, intermediates_only=True, stop_early=True)
        torch.testing.assert_close(normed, [s1, model.forward_features(x)], **TOL)
        assert [m.shape[1:] for m in maps] == [(32, 16, 16), (128, 16, 16), (256, 8, 8), (512, 4, 4)]
    with pytest.raises(ConfigError, match="output_fmt"):
        model.forward_intermediates(x, output_fmt="NLC")


@pytest.mark.parametrize("pos_embed", POS_EMBEDS)
def test_dynamic_size_equals_a_model_resampled_with_set_image_size(pos_embed):
    model = perturbed(vitkit.create_model("vit_test", pos_embed=pos_embed, image_size=(16, 12), dynamic_img_size=True))
    x = torch.randn(2, 3, 12, 24)  # another grid, 3 x 6 instead of 4 x 3
    resized = copy.deepcopy(model)
    resized.set_image_size((12, 24))
    with torch.no_grad():
        torch.testing.assert_close(model(x), resized(x), **TOL)
        torch.testing.assert_close(model(x), model(x), rtol=0, atol=0)  # the second call reads the cached grid
        final, (z,) = model.forward_intermediates(x, [-1], norm=True)
        assert z.shape == (2, 32, 3, 6)
        torch.testing.assert_close(final, resized.forward_features(x), **TOL)
        at_config = model(torch.randn(2, 3, 16, 12))  # the configured size as before
        assert at_config.shape == (2, 10)
    # training at the new size: gradients reach the weights the embedding is resampled from
    model.train()
    model(x).square().sum().backward()
    table = {"learned": "pos_embed", "learned_2d": "pos_embed_row", "relative": "blocks.0.attn.position_bias.table"}
    if pos_embed in table:
        assert dict(model.named_parameters())[table[pos_embed]].grad.abs().sum() > 0
    with torch.no_grad():  # an optimizer's in-place step is seen: the cached grid is resampled again
        for p in model.parameters():
            p.add_(0.05)
        model.eval()
        again = copy.deepcopy(model)
        again.set_image_size((12, 24))
        torch.testing.assert_close(model(x), again(x), **TOL)


def test_dynamic_size_refuses_sides_off_the_patch_grid_and_fixed_models_refuse_other_sizes():
    model = vitkit.create_model("vit_test", dynamic_img_size=True).eval()
    with pytest.raises(ConfigError, match=r"13x16 images do not divide into 4x4 patches.*12x16"):
        model(torch.randn(1, 3, 13, 16))
    with pytest.raises(ConfigError, match="expected images of shape"):
        vitkit.create_model("vit_test")(torch.randn(1, 3, 12, 16))
    with pytest.raises(ConfigError, match="dynamic_img_size"):
        vitkit.create_model("vit_test", dynamic_img_size="yes")


def test_every_checkpoint_format_keeps_dynamic_img_size(tmp_path):
    from vitkit.checkpoint import load_pretrained, save_checkpoint

    model = vitkit.create_model("vit_test", dynamic_img_size=True, mlp_act="gelu_tanh")  # the .npz's own GELU
    x = torch.randn(1, 3, 8, 20)
    for fmt, name in (
        ("vitkit", "ck"),
        ("npz", "ck.npz"),
        ("timm", "ck.safetensors"),
        ("timm", "ck.pth"),
        ("hf", "hf"),
    ):
        back = load_pretrained(save_checkpoint(model, tmp_path / name, fmt)).eval()
        assert back.config.dynamic_img_size, (fmt, name)
        assert back(x).shape == (1, 10)
    fixed = load_pretrained(
        save_checkpoint(vitkit.create_model("vit_test", mlp_act="gelu_tanh"), tmp_path / "fixed.npz", "npz")
    )
    assert not fixed.config.dynamic_img_size
