"""Position-embedding variants of App. D.4: learned (1D), learned_2d, relative, sincos2d, none."""

import pytest
import torch
import torch.nn.functional as F

import vitkit
from vitkit.checkpoint import load_pretrained, save_checkpoint
from vitkit.errors import CheckpointError

VARIANTS = ["learned", "learned_2d", "relative", "sincos2d", "none"]


def model(pos_embed, **kw):
    m = vitkit.create_model("vit_test", pos_embed=pos_embed, image_size=(16, 12), **kw).eval()
    torch.nn.init.normal_(m.head.weight)
    return m


@pytest.mark.parametrize("pos_embed", VARIANTS)
@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_fused_and_explicit_paths_agree_and_train(pos_embed, classifier):
    m = model(pos_embed, classifier=classifier)
    x = torch.randn(3, 3, 16, 12)
    with torch.no_grad():
        fast = m.forward_features(x)
        slow, maps = m.forward_features_explicit(x)
        logits = m(x)  # with a class token: the last layer for that token alone
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits, m.forward_head(slow), atol=1e-5, rtol=1e-5)
    assert len(maps) == 2
    m.train()
    (m(x).sum() + m.forward_features(x).square().mean()).backward()
    assert [n for n, p in m.named_parameters() if p.grad is None] == []


def test_relative_bias_goes_to_sdpa_as_attn_mask(monkeypatch):
    m = model("relative")
    seen = []
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kw):
        seen.append(None if attn_mask is None else tuple(attn_mask.shape))
        return sdpa(q, k, v, attn_mask=attn_mask, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    with torch.no_grad():
        m.forward_features(torch.randn(2, 3, 16, 12))
    T = 1 + 12
    assert seen == [(2, T, T), (2, T, T)]  # one fused call per layer, the bias as its float mask


def test_relative_bias_depends_only_on_the_offset():
    m = model("relative")
    bias = m.blocks[0].attn.position_bias()  # (nh, T, T)
    gh, gw = m.config.grid_size
    assert bias.shape == (2, 1 + gh * gw, 1 + gh * gw) and torch.count_nonzero(bias[:, 0]) == 0  # class token: no bias
    pos = [(i, j) for i in range(gh) for j in range(gw)]
    by_offset = {}
    for a, (ya, xa) in enumerate(pos):
        for b, (yb, xb) in enumerate(pos):
            by_offset.setdefault((ya - yb, xa - xb), []).append(bias[:, 1 + a, 1 + b])
    assert len(by_offset) == (2 * gh - 1) * (2 * gw - 1)
    for values in by_offset.values():
        assert all(torch.equal(v, values[0]) for v in values)


def test_learned_2d_is_row_and_column_concatenated():
    m = model("learned_2d")
    pe = m.position_embedding()[0, 1:].reshape(4, 3, 32)
    assert torch.equal(pe[2, 1, :16], m.pos_embed_row[2]) and torch.equal(pe[2, 1, 16:], m.pos_embed_col[1])
    assert sum(p.numel() for n, p in m.named_parameters() if "pos_embed" in n) == (4 + 3) * 16


@pytest.mark.parametrize("pos_embed", VARIANTS)
def test_interpolates_to_a_new_resolution_and_saves(pos_embed, tmp_path):
    m = model(pos_embed)
    x = torch.randn(2, 3, 16, 12)
    with torch.no_grad():
        before = m(x)
    vitkit.save_pretrained(m, tmp_path / "a")
    back = load_pretrained(tmp_path / "a")
    with torch.no_grad():
        torch.testing.assert_close(back(x), before, atol=0, rtol=0)
    m.set_image_size((24, 20))  # 4x3 -> 6x5 grid
    assert m.config.grid_size == (6, 5)
    y = torch.randn(2, 3, 24, 20)
    with torch.no_grad():
        fast, (slow, _) = m.forward_features(y), m.forward_features_explicit(y)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    vitkit.save_pretrained(m, tmp_path / "b")
    with torch.no_grad():
        torch.testing.assert_close(load_pretrained(tmp_path / "b")(y), m(y), atol=0, rtol=0)
    assert load_pretrained(tmp_path / "a", image_size=(24, 20)).state_dict().keys() == m.state_dict().keys()


def test_resampling_keeps_corners_and_the_zero_offset():
    m = model("learned_2d")
    row, col = m.pos_embed_row.detach().clone(), m.pos_embed_col.detach().clone()
    m.set_image_size((28, 20))
    assert torch.allclose(m.pos_embed_row[0], row[0]) and torch.allclose(m.pos_embed_row[-1], row[-1])
    assert torch.allclose(m.pos_embed_col[-1], col[-1])
    r = model("relative")
    table = r.blocks[1].attn.position_bias.table.detach().clone()  # (nh, 7, 5): offset 0 at [3, 2]
    r.set_image_size((28, 20))  # grid 7x5: table (nh, 13, 9), offset 0 at [6, 4]
    assert torch.allclose(r.blocks[1].attn.position_bias.table[:, 6, 4], table[:, 3, 2])


def test_other_formats_refuse_them_by_name(tmp_path):
    for fmt, name in (("npz", "a.npz"), ("timm", "a.safetensors")):
        with pytest.raises(CheckpointError, match="learned_2d"):
            save_checkpoint(model("learned_2d"), tmp_path / name, fmt)
