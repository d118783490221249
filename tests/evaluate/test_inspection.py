"""vitkit.evaluate.inspection: the definitions of paper §4.5 / App. D.7-D.8 on tiny models with known answers."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from vitkit.errors import ConfigError, DataError
from vitkit.evaluate import inspection as insp
from vitkit.models import ResNetConfig, VisionTransformer, ViTConfig

TINY = dict(width=32, depth=2, mlp_dim=64, num_heads=2, num_classes=10)
HYBRID = ViTConfig(
    image_size=(32, 48), patch_size=2, backbone=ResNetConfig(layers=(1,), width=32), **TINY
)  # stride 4 x 2


def make(seed: int = 0, **overrides) -> VisionTransformer:
    torch.manual_seed(seed)
    model = vitkit.create_model("vit_test", **overrides)
    with torch.no_grad():  # the fresh head is zero; give every weight a value
        model.pos_embed.normal_(std=1.0)
        model.cls_token.normal_() if model.cls_token is not None else None
    return model


def images(model: VisionTransformer, n: int = 5, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    c = model.config
    return torch.randn(n, c.in_chans, *c.image_size, generator=g)


def zero_attention(model: VisionTransformer) -> VisionTransformer:
    """All attention parameters zero: Q = K = 0, so every query attends uniformly to every token."""
    with torch.no_grad():
        for block in model.blocks:
            for p in block.attn.parameters():
                p.zero_()
    return model


def analytic_mean_distance(config: ViTConfig) -> float:
    """Mean distance in pixels over all ordered pairs of patch centres (self-pairs included), by brute force."""
    (gh, gw), (ph, pw) = config.grid_size, config.total_patch_size
    cells = list(itertools.product(range(gh), range(gw)))
    total = sum(math.hypot((a - c) * ph, (b - d) * pw) for (a, b), (c, d) in itertools.product(cells, cells))
    return total / len(cells) ** 2


def fix_attention(model: VisionTransformer, per_layer) -> list:
    """Replace each layer's softmax output by per_layer[l](T) through the softmax hook; returns the handles."""

    def hook_for(make_probs):
        return lambda module, args, out: make_probs(out.shape[-1]).to(out).expand_as(out)

    return [b.attn.softmax.register_forward_hook(hook_for(f)) for b, f in zip(model.blocks, per_layer)]


# -- mean attention distance -------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides",
    [
        {},  # 4 x 4 grid
        {"image_size": (16, 24)},  # non-square grid 4 x 6
        {"patch_size": (4, 2)},  # non-square patches: 4 x 8 grid of 4 x 2 pixel patches
        {"classifier": "gap"},  # no class token
        {"image_size": 12, "patch_size": 3, "num_heads": 4},  # odd grid 4 x 4, 4 heads
    ],
)
def test_uniform_attention_gives_the_analytic_mean_pairwise_distance(overrides):
    model = zero_attention(make(**overrides))
    distance = insp.mean_attention_distance(model, images(model), batch_size=2)
    assert distance.shape == (model.config.depth, model.config.num_heads)
    torch.testing.assert_close(
        distance, torch.full_like(distance, analytic_mean_distance(model.config)), rtol=1e-5, atol=1e-5
    )


def test_uniform_attention_on_a_hybrid_uses_the_feature_map_grid_and_its_stride():
    model = zero_attention(VisionTransformer(HYBRID))
    assert model.config.grid_size == (4, 6) and model.config.total_patch_size == (8, 8)
    distance = insp.mean_attention_distance(model, images(model, 2))
    torch.testing.assert_close(
        distance, torch.full_like(distance, analytic_mean_distance(HYBRID)), rtol=1e-5, atol=1e-5
    )
    assert insp.rollout_maps(model, images(model, 2)).shape == (2, 4, 6)


def test_attention_on_the_query_itself_gives_distance_zero_and_identity_rollout():
    model = make()
    fix_attention(model, [torch.eye] * model.config.depth)
    x = images(model, 3)
    assert torch.equal(insp.mean_attention_distance(model, x), torch.zeros(2, 2))
    T = 1 + model.config.num_patches
    torch.testing.assert_close(insp.attention_rollout(model, x), torch.eye(T).expand(3, T, T))


def test_mean_attention_distance_matches_the_definition_on_random_attention():
    model, x = make(seed=3), images(make(), 5)
    _, maps = model.eval().forward_features_explicit(x)
    (gh, gw), (ph, pw) = model.config.grid_size, model.config.total_patch_size
    centres = np.array([(i * ph, j * pw) for i in range(gh) for j in range(gw)], dtype=np.float64)
    dist = np.linalg.norm(centres[:, None] - centres[None], axis=-1)
    expected = []
    for probs in maps:
        w = probs.detach().double().numpy()[:, :, 1:, 1:]  # drop the class token as query and key
        w = w / w.sum(axis=-1, keepdims=True)
        expected.append((w * dist).sum(-1).mean(axis=(0, 2)))  # over queries and images
    model.train()
    got = insp.mean_attention_distance(model, x, batch_size=2)  # 2 + 2 + 1 images
    torch.testing.assert_close(got, torch.tensor(np.array(expected), dtype=torch.float32), rtol=1e-5, atol=1e-5)
    assert model.training, "the training flag must come back"
    got.add_(1.0)  # a normal tensor, not an inference tensor


def test_images_can_come_as_an_iterable_of_batches_or_labelled_pairs():
    model, x = make(), images(make(), 4)
    whole = insp.mean_attention_distance(model, x)
    pairs = [(x[:3], torch.zeros(3)), (x[3:], torch.zeros(1))]
    torch.testing.assert_close(insp.mean_attention_distance(model, pairs), whole)
    with pytest.raises(DataError, match="no images"):
        insp.mean_attention_distance(model, x[:0])


def test_num_images_takes_the_first_images_even_from_batches():
    model, x = make(), images(make(), 5)
    first3 = insp.mean_attention_distance(model, x[:3], num_images=None)
    assert not torch.allclose(first3, insp.mean_attention_distance(model, x, num_images=None))
    torch.testing.assert_close(insp.mean_attention_distance(model, x, num_images=3), first3)
    torch.testing.assert_close(insp.mean_attention_distance(model, iter([x[:2], x[2:4], x[4:]]), num_images=3), first3)
    with pytest.raises(ConfigError, match="num_images"):
        insp.mean_attention_distance(model, x, num_images=0)


# -- attention rollout ---------------------------------------------------------------------
def test_rollout_multiplies_head_averaged_residual_attention_from_the_first_layer_up():
    model, x = make(seed=4), images(make(), 3)
    _, maps = model.eval().forward_features_explicit(x)
    eye = torch.eye(maps[0].shape[-1])
    expected = eye.expand_as(maps[0][:, 0])
    for probs in maps:
        expected = (0.5 * probs.mean(dim=1) + 0.5 * eye) @ expected
    rollout = insp.attention_rollout(model, x, batch_size=2)
    torch.testing.assert_close(rollout, expected.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rollout.sum(-1), torch.ones(3, eye.shape[0]))
    torch.testing.assert_close(
        insp.rollout_maps(model, x), expected[:, 0, 1:].reshape(3, 4, 4).detach(), rtol=1e-5, atol=1e-6
    )


def test_rollout_order_is_last_layer_times_first():
    model = make()
    T = 1 + model.config.num_patches
    shift = torch.roll(torch.eye(T), 1, dims=1)  # layer 1: token t looks at t + 1
    to_first = torch.zeros(T, T)
    to_first[:, 0] = 1.0  # layer 2: every token looks at token 0
    fix_attention(model, [lambda n: shift, lambda n: to_first])
    a1, a2 = 0.5 * shift + 0.5 * torch.eye(T), 0.5 * to_first + 0.5 * torch.eye(T)
    rollout = insp.attention_rollout(model, images(model, 1))[0]
    torch.testing.assert_close(rollout, a2 @ a1)
    assert not torch.allclose(rollout, a1 @ a2)


def test_gap_models_roll_out_from_the_mean_of_the_patch_tokens():
    model, x = make(classifier="gap"), images(make(), 2)
    rollout = insp.attention_rollout(model, x)
    torch.testing.assert_close(insp.rollout_maps(model, x), rollout.mean(dim=1).reshape(2, 4, 4))


def test_last_layer_attention_is_the_class_token_row_of_the_last_layer():
    model, x = make(seed=5), images(make(), 2)
    _, maps = model.eval().forward_features_explicit(x)
    got = insp.last_layer_attention(model, x)
    assert got.shape == (2, 2, 4, 4)
    torch.testing.assert_close(got, maps[-1][:, :, 0, 1:].reshape(2, 2, 4, 4).detach())


# -- patch-embedding filters ---------------------------------------------------------------
def test_all_principal_components_reconstruct_the_filters():
    model = make()
    pca = insp.patch_embedding_pca(model, num_components=None)
    torch.testing.assert_close(pca.reconstruct(), model.patch_embed.weight.detach(), rtol=1e-4, atol=1e-5)
    flat = pca.components.flatten(1)
    torch.testing.assert_close(
        flat @ flat.T, torch.eye(len(flat)), rtol=0, atol=1e-4
    )  # D = 32 < 48: all have s > 0 but the last
    torch.testing.assert_close(pca.explained_variance_ratio.sum(), torch.tensor(1.0))
    assert bool((pca.explained_variance_ratio.diff() <= 1e-7).all()), "components come in order of variance"


def test_the_first_component_is_the_top_eigenvector_of_the_filter_covariance():
    model = make(seed=7)
    pca = insp.patch_embedding_pca(model)
    assert pca.components.shape == (28, 3, 4, 4) and pca.scores.shape == (32, 28)
    w = model.patch_embed.weight.detach().double().flatten(1).numpy()
    evals, evecs = np.linalg.eigh(np.cov(w, rowvar=False))
    top = torch.tensor(evecs[:, -1], dtype=torch.float32)
    assert abs(float(pca.components[0].flatten() @ top)) == pytest.approx(1.0, abs=1e-4)
    assert float(pca.explained_variance_ratio[0]) == pytest.approx(evals[-1] / evals.sum(), rel=1e-4)


def test_grayscale_and_hybrid_filters_keep_their_channel_layout():
    gray = insp.patch_embedding_pca(vitkit.create_model("vit_mini4_28"))
    assert gray.components.shape == (16, 1, 4, 4)  # at most 4 * 4 * 1 components exist
    hybrid = insp.patch_embedding_pca(VisionTransformer(HYBRID), num_components=5)
    assert hybrid.components.shape == (5, 128, 2, 2)


# -- position embeddings -------------------------------------------------------------------
@pytest.mark.parametrize("overrides", [{}, {"image_size": (16, 24)}, {"pos_embed": "sincos2d"}])
def test_each_position_embedding_is_identical_to_itself(overrides):
    model = make(**overrides) if overrides.get("pos_embed") is None else vitkit.create_model("vit_test", **overrides)
    sim = insp.pos_embed_similarity(model)
    gh, gw = model.config.grid_size
    assert sim.shape == (gh, gw, gh, gw)
    flat = sim.reshape(gh * gw, gh * gw)
    torch.testing.assert_close(flat.diagonal(), torch.ones(gh * gw))
    torch.testing.assert_close(flat, flat.T)
    assert float(flat.abs().max()) <= 1.0 + 1e-6


def test_similarity_excludes_the_class_token_and_is_cosine():
    model = make()
    with torch.no_grad():
        model.pos_embed.zero_()
        model.pos_embed[0, 0, 0] = 1.0  # class token: would match patch (0, 0) if it were counted
        for k in range(16):
            model.pos_embed[0, 1 + k, k] = float(k + 1)  # patch k along axis k: orthogonal, any length
        model.pos_embed[0, 1 + 5] = 3.0 * model.pos_embed[0, 1 + 2]  # patch (1, 1) parallel to patch (0, 2)
    sim = insp.pos_embed_similarity(model).reshape(16, 16)
    expected = torch.eye(16)
    expected[5, 2] = expected[2, 5] = 1.0
    expected[5, 5] = 1.0
    torch.testing.assert_close(sim, expected)


def test_interpolated_grids_work():
    model = make()
    model.set_image_size((24, 32))  # 4 x 4 -> 6 x 8, position embeddings resampled
    sim = insp.pos_embed_similarity(model)
    assert sim.shape == (6, 8, 6, 8)
    torch.testing.assert_close(sim.reshape(48, 48).diagonal(), torch.ones(48))


def test_a_model_without_position_embeddings_is_a_clear_error():
    with pytest.raises(ConfigError, match="pos_embed"):
        insp.pos_embed_similarity(vitkit.create_model("vit_test", pos_embed="none"))


# -- everything at once, images ------------------------------------------------------------
def test_inspect_model_returns_every_analysis_and_leaves_the_model_as_it_was():
    model = make()
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    out = insp.inspect_model(model, images(model, 6), num_show=2, num_components=4)
    assert set(out) == {
        "filter_components",
        "filter_explained_variance_ratio",
        "mean_attention_distance",
        "uniform_attention_distance",
        "rollout",
        "last_layer_attention",
        "pos_embed_similarity",
    }
    assert out["rollout"].shape == (2, 4, 4) and out["filter_components"].shape == (4, 3, 4, 4)
    assert float(out["uniform_attention_distance"]) == pytest.approx(analytic_mean_distance(model.config), rel=1e-6)
    assert model.training and all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(not b.attn.softmax._forward_hooks for b in model.blocks)


def test_load_images_resizes_converts_and_sorts(tmp_path):
    (tmp_path / "sub").mkdir()
    Image.new("L", (10, 7), color=255).save(tmp_path / "sub" / "b.png")
    Image.new("RGB", (30, 20), color=(0, 128, 255)).save(tmp_path / "a.jpg", quality=100)
    (tmp_path / "notes.txt").write_text("not an image")
    config = vitkit.get_config("vit_test")
    pixels = insp.load_images([tmp_path], config)
    assert pixels.shape == (2, 3, 16, 16) and pixels.dtype == torch.float32
    assert torch.allclose(pixels[0, 0], torch.zeros(16, 16), atol=0.02)  # a.jpg first
    assert torch.allclose(pixels[0, 2], torch.ones(16, 16), atol=0.02)
    assert torch.equal(pixels[1], torch.ones(3, 16, 16))  # gray -> RGB
    gray = insp.load_images([tmp_path / "sub" / "b.png"], vitkit.get_config("vit_mini4_28"))
    assert gray.shape == (1, 1, 28, 28)
    assert insp.load_images([tmp_path], config, limit=1).shape[0] == 1
    torch.testing.assert_close(insp.normalize(pixels, config)[1], torch.ones(3, 16, 16))  # (1 - 0.5) / 0.5


def test_bad_image_paths_are_clear_errors(tmp_path):
    config = vitkit.get_config("vit_test")
    with pytest.raises(DataError, match="no images found"):
        insp.load_images([tmp_path], config)
    with pytest.raises(DataError, match="no such file"):
        insp.load_images([tmp_path / "missing"], config)
    (tmp_path / "broken.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match="broken.png"):
        insp.load_images([tmp_path], config)
