import copy
import os
import warnings

import pytest
import torch
import torch.nn.functional as F

from vitkit.kernels import block_kernels, cpu_inference, swap
from vitkit.models import VisionTransformer, get_config

pytestmark = pytest.mark.numerics  # float results: run again under ISA caps


@pytest.fixture(autouse=True, scope="module")
def _kernels_built():
    """Built by the first test, not at collection, where every pytest-xdist worker would wait on the compiler."""
    if not cpu_inference.load():
        pytest.fail("the CPU inference kernels did not build on this machine (see the warning above)")


def sdpa_reference(qkv: torch.Tensor, bias: torch.Tensor, heads: int) -> torch.Tensor:
    B, T, three_d = qkv.shape
    q, k, v = (t.transpose(1, 2) for t in (qkv + bias).view(B, T, 3, heads, three_d // 3 // heads).unbind(2))
    return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, T, three_d // 3)


@pytest.mark.parametrize(
    "B, T, heads, head_dim, gain",
    [(2, 197, 6, 64, 1.0), (3, 50, 3, 24, 1.0), (1, 17, 4, 8, 1.0), (1, 5, 1, 3, 1.0), (2, 65, 2, 16, 30.0)],
)
def test_attention_matches_sdpa(B, T, heads, head_dim, gain):
    """Odd lengths and head sizes take the vector tails; gain 30 gives scores far apart (near-one-hot rows).

    The bias is large, so a kernel that dropped the query or value bias, or mishandled the key bias it
    leaves out (softmax cancels it), would be far off.
    """
    qkv = torch.randn(B, T, 3 * heads * head_dim) * gain
    bias = torch.randn(3 * heads * head_dim) * 3
    out = torch.ops.vitkit.attention(qkv, bias, heads, head_dim**-0.5)
    assert out.shape == (B, T, heads * head_dim)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, sdpa_reference(qkv, bias, heads), atol=2e-5 * gain * 3, rtol=1e-5)


def test_attention_wrapper_hands_what_the_kernel_does_not_cover_to_sdpa(monkeypatch):
    bias = torch.randn(3 * 16)
    qkv = torch.randn(2, 9, 3 * 16, dtype=torch.float64)  # not float32: SDPA
    torch.testing.assert_close(cpu_inference.attention(qkv, bias.double(), 2), sdpa_reference(qkv, bias.double(), 2))
    strided = torch.randn(2, 3 * 16, 9).transpose(1, 2)  # made contiguous for the kernel
    torch.testing.assert_close(
        cpu_inference.attention(strided, bias, 2), sdpa_reference(strided, bias, 2), atol=1e-5, rtol=1e-5
    )
    monkeypatch.setattr(cpu_inference, "_loaded", False)  # a failed build: SDPA, never the missing op
    qkv = torch.randn(2, 9, 3 * 16)
    torch.testing.assert_close(cpu_inference.attention(qkv, bias, 2), sdpa_reference(qkv, bias, 2))


needs_bf16_kernel = pytest.mark.usefixtures("bf16_kernel")


def attention_f64(qkv: torch.Tensor, bias: torch.Tensor, heads: int) -> torch.Tensor:
    return sdpa_reference(qkv.double(), bias.double(), heads)


@needs_bf16_kernel
@pytest.mark.parametrize(
    "B, T, heads, head_dim",
    [(2, 197, 6, 64), (1, 17, 4, 80), (3, 50, 2, 32), (1, 5, 3, 128), (2, 33, 2, 48), (1, 1, 2, 96)],
)
def test_bf16_attention_kernel_keeps_its_scores_in_fp32(B, T, heads, head_dim):
    """Against float64 on the same bf16 inputs: closer than attention whose scores are rounded to bf16 (the written-out
    bf16 matmuls), and within what rounding the output to bf16 allows. Odd lengths take the tiles' padding."""
    g = torch.Generator().manual_seed(T)
    qkv = (torch.randn(B, T, 3 * heads * head_dim, generator=g) * 2).bfloat16()
    bias = torch.randn(3 * heads * head_dim, generator=g).bfloat16()
    with torch.inference_mode():
        got = cpu_inference.attention_bf16(qkv, bias, heads)
    want = attention_f64(qkv, bias, heads)
    q, k, v = (qkv + bias).view(B, T, 3, heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
    rounded_scores = (((q * head_dim**-0.5) @ k.transpose(-2, -1)).softmax(-1) @ v).transpose(1, 2).reshape(B, T, -1)
    assert got.dtype == torch.bfloat16 and got.shape == (B, T, heads * head_dim)
    err, err_rounded = ((x.double() - want).abs().mean().item() for x in (got, rounded_scores))
    assert err <= err_rounded, (err, err_rounded)
    assert (got.double() - want).abs().max() <= 2**-6 * want.abs().max()  # a few bf16 roundings of the largest output


@needs_bf16_kernel
def test_bf16_attention_kernel_leaves_what_it_does_not_cover_to_the_caller():
    qkv, bias = torch.randn(1, 9, 3 * 2 * 40).bfloat16(), torch.randn(3 * 2 * 40).bfloat16()
    assert cpu_inference.attention_bf16(qkv, bias, 2) is None  # head size 40
    assert cpu_inference.attention_bf16(qkv.float(), bias.float(), 3) is None  # not bf16
    assert cpu_inference.attention_bf16(qkv.requires_grad_(), bias, 3) is None  # training
    assert (
        cpu_inference.attention_bf16(
            torch.randn(1, cpu_inference.MAX_TOKENS + 1, 3 * 64).bfloat16(), torch.randn(3 * 64).bfloat16(), 1
        )
        is None
    )
    strided = torch.randn(1, 3 * 64, 9).bfloat16().transpose(1, 2)  # made contiguous for the kernel
    with torch.inference_mode():
        got, want = (
            cpu_inference.attention_bf16(strided, bias[: 3 * 64], 1).double(),
            attention_f64(strided, bias[: 3 * 64], 1),
        )
    assert (got - want).abs().max() <= 2**-6 * want.abs().max()


def test_long_sequences_go_to_sdpa(monkeypatch):
    """Past MAX_TOKENS a head's scores outgrow the cache and torch's flash kernel is as fast: SDPA runs."""
    qkv, bias = torch.randn(1, 9, 3 * 16), torch.randn(3 * 16)
    for limit, kernel_runs in ((9, True), (8, False)):
        monkeypatch.setattr(cpu_inference, "MAX_TOKENS", limit)
        with torch.profiler.profile() as prof:
            out = cpu_inference.attention(qkv, bias, 2)
        ran = {e.name for e in prof.events()}
        assert ("vitkit::attention" in ran) == kernel_runs, sorted(ran)
        torch.testing.assert_close(out, sdpa_reference(qkv, bias, 2), atol=1e-5, rtol=1e-5)


def test_kernels_reject_layouts_they_cannot_read():
    with pytest.raises(RuntimeError, match="heads"):
        torch.ops.vitkit.attention(torch.randn(1, 4, 3 * 10), torch.zeros(30), 3, 1.0)
    with pytest.raises(RuntimeError, match="contiguous float32"):
        torch.ops.vitkit.attention(torch.randn(1, 4, 30, dtype=torch.float64), torch.zeros(30), 2, 1.0)
    with pytest.raises(RuntimeError, match="bias of 30 values"):
        torch.ops.vitkit.attention(torch.randn(1, 4, 30), torch.zeros(10), 2, 1.0)
    with pytest.raises(RuntimeError, match="bias of 8 values"):
        torch.ops.vitkit.bias_gelu_(torch.randn(3, 8), torch.zeros(7), False)


GELU_INPUTS = torch.cat([torch.linspace(-12, 12, 240_013), torch.tensor([0.0, 6.0, -6.0, 5.99999, 1e30, -1e30])])


@pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() != "AVX512",
    reason="the tail table is the AVX-512 build's; the AVX2 build's closed forms are tested in test_build.py",
)
@pytest.mark.parametrize("approximate", [False, True])
def test_bias_gelu_is_as_accurate_as_float32_allows(approximate):
    """Every piece of the tail table and both ends of its range, against float64; a column count
    that is not a multiple of 16 takes the masked tail."""
    form = "tanh" if approximate else "none"
    h = GELU_INPUTS.view(-1, 13)
    bias = torch.linspace(-0.5, 0.5, 13)
    exact = F.gelu((h + bias).double(), approximate=form)
    torch_error = (F.gelu(h + bias, approximate=form).double() - exact).abs().max().item()
    got = cpu_inference.bias_gelu_(h, bias, approximate).double()
    assert (got - exact).abs().max().item() < 3e-7 < 3 * torch_error  # torch's own float32 GELU is further off


def test_bias_gelu_keeps_nan_and_infinity():
    out = torch.tensor([[float("nan"), float("inf"), -float("inf"), 0.0]])
    torch.ops.vitkit.bias_gelu_(out, torch.zeros(4), False)
    assert out[0, 0].isnan() and out[0, 1] == float("inf") and abs(out[0, 2].item()) < 1e-8 and out[0, 3] == 0


def test_bias_gelu_works_in_place():
    h, bias = torch.randn(5, 40), torch.randn(40)
    want = F.gelu(h + bias)
    out = cpu_inference.bias_gelu_(h, bias)
    assert out.data_ptr() == h.data_ptr()
    torch.testing.assert_close(h, want, atol=1e-6, rtol=1e-6)


def test_bias_gelu_wrapper_falls_back_to_torch(monkeypatch):
    h, bias = torch.randn(3, 20, dtype=torch.float64), torch.randn(20, dtype=torch.float64)
    torch.testing.assert_close(cpu_inference.bias_gelu_(h, bias), F.gelu(h + bias))
    monkeypatch.setattr(cpu_inference, "_loaded", False)
    h, bias = torch.randn(3, 20), torch.randn(20)
    torch.testing.assert_close(
        cpu_inference.bias_gelu_(h, bias, approximate=True), F.gelu(h + bias, approximate="tanh")
    )


def _model(**overrides):
    model = VisionTransformer(get_config("vit_test", num_classes=5, **overrides)).eval()
    with torch.no_grad():
        model.head.weight.normal_()  # the zero-initialised head would hide any difference
        for block in model.blocks:  # biases start at zero; the kernels must add them
            for linear in (block.attn.qkv, block.mlp.fc1):
                linear.bias.normal_()
    return model


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh"])
def test_model_with_kernels_matches_torch_in_inference(act):
    model = _model(mlp_act=act)
    x = torch.randn(3, 3, 16, 16)
    with torch.inference_mode():
        want = model(x), model.forward_features(x)
        block_kernels.install(model, cpu_inference)
        got = model(x), model.forward_features(x)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_a_model_with_kernels_deep_copies():
    model = _model()
    block_kernels.install(model, cpu_inference)
    twin = copy.deepcopy(model)  # e.g. for an EMA copy
    assert (
        twin.blocks[0].attn.kernel is cpu_inference.attention
        and twin.blocks[0].mlp.bias_gelu_ is cpu_inference.bias_gelu_
    )
    assert twin.state_dict().keys() == _model().state_dict().keys()
    x = torch.randn(2, 3, 16, 16)
    with torch.inference_mode():
        torch.testing.assert_close(twin(x), model(x))


def test_training_and_gradients_never_reach_the_kernels(kernel_spy):
    spy, calls = kernel_spy
    model = _model()
    block_kernels.install(model, spy)
    x = torch.randn(2, 3, 16, 16)
    model(x).sum().backward()  # eval mode, gradients on
    model.train()
    model(x).sum().backward()
    assert calls == [] and model.blocks[0].attn.qkv.weight.grad is not None
    model.eval()
    with torch.no_grad():
        model.forward_features(x)
    assert sorted(calls) == ["attention"] * len(model.blocks) + ["bias_gelu_"] * len(model.blocks)
    swap.unswap(model)
    with torch.no_grad():
        model.forward_features(x)
    assert len(calls) == 2 * len(model.blocks)


def test_compiled_model_calls_the_kernels():
    model = _model()
    x = torch.randn(2, 3, 16, 16)
    with torch.inference_mode():
        want = model(x)
        block_kernels.install(model, cpu_inference)
        compiled = torch.compile(model, fullgraph=True)
        torch.testing.assert_close(compiled(x), want, atol=1e-5, rtol=1e-5)


def test_build_is_cached_and_a_missing_compiler_falls_back(monkeypatch, tmp_path):
    first = cpu_inference._build()
    stamp = first.stat().st_mtime_ns
    assert cpu_inference._build() == first and first.stat().st_mtime_ns == stamp  # no second compile
    assert first.parent == cpu_inference.cache_dir() and str(first).startswith(os.environ["VITKIT_CACHE"])

    monkeypatch.setattr(cpu_inference, "_loaded", None)
    monkeypatch.setenv("VITKIT_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cpu_inference.load() is False
    assert any("no C/C++ compiler" in str(w.message) and "SDPA" in str(w.message) for w in caught)
    assert list(tmp_path.iterdir()) == []  # nothing half-written
