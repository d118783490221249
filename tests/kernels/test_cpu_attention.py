import os
import warnings

import pytest
import torch
import torch.nn.functional as F

from vitkit.kernels import cpu_attention
from vitkit.models import VisionTransformer, get_config

if not cpu_attention.load():
    pytest.fail("the CPU attention kernel did not build on this machine (see the warning above)")


def sdpa_reference(qkv: torch.Tensor, heads: int) -> torch.Tensor:
    B, T, three_d = qkv.shape
    q, k, v = (t.transpose(1, 2) for t in qkv.view(B, T, 3, heads, three_d // 3 // heads).unbind(2))
    return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, T, three_d // 3)


@pytest.mark.parametrize(
    "B, T, heads, head_dim, gain",
    [(2, 197, 6, 64, 1.0), (3, 50, 3, 24, 1.0), (1, 17, 4, 8, 1.0), (1, 5, 1, 3, 1.0), (2, 65, 2, 16, 30.0)],
)
def test_kernel_matches_sdpa(B, T, heads, head_dim, gain):
    """Odd lengths and head sizes take the vector tails; gain 30 gives scores far apart (near-one-hot rows)."""
    qkv = torch.randn(B, T, 3 * heads * head_dim) * gain
    out = torch.ops.vitkit.attention(qkv, heads, head_dim**-0.5)
    assert out.shape == (B, T, heads * head_dim)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, sdpa_reference(qkv, heads), atol=2e-5 * gain, rtol=1e-5)


def test_wrapper_hands_what_the_kernel_does_not_cover_to_sdpa(monkeypatch):
    qkv = torch.randn(2, 9, 3 * 16, dtype=torch.float64)  # not float32: SDPA
    torch.testing.assert_close(cpu_attention.attention(qkv, 2), sdpa_reference(qkv, 2))
    strided = torch.randn(2, 3 * 16, 9).transpose(1, 2)  # made contiguous for the kernel
    torch.testing.assert_close(cpu_attention.attention(strided, 2), sdpa_reference(strided, 2), atol=1e-6, rtol=1e-5)
    monkeypatch.setattr(cpu_attention, "_loaded", False)  # a failed build: SDPA, never the missing op
    qkv = torch.randn(2, 9, 3 * 16)
    torch.testing.assert_close(cpu_attention.attention(qkv, 2), sdpa_reference(qkv, 2))


def test_kernel_rejects_a_layout_it_cannot_split():
    with pytest.raises(RuntimeError, match="heads"):
        torch.ops.vitkit.attention(torch.randn(1, 4, 3 * 10), 3, 1.0)
    with pytest.raises(RuntimeError, match="contiguous float32"):
        torch.ops.vitkit.attention(torch.randn(1, 4, 30, dtype=torch.float64), 2, 1.0)


def _model_pair():
    model = VisionTransformer(get_config("vit_test", num_classes=5)).eval()
    with torch.no_grad():
        model.head.weight.normal_()  # the zero-initialised head would hide any difference
    return model


def test_model_with_kernel_matches_sdpa_in_inference():
    model = _model_pair()
    x = torch.randn(3, 3, 16, 16)
    with torch.inference_mode():
        want = model(x), model.forward_features(x)
        model.set_attention_kernel(cpu_attention.attention)
        got = model(x), model.forward_features(x)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_training_and_gradients_never_reach_the_kernel():
    calls = []

    def spy(qkv, heads):
        calls.append(qkv.shape)
        return cpu_attention.attention(qkv, heads)

    model = _model_pair()
    model.set_attention_kernel(spy)
    x = torch.randn(2, 3, 16, 16)
    model(x).sum().backward()  # eval mode, gradients on
    model.train()
    model(x).sum().backward()
    assert calls == [] and model.blocks[0].attn.qkv.weight.grad is not None
    model.eval()
    with torch.no_grad():
        model.forward_features(x)
    assert len(calls) == len(model.blocks)
    model.set_attention_kernel(None)
    with torch.no_grad():
        model.forward_features(x)
    assert len(calls) == len(model.blocks)


def test_compiled_model_calls_the_kernel():
    model = _model_pair()
    x = torch.randn(2, 3, 16, 16)
    with torch.inference_mode():
        want = model(x)
        model.set_attention_kernel(cpu_attention.attention)
        compiled = torch.compile(model, fullgraph=True)
        torch.testing.assert_close(compiled(x), want, atol=1e-5, rtol=1e-5)


def test_build_is_cached_and_a_missing_compiler_falls_back(monkeypatch, tmp_path):
    first = cpu_attention._build()
    stamp = first.stat().st_mtime_ns
    assert cpu_attention._build() == first and first.stat().st_mtime_ns == stamp  # no second compile
    assert first.parent == cpu_attention.cache_dir() and str(first).startswith(os.environ["VITKIT_CACHE"])

    monkeypatch.setattr(cpu_attention, "_loaded", None)
    monkeypatch.setenv("VITKIT_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cpu_attention.load() is False
    assert any("no C++ compiler" in str(w.message) and "SDPA" in str(w.message) for w in caught)
    assert list(tmp_path.iterdir()) == []  # nothing half-written
