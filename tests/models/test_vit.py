import dataclasses

import numpy as np
import pytest
import torch

import vitkit
from vitkit.errors import ConfigError
from vitkit.models import (
    MODELS,
    ResNetConfig,
    VisionTransformer,
    ViTConfig,
    get_config,
    resample_pos_embed,
    sincos_2d_pos_embed,
)

VITS = [
    name for name, config in MODELS.items() if isinstance(config, ViTConfig)
]  # BiT ResNets: tests/models/test_bit.py


def tiny(name: str, **overrides) -> VisionTransformer:
    """The named variant with its patch size, classifier and backbone layout, shrunk to run in milliseconds."""
    c = get_config(name)
    small = dict(width=32, depth=2, mlp_dim=64, num_heads=2, num_classes=5)
    if c.backbone is not None:
        small["backbone"] = dataclasses.replace(c.backbone, width=32)
        stride = ResNetConfig(layers=c.backbone.layers).stride * c.patch_size[0]
    else:
        stride = c.patch_size[0]
    small["image_size"] = (2 * stride, 3 * stride)  # non-square, 2 x 3 grid
    return vitkit.create_model(name, **{**small, **overrides})


@pytest.mark.parametrize("name", VITS)
def test_shapes_and_backward_for_every_variant(name):
    model = tiny(name)
    c = model.config
    x = torch.randn(2, c.in_chans, *c.image_size, requires_grad=True)
    tokens = model.forward_features(x)
    assert c.grid_size == (2, 3)
    assert tokens.shape == (2, c.num_prefix_tokens + 6, 32)
    logits = model.forward_head(tokens)
    assert logits.shape == (2, 5)
    # the head starts at zero, so push a loss through the features to reach every parameter
    (logits.sum() + tokens.square().mean()).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert missing == [] and x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("name", VITS)
def test_full_size_shapes_on_the_meta_device(name):
    with torch.device("meta"):
        model = vitkit.create_model(name)
    c = model.config
    out = model(torch.empty(3, c.in_chans, *c.image_size, device="meta"))
    assert out.shape == (3, c.num_classes or c.width)  # a backbone (num_classes 0) returns its pooled features


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_fast_and_explicit_attention_agree(classifier):
    model = vitkit.create_model("vit_test", classifier=classifier, num_classes=0).eval()
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        fast = model.forward_features(x)
        slow, maps = model.forward_features_explicit(x)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    T = model.config.num_patches + model.config.num_prefix_tokens
    assert len(maps) == model.config.depth and maps[0].shape == (4, 2, T, T)
    torch.testing.assert_close(maps[-1].sum(-1), torch.ones(4, 2, T))


def test_forward_is_eq_1_to_4_written_out():
    """Recompute the paper's equations by hand from the model's own weights."""
    model = vitkit.create_model("vit_test").eval()
    torch.nn.init.normal_(model.head.weight)
    x = torch.randn(2, 3, 16, 16)
    P, D = 4, 32
    patches = x.unfold(2, P, P).unfold(3, P, P)  # (B, C, 4, 4, P, P)
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(2, 16, 3 * P * P)  # x_p^i, flattened (C, P, P)
    E = model.patch_embed.weight.reshape(D, -1).T
    z = torch.cat([model.cls_token.expand(2, 1, D), patches @ E + model.patch_embed.bias], 1) + model.pos_embed  # (1)
    for blk in model.blocks:
        h = torch.nn.functional.layer_norm(z, (D,), blk.norm1.weight, blk.norm1.bias, 1e-6)
        q, k, v = (h @ blk.attn.qkv.weight.T + blk.attn.qkv.bias).split(D, -1)
        heads = lambda t: t.reshape(2, 17, 2, 16).transpose(1, 2)
        a = torch.softmax(heads(q) @ heads(k).transpose(-1, -2) / 4.0, -1) @ heads(v)
        z = blk.attn.proj(a.transpose(1, 2).reshape(2, 17, D)) + z  # (2)
        h = torch.nn.functional.layer_norm(z, (D,), blk.norm2.weight, blk.norm2.bias, 1e-6)
        z = blk.mlp.fc2(torch.nn.functional.gelu(blk.mlp.fc1(h))) + z  # (3)
    y = torch.nn.functional.layer_norm(z[:, 0], (D,), model.norm.weight, model.norm.bias, 1e-6)  # (4)
    with torch.no_grad():
        torch.testing.assert_close(model(x), model.head(y), atol=1e-5, rtol=1e-5)


def test_class_token_only_last_layer_gives_the_same_logits_and_gradients():
    """forward() computes the last layer for the class token alone; Eq. 4 reads nothing else."""
    model = vitkit.create_model("vit_test", num_classes=7)
    torch.nn.init.normal_(model.head.weight)
    x = torch.randn(3, 3, 16, 16)
    full = model.forward_head(model.forward_features(x))
    full.square().sum().backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    short = model(x)
    assert model.forward_features(x, class_token_only=True).shape == (3, 1, 32)
    torch.testing.assert_close(short, full, atol=1e-5, rtol=1e-5)
    short.square().sum().backward()
    for name, param in model.named_parameters():
        scale = expected[name].abs().max().item()
        torch.testing.assert_close(param.grad, expected[name], atol=1e-6 * scale, rtol=1e-4, msg=name)


def test_gap_pools_the_patch_tokens():
    model = vitkit.create_model("vit_test", classifier="gap", num_classes=0).eval()
    x = torch.randn(2, 3, 16, 16)
    tokens = model.forward_features(x)
    assert model.cls_token is None and tokens.shape[1] == 16
    torch.testing.assert_close(model.forward_head(tokens), tokens.mean(1))


def test_head_is_zero_initialised_and_pre_logits_is_linear_tanh():
    model = vitkit.create_model("vit_test", representation_size=24)
    assert torch.count_nonzero(model.head.weight) == 0 and torch.count_nonzero(model.head.bias) == 0
    feats = model.forward_head(model.forward_features(torch.randn(2, 3, 16, 16)), pre_logits=True)
    assert feats.shape == (2, 24) and feats.abs().max() <= 1
    assert model.head.in_features == 24


def test_mimetic_attention_starts_near_the_identity_and_is_saved_only_where_chosen():
    """Trockman & Kolter's init: W_q^T W_k per head near a Z + b I (b = 0.7, rank d_head), W_v^T W_o^T near a Z - b I
    (b = 0.4); the official Xavier init has neither. The key is written only where it is not the default."""

    def products(model):
        attn = model.blocks[-1].attn
        wq, wk, wv = attn.qkv.weight.detach().chunk(3, dim=0)
        heads = [wq[h * 16 : (h + 1) * 16].T @ wk[h * 16 : (h + 1) * 16] for h in range(4)]  # (64, 64) each
        return heads, wv.T @ attn.proj.weight.detach().T

    torch.manual_seed(0)
    model = vitkit.create_model("vit_test", width=64, num_heads=4, attention_init="mimetic")
    heads, vo = products(model)
    off = ~torch.eye(64, dtype=torch.bool)
    assert all(qk.diag().mean() > 0.2 and qk.diag().mean() > 3 * qk[off].abs().mean() for qk in heads)
    assert torch.linalg.matrix_rank(heads[0]) == 16 and vo.diag().mean() == pytest.approx(-0.4, abs=0.05)
    assert torch.count_nonzero(model.blocks[0].attn.qkv.bias) == 0
    torch.manual_seed(0)
    again = vitkit.create_model("vit_test", width=64, num_heads=4, attention_init="mimetic")
    assert torch.equal(again.blocks[1].attn.qkv.weight, model.blocks[1].attn.qkv.weight)  # seeded as every init
    heads, vo = products(vitkit.create_model("vit_test", width=64, num_heads=4))
    assert all(qk.diag().mean().abs() < 0.05 for qk in heads) and vo.diag().mean().abs() < 0.05
    assert model.config.to_dict()["attention_init"] == "mimetic"
    assert "attention_init" not in again.config.replace(attention_init="xavier").to_dict()  # as before the key was
    assert ViTConfig.from_dict(model.config.to_dict()) == model.config
    with pytest.raises(ConfigError, match="attention_init: expected one of xavier, mimetic, got 'identity'"):
        get_config("vit_test").replace(attention_init="identity")


def test_reset_head_keeps_or_drops_pre_logits():
    model = vitkit.create_model("vit_test", representation_size=24)
    torch.nn.init.normal_(model.head.weight)
    model.reset_head(7)
    assert model.head.out_features == 7 and torch.count_nonzero(model.head.weight) == 0
    assert model.config.representation_size == 24 and model.head.in_features == 24
    model.reset_head(3, keep_pre_logits=False)
    assert model.config.representation_size is None and model.head.in_features == 32
    assert model(torch.randn(1, 3, 16, 16)).shape == (1, 3)


@pytest.mark.parametrize("pos_embed", ["learned", "sincos2d", "none"])
def test_position_embedding_options(pos_embed):
    model = vitkit.create_model("vit_test", pos_embed=pos_embed)
    names = dict(model.named_parameters())
    assert ("pos_embed" in names) == (pos_embed == "learned")
    if pos_embed == "none":
        assert model.pos_embed is None
    else:
        assert model.pos_embed.shape == (1, 17, 32)
    assert model(torch.randn(2, 3, 16, 16)).shape == (2, 10)


def test_sincos_embedding_is_distinct_per_position_and_zero_in_the_class_slot():
    pe = sincos_2d_pos_embed((3, 5), 16, num_prefix_tokens=1)[0]
    assert pe.shape == (16, 16) and torch.all(pe[0] == 0)
    grid = pe[1:]
    assert torch.cdist(grid, grid).add(torch.eye(15)).min() > 1e-3
    # row/column structure: same row -> identical y half, same column -> identical x half
    torch.testing.assert_close(grid[0, 8:], grid[4, 8:])
    torch.testing.assert_close(grid[0, :8], grid[5, :8])


def test_grayscale_and_non_square_inputs():
    model = vitkit.create_model("vit_test", in_chans=1, image_size=(12, 20))
    assert model.config.grid_size == (3, 5) and model.config.mean == (0.5,)
    assert model(torch.randn(2, 1, 12, 20)).shape == (2, 10)


def test_wrong_input_shape_is_a_clear_error():
    model = vitkit.create_model("vit_test")
    with pytest.raises(ConfigError, match=r"expected images of shape \(B, 3, 16, 16\), got \(2, 3, 20, 20\)"):
        model(torch.randn(2, 3, 20, 20))


def test_dropout_and_drop_path_act_only_in_training():
    model = vitkit.create_model("vit_test", dropout=0.3, attn_dropout=0.3, drop_path=0.3, num_classes=0)
    x = torch.randn(4, 3, 16, 16)
    model.train()
    assert not torch.equal(model(x), model(x))
    model.eval()
    assert torch.equal(model(x), model(x))
    rates = [blk.drop_path.rate for blk in model.blocks]
    assert rates == pytest.approx([0.0, 0.3])


def test_resample_to_the_same_grid_is_an_exact_identity():
    pe = torch.randn(1, 1 + 6 * 4, 8)
    assert torch.equal(resample_pos_embed(pe, (6, 4), old_grid=(6, 4)), pe)


def test_resample_matches_scipy_zoom_order_1_like_the_official_code():
    scipy_ndimage = pytest.importorskip("scipy.ndimage")
    pe = torch.randn(1, 1 + 7 * 5, 6, dtype=torch.float64)
    new = resample_pos_embed(pe, (12, 9), old_grid=(7, 5))
    grid = pe[0, 1:].reshape(7, 5, 6).numpy()
    expected = scipy_ndimage.zoom(grid, (12 / 7, 9 / 5, 1), order=1)
    assert expected.shape == (12, 9, 6)
    np.testing.assert_allclose(new[0, 1:].reshape(12, 9, 6).numpy(), expected, atol=1e-10)
    assert torch.equal(new[:, :1], pe[:, :1])  # the class-token slot is kept


def test_resample_square_default_and_bad_grid():
    pe = torch.randn(1, 1 + 16, 4)
    assert resample_pos_embed(pe, (2, 8)).shape == (1, 17, 4)
    with pytest.raises(ConfigError, match="not a square grid"):
        resample_pos_embed(torch.randn(1, 1 + 12, 4), (4, 4))


def test_set_image_size_resamples_learned_position_embeddings():
    model = vitkit.create_model("vit_test").eval()
    old = model.pos_embed.detach().clone()
    model.set_image_size((24, 32))
    assert model.config.grid_size == (6, 8) and model.pos_embed.shape == (1, 49, 32)
    assert isinstance(model.pos_embed, torch.nn.Parameter)
    torch.testing.assert_close(model.pos_embed[:, 0], old[:, 0])
    # the corners of the grid keep their embeddings (corner-aligned interpolation)
    torch.testing.assert_close(model.pos_embed[0, 1], old[0, 1])
    torch.testing.assert_close(model.pos_embed[0, -1], old[0, -1])
    assert model(torch.randn(1, 3, 24, 32)).shape == (1, 10)
    model.set_image_size(16)
    assert model.pos_embed.shape == (1, 17, 32)


def test_set_image_size_recomputes_sincos():
    model = vitkit.create_model("vit_test", pos_embed="sincos2d")
    model.set_image_size((8, 12))
    torch.testing.assert_close(model.pos_embed, sincos_2d_pos_embed((2, 3), 32, 1))


def test_activation_checkpointing_gives_the_same_gradients():
    model = vitkit.create_model("vit_test", num_classes=0)
    x = torch.randn(3, 3, 16, 16)
    model(x).square().sum().backward()
    plain = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.set_grad_checkpointing(True)
    model(x).square().sum().backward()
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, plain[name], msg=name)


def test_corrupt_hook_replaces_patch_embeddings_before_position_embeddings():
    model = vitkit.create_model("vit_test", num_classes=0).eval()
    x = torch.randn(2, 3, 16, 16)
    seen = {}

    def zero_first_patch(patches):
        seen["shape"] = patches.shape
        patches = patches.clone()
        patches[:, 0] = 0
        return patches

    tokens = model.embed(x, zero_first_patch)
    assert seen["shape"] == (2, 16, 32)
    torch.testing.assert_close(tokens[:, 1], model.pos_embed[:, 1].expand(2, -1))  # only E_pos is left
    torch.testing.assert_close(model.embed(x, lambda p: p), model.embed(x))
    assert model.forward_features(x, zero_first_patch).shape == (2, 17, 32)


@pytest.mark.parametrize("name", ["vit_b16", "r50_vit_b16"])
def test_bf16_cpu_inference_embeds_patches_with_one_gemm_that_matches_the_convolution(monkeypatch, name):
    from vitkit.kernels import patch_gemm

    model = tiny(name, in_chans=1 if name == "vit_b16" else 3).to(torch.bfloat16).eval()
    keys = model.state_dict().keys()
    patch_gemm.install(model)
    assert isinstance(model.patch_embed, patch_gemm.PatchGemm) and model.state_dict().keys() == keys
    c = model.config
    x = torch.randn(2, c.in_chans, *c.image_size).to(torch.bfloat16)
    conv = model.patch_embed
    calls = []
    convolve = torch.nn.Conv2d._conv_forward
    monkeypatch.setattr(
        torch.nn.Conv2d,
        "_conv_forward",
        lambda self, *a: (calls.append(1), convolve(self, *a))[1] if self is conv else convolve(self, *a),
    )
    with torch.no_grad():
        features = model.backbone(x) if model.backbone is not None else x
        got = model.patch_tokens(features)
        fp32 = torch.nn.functional.conv2d(features.float(), conv.weight.float(), conv.bias.float(), stride=conv.stride)
        expected = fp32.flatten(2).transpose(1, 2)
    assert not calls, "bf16 CPU inference should not run the convolution"
    assert got.shape == expected.shape == (2, c.grid_size[0] * c.grid_size[1], c.width)
    assert (got.float() - expected).abs().max() < 0.03 * expected.abs().max()
    with torch.enable_grad():  # training, and any other dtype, keeps the convolution
        model.patch_tokens(features)
    assert calls


@pytest.mark.parametrize("pos_embed, class_token_only", [("learned", False), ("relative", False), ("learned", True)])
def test_short_sequences_train_with_attention_written_out_and_the_same_gradients(
    monkeypatch, pos_embed, class_token_only
):
    """fp32 CPU training of a short sequence skips torch's fused kernel; logits and gradients stay the fused ones."""
    from vitkit.kernels import short_attention
    from vitkit.models import vit

    model = vitkit.create_model("vit_test", pos_embed=pos_embed, num_classes=5)
    short_attention.install(model)
    torch.nn.init.normal_(model.head.weight)
    x = torch.randn(3, 3, 16, 16)
    fused_calls = []
    fused = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(vit.F, "scaled_dot_product_attention", lambda *a, **k: fused_calls.append(1) or fused(*a, **k))

    def logits_and_grads():
        model.zero_grad()
        out = model.forward_head(model.forward_features(x, class_token_only=class_token_only))
        out.square().sum().backward()
        return out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    written, written_grads = logits_and_grads()
    assert not fused_calls
    monkeypatch.setattr(short_attention, "WRITTEN_OUT_MAX_TOKENS", 0)  # the fused kernel
    reference, reference_grads = logits_and_grads()
    assert len(fused_calls) == model.config.depth
    torch.testing.assert_close(written, reference, atol=1e-5, rtol=1e-5)
    assert len(written_grads) == len(reference_grads)
    for got, expected in zip(written_grads, reference_grads):
        assert (got - expected).abs().max() <= 1e-5 * expected.abs().max()  # fp32 summation order, nothing more


def test_attention_keeps_the_fused_kernel_where_written_out_is_not_faster():
    from vitkit.kernels.short_attention import WRITTEN_OUT_MAX_SCORES, WRITTEN_OUT_MAX_TOKENS
    from vitkit.kernels.short_attention import written_out_is_faster as _written_out_is_faster

    def qk(batch, tokens, dtype=torch.float32, grad=True):
        q = torch.randn(batch, 2, tokens, 8, dtype=dtype, requires_grad=grad)
        return q, q.detach()

    assert _written_out_is_faster(*qk(4, 17))
    assert not _written_out_is_faster(*qk(4, WRITTEN_OUT_MAX_TOKENS + 1))  # long sequences
    assert not _written_out_is_faster(*qk(WRITTEN_OUT_MAX_SCORES // (2 * 17 * 17) + 1, 17))  # too many scores to keep
    assert _written_out_is_faster(*qk(4, 17, torch.bfloat16))  # bf16 autocast: its fused backward is slower still
    assert not _written_out_is_faster(*qk(4, 17, torch.float16))
    assert not _written_out_is_faster(*qk(4, 17, grad=False))  # inference: the fused kernel
    with torch.no_grad():
        assert not _written_out_is_faster(*qk(4, 17))
    model = vitkit.create_model("vit_test").train()
    graph = torch.export.export(model, (torch.randn(2, 3, 16, 16),)).graph  # an exported graph keeps the fused op
    assert any("scaled_dot_product" in str(node.target) for node in graph.nodes)


def test_bf16_and_compiled_training_keep_attention_written_out_with_the_fused_gradients(monkeypatch):
    """bf16 autocast training on the CPU, eager and compiled with the training options, runs attention written out
    (inductor's pattern pass would fuse it back): its gradients are the fused kernel's within bf16 rounding."""
    from torch.profiler import profile

    from vitkit.kernels import short_attention

    model = short_attention.install(vitkit.create_model("vit_test", num_classes=5)).train()
    torch.nn.init.normal_(model.head.weight)
    x = torch.randn(4, 3, 16, 16)

    def fused_calls_and_grads(forward):
        model.zero_grad()
        with profile() as prof:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = forward(x)
            out.float().square().sum().backward()
        fused = sum(e.count for e in prof.key_averages() if "scaled_dot_product" in e.key)
        return fused, torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    compiled = torch.compile(model, options=short_attention.compile_options("cpu"))
    fused_eager, eager = fused_calls_and_grads(model)
    fused_compiled, compiled_grads = fused_calls_and_grads(compiled)
    monkeypatch.setattr(short_attention, "WRITTEN_OUT_MAX_TOKENS", 0)  # the fused kernel
    fused_reference, reference = fused_calls_and_grads(model)
    assert fused_eager == fused_compiled == 0 and fused_reference > 0
    for got in (eager, compiled_grads):
        assert (got - reference).norm() <= 0.02 * reference.norm()  # bf16 rounding, not another sum
