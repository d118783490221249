import pytest
import torch

import vitkit
from vitkit.errors import ConfigError
from vitkit.models import get_config
from vitkit.models.summary import count_flops, count_parameters

REQUIRED = "vit_ti16 vit_s16 vit_s32 vit_b8 vit_b16 vit_b32 vit_l16 vit_l32 vit_h14 r_vit_ti16 r50_vit_b16 r26_vit_b32 r50_vit_l32".split()

# The parameter counts of the released models (224x224, class token, no pre-logits, 1000 classes).
PAPER_COUNTS = {
    "vit_ti16": 5_717_416,
    "vit_s16": 22_050_664,
    "vit_b16": 86_567_656,
    "vit_b32": 88_224_232,
    "vit_l16": 304_326_632,
    "vit_l32": 306_535_400,
    "vit_h14": 632_045_800,
}


def test_every_required_variant_is_listed():
    assert set(REQUIRED) <= set(vitkit.list_models())


@pytest.mark.parametrize("name, count", PAPER_COUNTS.items())
def test_exact_parameter_counts(name, count):
    with torch.device("meta"):
        model = vitkit.create_model(name, num_classes=1000)
    assert model.config.image_size == (224, 224) and model.config.classifier == "token"
    assert count_parameters(model) == count


@pytest.mark.parametrize(
    "spelling, name",
    [
        ("ViT-B/16", "vit_b16"),
        ("R50+ViT-B/16", "r50_vit_b16"),
        ("ViT-Ti/16", "vit_ti16"),
        ("R+ViT-Ti/16", "r_vit_ti16"),
        ("vit_h14", "vit_h14"),
    ],
)
def test_paper_spelling(spelling, name):
    assert get_config(spelling) == get_config(name)


def test_any_size_and_patch_decodes():
    c = get_config("vit_s8")
    assert (c.width, c.patch_size) == (384, (8, 8))


def test_overrides_and_unknown_names():
    c = get_config("vit_b16", num_classes=10, image_size=(384, 256), classifier="gap")
    assert c.grid_size == (24, 16) and c.num_classes == 10 and c.num_prefix_tokens == 0
    with pytest.raises(ConfigError, match="unknown model"):
        get_config("vit_q16")
    with pytest.raises(ConfigError, match="model.hidden: unknown key"):
        get_config("vit_b16", hidden=3)


def _closed_form_flops(c) -> int:
    """2 x multiply-adds of the patch embedding, every block (qkv, QK^T, AV, proj, MLP) and the head."""
    N, D, M, T = c.num_patches, c.width, c.mlp_dim, c.num_patches + c.num_prefix_tokens
    ph, pw = c.patch_size
    embed = N * (ph * pw * c.in_chans) * D
    block = T * D * 3 * D + 2 * T * T * D + T * D * D + 2 * T * D * M
    head = D * c.num_classes
    return 2 * (embed + c.depth * block + head)


@pytest.mark.parametrize("name", ["vit_b16", "vit_s32", "vit_mini4_28"])
def test_flops_match_the_closed_form(name):
    c = get_config(name)
    assert count_flops(c) == _closed_form_flops(c)


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("vit_test", {}),
        ("vit_test", {"classifier": "gap", "pos_embed": "relative", "drop_path": 0.1}),
        ("vit_test", {"classifier": "map", "representation_size": 16}),
        ("vit_test", {"distilled": True}),
        ("vit_test", {"backbone": {"convs": [8, 16]}, "patch_size": 1}),
        ("dinov2_test", {}),
        ("clip_test", {}),
        ("r26_vit_b32", {"width": 64, "mlp_dim": 128, "num_heads": 2, "image_size": 64}),
    ],
)
def test_a_vits_count_from_one_and_two_blocks_is_the_whole_models(name, overrides):
    """count_flops and `vitkit models` extend a ViT's one- and two-block counts to its depth; here against the whole
    model counted: forward, executed (a class token's last block computes that token alone) and a training step."""
    from vitkit.models.summary import _counted_flops, _meta_parameters, describe

    c = get_config(name, **{"depth": 3, **overrides})
    runs = [(1, False, False), (2, False, True), (1, True, False)]
    for batch, backward, executed in runs[:2] if c.distilled else runs:  # a distilled ViT trains on a pair of logits
        assert count_flops(c, batch, backward=backward, executed=executed) == _counted_flops(
            c, batch, backward, executed
        )
    assert describe(c)["params"] == _meta_parameters(c) == count_parameters(vitkit.create_model(name, **c.__dict__))


def test_vit_b16_is_about_35_gflops():
    assert abs(count_flops(get_config("vit_b16")) / 1e9 - 35.1) < 0.1


@pytest.mark.parametrize(
    "timm_name, ours, image_size",
    [
        ("vit_base_patch16_224", "vit_b16", 224),
        ("vit_small_patch16_384", "vit_s16", 384),
        ("vit_base_r50_s16_384", "r50_vit_b16", 384),
        ("vit_large_patch16_224", "vit_l16", 224),
        ("vit_tiny_patch16_224", "vit_ti16", 224),
        ("vit_huge_patch14_224", "vit_h14", 224),
        ("vit_base_patch32_384.augreg_in21k_ft_in1k", "vit_b32", 384),
        ("vit_tiny_r_s16_p8_224", "r_vit_ti16", 224),
        ("vit_large_r50_s32_384", "r50_vit_l32", 384),
    ],
)
def test_timm_names_are_aliases_of_the_same_architectures(timm_name, ours, image_size):
    assert get_config(timm_name) == get_config(ours, image_size=image_size)
    assert get_config(timm_name, image_size=448, num_classes=10) == get_config(
        ours, image_size=448, num_classes=10
    )  # keywords win


@pytest.mark.parametrize(
    "name, ours",
    [
        ("BiT-M-R50x1", "bit_r50x1"),
        ("BiT-S-R101x3", "bit_r101x3"),
        ("BiT-L-R152x4", "bit_r152x4"),
        ("BiT-R152x2", "bit_r152x2"),
        ("resnetv2_50x1_bit.goog_in21k", "bit_r50x1"),
        ("resnetv2_101x3_bit", "bit_r101x3"),
    ],
)
def test_bit_release_and_timm_names_are_aliases(name, ours):
    assert get_config(name) == get_config(ours)
