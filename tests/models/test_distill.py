"""DeiT's distillation token (models/distill.py): a second prefix token with its own position embedding and head; both
heads' logits while training, their mean in eval; every reader of the prefix counts it."""

import pytest
import torch

import vitkit
from vitkit.errors import ConfigError


def distilled(**overrides):
    """A small distilled model with every tensor random (the zero-initialised heads too), in eval mode."""
    torch.manual_seed(0)
    model = vitkit.create_model("vit_test", distilled=True, num_classes=5, **overrides).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model


def images(config, n=2):
    return torch.rand(n, config.in_chans, *config.image_size, generator=torch.Generator().manual_seed(1)) * 2 - 1


def by_hand(model, x):
    """The two heads on the class and distillation tokens, computed outside forward_head."""
    tokens = model.forward_features(x)
    return model.head(tokens[:, 0]), model.head_dist(tokens[:, 1])


def test_training_returns_both_heads_and_eval_their_mean():
    model = distilled()
    x = images(model.config)
    assert model.config.num_prefix_tokens == 2 and model.pos_embed.shape[1] == 2 + model.config.num_patches
    with torch.no_grad():
        y, y_dist = by_hand(model, x)
        model.train()  # no dropout in this config: the same numbers in both modes
        trained = model(x)
        model.eval()
        assert isinstance(trained, tuple) and len(trained) == 2
        torch.testing.assert_close(trained[0], y)
        torch.testing.assert_close(trained[1], y_dist)
        torch.testing.assert_close(model(x), (y + y_dist) / 2)
        assert not torch.allclose(y, y_dist, atol=1e-3)  # two different heads: the mean is not either one
        tokens = model.forward_features(x)
        torch.testing.assert_close(model(x, pre_logits=True), (tokens[:, 0] + tokens[:, 1]) / 2)


def test_the_distillation_token_joins_after_the_class_token():
    model = distilled()
    x = images(model.config)
    with torch.no_grad():
        z0 = model.embed(x)
        patches = model.patch_tokens(x)
    pos = model.pos_embed
    torch.testing.assert_close(z0[:, 0], (model.cls_token + pos[:, :1])[:, 0].expand(2, -1))
    torch.testing.assert_close(z0[:, 1], (model.dist_token + pos[:, 1:2])[:, 0].expand(2, -1))
    torch.testing.assert_close(z0[:, 2:], patches + pos[:, 2:])


def test_resampling_and_intermediates_keep_both_prefix_tokens():
    model = distilled()
    before = model.pos_embed.detach().clone()
    model.set_image_size((24, 16))
    c = model.config
    assert model.pos_embed.shape[1] == 2 + c.num_patches
    torch.testing.assert_close(model.pos_embed[:, :2], before[:, :2])  # both prefix slots kept as they are
    x = images(c)
    with torch.no_grad():
        ((patches, prefix),) = model.forward_intermediates(
            x, [-1], norm=True, output_fmt="NLC", return_prefix_tokens=True, intermediates_only=True
        )
        tokens = model.forward_features(x)
    assert prefix.shape[1] == 2 and patches.shape[1] == c.num_patches
    torch.testing.assert_close(patches, tokens[:, 2:])


def test_dynamic_size_resamples_the_patches_only():
    model = distilled(dynamic_img_size=True)
    fixed = distilled()
    fixed.set_image_size((24, 24))
    x = images(fixed.config)
    with torch.no_grad():
        torch.testing.assert_close(model(x), fixed(x))


def test_reset_head_renews_both_heads_and_the_token_takes_no_decay():
    model = distilled()
    model.reset_head(3)
    assert model.head_dist.weight.shape == (3, 32) and not model.head_dist.weight.any()
    assert "dist_token" in model.no_weight_decay()


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(classifier="gap"), "distilled: the distillation token sits beside a class token"),
        (dict(representation_size=16), "distilled: DeiT's two heads read the tokens directly"),
        (dict(distilled="yes"), "distilled: expected true or false"),
    ],
)
def test_what_a_distilled_model_cannot_be_is_one_line(overrides, match):
    with pytest.raises(ConfigError, match=match):
        vitkit.create_model("vit_test", **{"distilled": True, **overrides})


def test_with_registers_the_token_keeps_its_position_and_the_registers_follow(tmp_path):
    """The distillation token is a positioned prefix token (pos_prefix_tokens) and registers come after it; a
    timm file keeps both positions and reads back exact, and a transformers class without the token refuses in one
    line."""
    from vitkit.checkpoint import load_pretrained, save_checkpoint
    from vitkit.errors import CheckpointError

    model = distilled(reg_tokens=2)
    c = model.config
    assert (c.pos_prefix_tokens, c.num_prefix_tokens) == (2, 4) and model.pos_embed.shape[1] == 2 + c.num_patches
    x = images(c)
    with torch.no_grad():
        z0 = model.embed(x)
        pos = model.pos_embed
        torch.testing.assert_close(z0[:, 1], (model.dist_token + pos[:, 1:2])[:, 0].expand(2, -1))
        torch.testing.assert_close(z0[:, 2:4], model.reg_token.expand(2, -1, -1))
        torch.testing.assert_close(z0[:, 4:], model.patch_tokens(x) + pos[:, 2:])
        save_checkpoint(model, tmp_path / "m.safetensors", "timm")
        back = load_pretrained(tmp_path / "m.safetensors")
        assert back.config.distilled and back.config.reg_tokens == 2
        for key, value in model.state_dict().items():
            assert torch.equal(back.state_dict()[key], value), key
    with pytest.raises(CheckpointError, match="cannot hold this model's distillation token"):
        save_checkpoint(model, tmp_path / "hf", "hf")
