import pytest
import torch

import vitkit
from vitkit.errors import ConfigError
from vitkit.evaluate.metrics import evaluate
from vitkit.inference import precision
from vitkit.kernels import cpu_inference
from vitkit.models.vit import Attention, Mlp

pytestmark = pytest.mark.numerics  # float results: run again under ISA caps


def _plain(block) -> bool:
    """Whether a block has the model's own attention and MLP, no speed path swapped in."""
    return type(block.attn) is Attention and type(block.mlp) is Mlp


@pytest.fixture
def model():
    torch.manual_seed(0)
    m = vitkit.create_model("vit_test", num_classes=10).eval()
    torch.nn.init.normal_(m.head.weight)  # a zero head would make every prediction agree
    return m


def _batches(n=3, size=8):
    g = torch.Generator().manual_seed(1)
    return [
        (
            torch.randint(0, 256, (size, 3, 16, 16), dtype=torch.uint8, generator=g),
            torch.randint(0, 10, (size,), generator=g),
        )
        for _ in range(n)
    ]


def test_fp32_runner_is_the_model_and_pads_a_short_last_batch(model):
    runner = precision.prepare(model, "fp32", compile=False, kernels=False)
    x = torch.randn(8, 3, 16, 16)
    torch.testing.assert_close(runner(x), model(x).detach(), atol=1e-5, rtol=1e-5)  # (oneDNN's GEMMs on some CPUs)
    short = runner(x[:3])  # padded to the first batch's size, cut back
    assert short.shape == (3, 10) and torch.allclose(short, model(x[:3]).detach(), atol=1e-5)
    assert runner(torch.randn(20, 3, 16, 16)).shape == (20, 10)  # larger batches run in parts
    features = precision.prepare(model, "fp32", compile=False, pre_logits=True)(x)
    assert features.shape == (8, model.config.width)


@pytest.mark.parametrize("compile", [False, True])
def test_fp32_runner_uses_vitkits_cpu_kernels_while_it_runs(model, monkeypatch, kernel_spy, compile):
    from vitkit.kernels import cpu_inference

    if not cpu_inference.load():
        pytest.skip("vitkit's CPU kernels do not build here")
    cpu = torch.device("cpu")
    assert precision._cpu_kernels(model, "fp32", cpu) is cpu_inference  # fp32 on the CPU only
    assert (
        precision._cpu_kernels(model, "bf16", cpu) is None
        and precision._cpu_kernels(model, "fp32", torch.device("meta")) is None
    )
    spy, calls = kernel_spy
    monkeypatch.setattr(precision, "_cpu_kernels", lambda *a: spy)
    runner = precision.prepare(model, "fp32", compile=compile)
    x = torch.randn(4, 3, 16, 16)
    with torch.inference_mode():
        want = model(x)  # torch's ops
        got = runner(x)
    assert sorted(set(calls)) == ["attention", "bias_gelu_"] and "kernels" in runner.description
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert all(_plain(block) for block in model.blocks)  # left as it was
    calls.clear()
    with torch.inference_mode():
        model(x)
    assert calls == []
    plain = precision.prepare(model, "fp32", compile=False, kernels=False)
    assert "kernels" not in plain.description
    torch.testing.assert_close(plain(x), want, atol=1e-5, rtol=1e-5)


def test_compiled_fp32_gemms_are_onednns_on_cpus_not_made_by_intel(monkeypatch):
    for vendor, onednn in (("AuthenticAMD", True), ("HygonGenuine", True), ("GenuineIntel", False), ("", False)):
        monkeypatch.setattr(precision, "cpuinfo", lambda field, v=vendor: v if field == "vendor_id" else "")
        assert precision.onednn_fp32_gemms() is onednn


@pytest.mark.parametrize("onednn", [True, False])
def test_compiled_fp32_runs_its_gemms_through_the_library_chosen_for_the_cpu(model, monkeypatch, onednn):
    from torch._inductor.utils import run_and_get_code

    monkeypatch.setattr(precision, "onednn_fp32_gemms", lambda: onednn)
    runner = precision.prepare(model, "fp32", compile=True)
    x = torch.randn(4, 3, 16, 16)
    with torch.inference_mode():
        got, code = run_and_get_code(runner, x)  # the source inductor generated for the graph
        want = model(x)
    source = "\n".join(code)
    assert ("mkldnn._linear_pointwise" in source, "mkl._mkl_linear" in source) == (onednn, not onednn)
    assert ("oneDNN GEMMs" in runner.description) is onednn
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(runner(x[:3]), want[:3], atol=1e-5, rtol=1e-5)  # a short batch, padded
    if onednn:  # a batch of one compiles once more, and its GEMMs stay oneDNN's
        with torch.inference_mode():
            one, code = run_and_get_code(runner.run_batch, x[:1])
        assert "mkldnn._linear_pointwise" in "\n".join(code)  # (a few small GEMMs of constant size stay MKL's)
        torch.testing.assert_close(one, want[:1], atol=1e-5, rtol=1e-5)


@pytest.fixture
def small_gemms_to_onednn(monkeypatch):
    """The test model's GEMMs are far below the sizes where eager oneDNN pays; here they go to it all the same."""
    monkeypatch.setattr(precision.OneDNNLinears, "MIN_MACS", 0)
    monkeypatch.setattr(precision.OneDNNLinears, "MIN_WEIGHTS", 0)


@pytest.mark.parametrize("onednn", [True, False])
def test_eager_fp32_runs_its_gemms_through_the_library_chosen_for_the_cpu(
    model, monkeypatch, small_gemms_to_onednn, onednn
):
    monkeypatch.setattr(precision, "onednn_fp32_gemms", lambda: onednn)
    runner = precision.prepare(model, "fp32", compile=False, kernels=False)
    x = torch.randn(4, 3, 16, 16)
    with torch.inference_mode():
        want = model(x)
        with torch.profiler.profile() as prof:
            got = runner(x)
    ops = {event.name for event in prof.events()}
    assert ("mkldnn::_linear_pointwise" in ops, "aten::addmm" in ops) == (onednn, not onednn)
    assert ("oneDNN GEMMs" in runner.description) is onednn and not runner.compiled
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with torch.inference_mode():
        want = model(x)  # outside the runner: torch's own GEMMs again
    torch.testing.assert_close(runner.run_batch(x[:1]), want[:1], atol=1e-5, rtol=1e-5)  # a batch of one, same packs


@pytest.mark.skipif(precision.native_bf16() is None, reason="this CPU has no native bf16")
@pytest.mark.parametrize("isa, packed", [("AVX512_BF16", True), ("AMX", False)])
def test_eager_bf16_packs_its_gemms_for_onednn_where_the_cpu_has_no_amx(
    model, monkeypatch, small_gemms_to_onednn, isa, packed
):
    """ViT-S/16 / ViT-B/16 eager bf16 at batch 8 ran 1.09x / 1.05x faster packed on an AMD EPYC; on an AMX Xeon the
    packed bf16 GEMMs stalled between ops (benchmarks/RESULTS.md). The same oneDNN kernel: the same numbers."""
    monkeypatch.setattr(precision, "native_bf16", lambda: isa)
    runner = precision.prepare(model, "bf16", compile=False, kernels=False)
    plain = precision.prepare(model, "bf16", compile=False, kernels=False)
    plain._eager_linears = None
    x = torch.randn(4, 3, 16, 16)
    with torch.profiler.profile() as prof:
        got = runner(x)
    ops = {event.name for event in prof.events()}
    assert ("mkldnn::_linear_pointwise" in ops, "aten::addmm" in ops) == (packed, not packed)
    assert ("eager GEMMs packed for oneDNN" in runner.description) is packed
    torch.testing.assert_close(got, plain(x), atol=1e-2, rtol=1e-2)
    assert not torch.equal(got, torch.zeros_like(got))


def test_eager_oneDNN_is_left_out_for_small_models_and_small_gemms(model, monkeypatch):
    """Below the sizes where it pays (each oneDNN call costs more than MKL's, the mode a little on every op)."""
    monkeypatch.setattr(precision, "onednn_fp32_gemms", lambda: True)
    assert not precision.OneDNNLinears.worth_it(model)  # the test model: far below ViT-Ti's 5.5M linear weights
    runner = precision.prepare(model, "fp32", compile=False, kernels=False)
    assert runner._eager_linears is None and "oneDNN" not in runner.description
    mode = precision.OneDNNLinears()
    small, large = torch.randn(8, 64), torch.randn(4096, 512)
    w_small, w_large = torch.randn(64, 64), torch.randn(512, 512)  # 32K and 1,074M multiply-adds
    with torch.inference_mode(), torch.profiler.profile() as prof, mode:
        torch.nn.functional.linear(small, w_small)
    assert "mkldnn::_linear_pointwise" not in {e.name for e in prof.events()}
    with torch.inference_mode(), torch.profiler.profile() as prof, mode:
        out = torch.nn.functional.linear(large, w_large)
    assert "mkldnn::_linear_pointwise" in {e.name for e in prof.events()}
    torch.testing.assert_close(out, large @ w_large.T, atol=1e-4, rtol=1e-4)


def test_eager_onednn_gemms_pack_a_weight_again_once_it_is_written(model, monkeypatch, small_gemms_to_onednn):
    monkeypatch.setattr(precision, "onednn_fp32_gemms", lambda: True)
    runner = precision.prepare(model, "fp32", compile=False, kernels=False)
    x = torch.randn(4, 3, 16, 16)
    before = runner(x)
    with torch.no_grad():  # in place, as an optimizer step or load_state_dict writes them
        model.head.weight.mul_(2.0)
        model.blocks[0].attn.qkv.weight.add_(0.05)
        model.blocks[-1].attn.qkv.weight.mul_(0.5)  # the class-token layer reads slices of it
    with torch.inference_mode():
        want = model(x)
    got = runner(x)
    assert not torch.allclose(got, before, atol=1e-3)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_eager_onednn_gemms_take_a_model_made_under_inference_mode(monkeypatch, small_gemms_to_onednn):
    monkeypatch.setattr(precision, "onednn_fp32_gemms", lambda: True)
    with torch.inference_mode():  # its weights are inference tensors, which have no version counter to watch
        model = vitkit.create_model("vit_test", num_classes=10).eval()
        torch.nn.init.normal_(model.head.weight)
        x = torch.randn(2, 3, 16, 16)
        want = model(x)
    torch.testing.assert_close(
        precision.prepare(model, "fp32", compile=False, kernels=False)(x), want, atol=1e-5, rtol=1e-5
    )


def test_bf16_needs_native_bf16(monkeypatch):
    monkeypatch.setattr(precision, "native_bf16", lambda: None)
    with pytest.raises(ConfigError, match="no native bf16"):
        precision.check("bf16", "cpu")
    with pytest.raises(ConfigError, match="expected one of fp32, bf16, int8, int8-dynamic"):
        precision.check("fp8", "cpu")


def test_bf16_agrees_with_fp32(model):
    if precision.native_bf16() is None:
        pytest.skip("this CPU has no native bf16")
    x = torch.randn(16, 3, 16, 16)
    runner = precision.prepare(model, "bf16", compile=False)
    out, ref = runner(x), model(x).detach()
    assert out.dtype == torch.float32 and "bf16 weights and activations" in runner.description
    assert next(runner.forward.parameters()).dtype == torch.bfloat16  # a bf16 copy runs, no autocast casts per op
    assert next(model.parameters()).dtype == torch.float32  # the caller's model is left as it was
    assert (out - ref).abs().max() < 0.1 * ref.abs().max()
    assert (out.argmax(1) == ref.argmax(1)).float().mean() >= 0.9


def test_int8_is_calibrated_and_close_to_fp32(model):
    pytest.importorskip("torchao")
    calibration = [torch.randn(8, 3, 16, 16) for _ in range(4)]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    runner = precision.prepare(model, "int8", compile=False, calibration=calibration)
    x = torch.randn(8, 3, 16, 16)
    out, ref = runner(x), model(x).detach()
    after = (
        model.state_dict()
    )  # quantizing works on an exported graph sharing the weights: they must stay fp32 and untouched
    assert all(torch.equal(before[k], after[k]) and after[k].dtype == before[k].dtype for k in before)
    assert "32 calibration images" in runner.description and "int8" in runner.description
    assert not torch.equal(out, ref)  # it really is quantized
    assert (out - ref).abs().max() < 0.1 * ref.abs().max()


def test_int8_without_calibration_images_says_it_calibrates_on_its_first_batch_before_and_after_it_runs(model):
    """prepare(model, "int8") without calibration= quantizes on the first batch it runs; its description said nothing
    of it until then, so a report written before that batch claimed no calibration at all."""
    pytest.importorskip("torchao")
    runner = precision.prepare(model, "int8", compile=False)
    assert "calibrated on its first batch" in runner.description
    runner(torch.randn(6, 3, 16, 16))
    assert (
        "calibrated on its first batch (6 images)" in runner.description
        and "no calibration images" not in runner.description
    )


def test_int8_built_on_a_batch_of_one_image_runs_every_batch_size(model):
    """`vitkit predict one.png --precision int8` and Classifier.predict(one image) exported the graph on a batch of one,
    which torch.export cannot keep dynamic: a traceback ("Constraints violated (batch)")."""
    pytest.importorskip("torchao")
    runner = precision.prepare(model, "int8", compile=False, calibration=[torch.randn(4, 3, 16, 16)])
    one, three = torch.randn(1, 3, 16, 16), torch.randn(3, 3, 16, 16)
    assert runner(one).shape == (1, model.config.num_classes) and runner.run_batch(three).shape == (
        3,
        model.config.num_classes,
    )
    assert torch.allclose(runner.run_batch(torch.cat([one, three])), torch.cat([runner(one), runner(three)]), atol=1e-5)


def test_int8_dynamic_quantizes_a_copy_without_calibration(model):
    """Eager here; the compiled runner: test_int8_dynamic_runs_attention_and_gelu_through_vitkits_kernels."""
    pytest.importorskip("torchao")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    runner = precision.prepare(model, "int8-dynamic", compile=False)
    x = torch.randn(8, 3, 16, 16)
    out, ref = runner(x), model(x).detach()
    assert "int8 dynamic" in runner.description and "calibration" not in runner.description
    assert not runner.compiled
    after = model.state_dict()  # the caller's model stays fp32 and untouched
    assert all(torch.equal(before[k], after[k]) and after[k].dtype == before[k].dtype for k in before)
    assert not torch.equal(out, ref)  # it really is quantized
    assert (out - ref).abs().max() < 0.1 * ref.abs().max()
    assert (out.argmax(1) == ref.argmax(1)).float().mean() >= 0.9
    with pytest.raises(ConfigError, match="int8-dynamic: runs on the CPU only"):
        precision.check("int8-dynamic", "cuda")


def test_evaluate_reports_the_cost_against_a_reference(model):
    fp32 = precision.prepare(model, "fp32", compile=False)
    same = evaluate(model, _batches(), runner=fp32, reference=fp32)
    assert same["agreement"] == 1.0 and same["top1_delta"] == 0.0 and same["reference_top1"] == same["top1"]
    flipped = evaluate(model, _batches(), runner=lambda x: -model(x), reference=fp32)  # a runner that disagrees
    assert flipped["agreement"] < 0.5 and flipped["top1_delta"] == pytest.approx(flipped["top1"] - same["top1"])
    assert "agreement" not in evaluate(model, _batches())


def test_compile_only_when_the_job_pays_for_it():
    assert not precision.worth_compiling(0.01, 10)
    assert precision.worth_compiling(1.0, 10_000)
    assert not precision.worth_compiling(1.0, 0)
    assert not precision.worth_compiling(1.0, 1_000, speedup=1.03) and precision.worth_compiling(1.0, 1_000)


def test_fp32_with_onednn_eager_gemms_compiles_only_very_long_jobs(model, monkeypatch, small_gemms_to_onednn):
    """Eager fp32 through oneDNN runs about as fast as compiled there: a job that would compile elsewhere stays eager."""
    for onednn, compiles in ((False, True), (True, False)):
        monkeypatch.setattr(precision, "onednn_fp32_gemms", lambda o=onednn: o)
        runner = precision.prepare(
            model, "fp32", kernels=False, batches=2_000
        )  # compile=None: decided on the first batch
        with monkeypatch.context() as timed:
            timed.setattr(precision.Runner, "_compiled", lambda self: self.forward)  # what would compile, not compiled
            timed.setattr(precision.time, "perf_counter", iter([0.0, 1.0] * 4).__next__)  # the first batch: 1 s
            runner(torch.randn(4, 3, 16, 16))
        assert runner.compiled is compiles


@pytest.mark.parametrize("compiled_seconds, stays_compiled", [(3.0, False), (0.5, True)])
def test_a_runner_that_compiled_by_itself_goes_back_to_eager_when_compiled_is_slower(
    model, monkeypatch, compiled_seconds, stays_compiled
):
    """Auto mode times one eager batch (1 s here); the first compiled batch after compilation must beat it."""
    clock = [0.0]
    runner = precision.prepare(model, "fp32", kernels=False, batches=10_000)  # compile=None: decided on the first batch
    monkeypatch.setattr(precision, "onednn_fp32_gemms", lambda: False)
    monkeypatch.setattr(precision.time, "perf_counter", lambda: clock[0])

    def eager(self, x, forward=precision._Forward.forward):
        clock[0] += 1.0
        return forward(self, x)

    def compiled(x):
        clock[0] += compiled_seconds
        return runner.forward.model(x)

    monkeypatch.setattr(precision._Forward, "forward", eager)
    monkeypatch.setattr(precision.Runner, "_compiled", lambda self: compiled)
    x = torch.randn(4, 3, 16, 16)
    expected = model(x).detach()
    for _ in range(5):  # eager (decides), compiled (compiles), compiled twice (checked), then whichever won
        assert torch.allclose(runner(x), expected, atol=1e-5)
    assert runner.compiled is stays_compiled
    if stays_compiled:
        assert "compiled ran slower" not in runner.description
    else:
        assert runner.description == "fp32, eager (compiled ran slower here: 3000 against 1000 ms a batch)"
    assert runner._fn is (compiled if stays_compiled else runner.forward)


def _sdpa_nodes(runner) -> int:
    return sum(n.target is torch.ops.aten.scaled_dot_product_attention.default for n in runner.forward.graph.nodes)


def test_an_isa_cap_takes_away_what_vitkit_plans_by_and_int8_without_vnni_is_refused(monkeypatch):
    """ONEDNN_MAX_CPU_ISA limits oneDNN's kernels; vitkit plans bf16 and int8 by the same limit, so a capped run is
    planned as on a CPU of that kind. Without VNNI oneDNN sums u8 x s8 pairs in saturating 16-bit lanes: refused."""
    pytest.importorskip("torchao")
    zen4 = "avx2 avx512f avx512bw avx512_vnni avx512_bf16"
    monkeypatch.setattr(precision, "cpuinfo", lambda field: zen4 if field == "flags" else "")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    assert precision.native_bf16() == "AVX512_BF16" and precision.int8_vnni() == "AVX512_VNNI"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_VNNI")
    assert precision.native_bf16() is None and precision.int8_vnni() == "AVX512_VNNI"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert precision.cpu_flags() == {"avx2"} and precision.int8_vnni() is None
    for name in ("int8", "int8-dynamic"):
        with pytest.raises(ConfigError, match=f"--precision {name}: this CPU has no VNNI .* use --precision fp32"):
            precision.check(name, "cpu")


def test_int8_runs_its_float_parts_in_bf16_only_where_the_cpu_has_amx(monkeypatch, model):
    pytest.importorskip("torchao")
    calibration = [torch.randn(8, 3, 16, 16) for _ in range(4)]
    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx512_vnni"})  # no bf16 at all: int8 + fp32
    assert precision.check("int8", "cpu") == "int8 (PT2E static, x86 inductor quantizer, AVX512_VNNI)"
    plain = precision.prepare(model, "int8", compile=False, calibration=calibration)
    plain(torch.randn(8, 3, 16, 16))
    assert not plain._autocast and _sdpa_nodes(plain) == model.config.depth
    monkeypatch.setattr(
        precision, "cpu_flags", lambda: {"avx512_vnni", "avx512_bf16"}
    )  # AMD Zen 4: attention alone in bf16
    assert (
        precision.check("int8", "cpu") == "int8 (PT2E static, x86 inductor quantizer, AVX512_VNNI, attention in bf16)"
    )
    amd = precision.prepare(model, "int8", compile=False, calibration=calibration)
    x = torch.randn(8, 3, 16, 16)
    out, ref = amd(x), model(x).detach()
    assert not amd._autocast and _sdpa_nodes(amd) == 0
    assert (out - ref).abs().max() < 0.1 * ref.abs().max()
    monkeypatch.setattr(precision, "cpu_flags", lambda: {"amx_int8", "amx_bf16", "avx512_bf16"})
    assert precision.check("int8", "cpu").endswith("AMX, bf16 between the int8 GEMMs)")
    runner = precision.prepare(model, "int8", compile=False, calibration=calibration)
    out = runner(x)
    assert runner._autocast and out.dtype == torch.float32 and _sdpa_nodes(runner) == model.config.depth
    assert (out - ref).abs().max() < 0.1 * ref.abs().max()


def test_bf16_attention_computes_sdpa():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 16, generator=g) for n in (1, 9, 9))  # one query: the class-token-only last layer
    mask = torch.randn(3, 1, 9, generator=g)
    for kwargs in ({}, {"attn_mask": mask}, {"scale": 0.3}):
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)
        got = precision._attention_bf16(q, k, v, **kwargs)
        assert got.dtype == torch.float32 and got.shape == want.shape
        torch.testing.assert_close(got, want, atol=0.05, rtol=0.05)  # bf16: 8 bits of mantissa
        assert not torch.equal(got, want)


@pytest.mark.parametrize("isa", ["AVX512_BF16", "AMX"])
def test_bf16_attention_is_written_out_where_the_cpu_has_bf16_but_no_amx(model, monkeypatch, isa):
    monkeypatch.setattr(precision, "native_bf16", lambda: isa)
    calls = []
    written_out = precision._Bf16Attention.attention
    monkeypatch.setattr(
        precision._Bf16Attention, "attention", staticmethod(lambda *a: calls.append(1) or written_out(*a))
    )
    runner = precision.prepare(model, "bf16", compile=False)
    x = torch.randn(4, 3, 16, 16)
    with torch.inference_mode():
        want = model(x)
        got = runner(x)
    explicit = isa == "AVX512_BF16"
    assert len(calls) == (model.config.depth - 1 if explicit else 0)  # the class-token-only last layer keeps SDPA
    c = (
        model.config
    )  # vitkit's bf16 attention kernel where it builds and covers the heads, else the written-out matmuls
    kernel = cpu_inference.load_bf16() and c.width // c.num_heads in cpu_inference.BF16_HEAD_SIZES
    assert (
        ("attention in vitkit's bf16 kernel" if kernel else "attention as bf16 matmuls") in runner.description
    ) is explicit
    assert all(_plain(block) for block in model.blocks)  # the caller's model
    assert all(type(block.mlp) is Mlp for block in runner.forward.model.blocks)  # the MLP keeps torch's ops
    assert got.dtype == torch.float32 and (got - want).abs().max() < 0.05 * want.abs().max()


@pytest.mark.parametrize(
    "heads, kernel", [(2, True), (4, False)]
)  # head size 32: the kernel; 16: the written-out matmuls
def test_bf16_runner_says_whether_its_attention_ran_in_the_kernel(monkeypatch, bf16_kernel, heads, kernel):
    monkeypatch.setattr(precision, "native_bf16", lambda: "AVX512_BF16")
    model = vitkit.create_model("vit_test", num_classes=10, width=64, num_heads=heads).eval()
    runner = precision.prepare(model, "bf16", compile=False)
    with torch.inference_mode(), torch.profiler.profile() as prof:
        runner(torch.randn(2, 3, 16, 16))
    ran = {e.name for e in prof.events()}
    assert ("vitkit_bf16::attention" in ran) is kernel, sorted(ran)
    assert ("attention in vitkit's bf16 kernel" in runner.description) is kernel, runner.description
    assert ("attention as bf16 matmuls" in runner.description) is not kernel


@pytest.mark.parametrize(
    "bf16_attention, heads, compile", [(True, 2, False), (True, 2, True), (True, 4, False), (False, 2, False)]
)
def test_int8_dynamic_runs_attention_and_gelu_through_vitkits_kernels(monkeypatch, bf16_attention, heads, compile):
    """Left to inductor, int8-dynamic's GELU computed erf twice an element and attention ran torch's fp32 flash kernel."""
    pytest.importorskip("torchao")
    if not cpu_inference.load():
        pytest.skip("vitkit's CPU kernels do not build here")
    monkeypatch.setattr(precision, "explicit_bf16_attention", lambda: bf16_attention)
    torch.manual_seed(0)
    model = vitkit.create_model("vit_test", num_classes=10, width=64, num_heads=heads).eval()
    torch.nn.init.normal_(model.head.weight)
    kernels = precision._cpu_kernels(model, "int8-dynamic", torch.device("cpu"))
    assert kernels is (precision._Int8DynamicKernels if bf16_attention and cpu_inference.load_bf16() else cpu_inference)
    bf16 = bf16_attention and cpu_inference.load_bf16() and heads == 2
    before = {k: v.clone() for k, v in model.state_dict().items()}
    runner = precision.prepare(model, "int8-dynamic", compile=compile)  # head size 32: the bf16 kernel's; 16: not
    plain = precision.prepare(model, "int8-dynamic", compile=False, kernels=False)
    x = torch.randn(32, 3, 16, 16)
    with torch.inference_mode(), torch.profiler.profile() as prof:
        got = runner(x)
    ran = {e.name for e in prof.events()}
    assert runner.compiled is compile and "calibration" not in runner.description
    assert (
        "vitkit::bias_gelu_" in ran
        and ("vitkit_bf16::attention" in ran) is bf16
        and ("vitkit::attention" in ran) is not bf16
    )
    assert ("attention in vitkit's bf16 kernel" in runner.description) is bf16 and "kernel" not in plain.description
    want, fp32 = plain(x), model(x).detach()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # a quantized copy ran
    assert not torch.equal(got, want)
    # the same model within int8's noise: a random tiny model's logits lie close, so a few top classes may swap
    assert (got - want).abs().max() < 0.05 * fp32.abs().max() and (
        got.argmax(1) == want.argmax(1)
    ).float().mean() >= 0.8
    assert all(_plain(block) for block in model.blocks)  # the caller's model


def test_int8_dynamic_attention_computes_fp32_attention_within_bf16_rounding():
    g = torch.Generator().manual_seed(0)
    for head_size in (32, 16):  # the bf16 kernel's head size, and one it leaves to the fp32 kernel
        qkv, bias = torch.randn(2, 9, 3 * 2 * head_size, generator=g), torch.randn(3 * 2 * head_size, generator=g)
        q, k, v = (qkv + bias).view(2, 9, 3, 2, head_size).permute(2, 0, 3, 1, 4).unbind(0)
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(2, 9, 2 * head_size)
        got = precision._Int8DynamicKernels.attention(qkv, bias, 2)
        assert got.dtype == torch.float32 and got.shape == want.shape
        torch.testing.assert_close(got, want, atol=0.05, rtol=0.05)


def test_int8_says_attention_in_bf16_only_where_the_model_has_attention(monkeypatch):
    """A BiT ResNet's int8 description claimed "attention in bf16" (it has no attention)."""
    pytest.importorskip("torchao")
    monkeypatch.setattr(precision, "explicit_bf16_attention", lambda: True)
    monkeypatch.setattr(precision, "int8_mixed_bf16", lambda: False)
    for name, attention in (("bit_test", False), ("vit_test", True)):
        model = vitkit.create_model(name, num_classes=3).eval()
        x = torch.randn(2, model.config.in_chans, *model.config.image_size)
        runner = precision.prepare(model, "int8", compile=False, calibration=[x])
        runner(x)
        assert ("attention in bf16" in runner.description) is attention, runner.description


def test_int8_of_a_hybrid_prints_no_quantizer_notice_about_its_stem():
    """torchao's quantizer warned on stderr that a hybrid's max-pool input (after the float stem convolution) is not
    quantized: a notice about its own choice that nobody can act on."""
    pytest.importorskip("torchao")
    import warnings

    model = vitkit.create_model("r_vit_ti16", num_classes=3, image_size=32).eval()
    x = torch.randn(2, 3, 32, 32)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        runner = precision.prepare(model, "int8", compile=False, calibration=[x])
        assert runner(x).shape == (2, 3)
    assert not [w for w in seen if "maxpool2d" in str(w.message)]


def test_written_out_attention_computes_sdpa_in_the_inputs_dtype():
    g = torch.Generator().manual_seed(0)
    qkv, bias = torch.randn(2, 5, 48, generator=g).bfloat16(), torch.randn(48, generator=g).bfloat16()
    q, k, v = (qkv + bias).view(2, 5, 3, 4, 4).permute(2, 0, 3, 1, 4).unbind(0)
    got = precision._Bf16Attention.attention(qkv, bias, 4)
    want = (
        torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
        .transpose(1, 2)
        .reshape(2, 5, 16)
    )
    assert got.dtype == torch.bfloat16 and got.shape == (2, 5, 16)
    torch.testing.assert_close(got.float(), want, atol=0.05, rtol=0.05)


@pytest.mark.int8
def test_every_linear_of_a_class_token_model_is_quantized(model):
    """The last layer projects its one query and the keys and values with slices of the fused Q/K/V weight; the
    quantizer only takes linears on parameters, so the slices are made parameters first (else they ran in fp32)."""
    pytest.importorskip("torchao")
    assert model.config.classifier == "token"
    runner = precision.prepare(model, "int8", compile=False, calibration=[torch.randn(8, 3, 16, 16)])
    runner(torch.randn(8, 3, 16, 16))
    linears = [n for n in runner.forward.graph.nodes if n.target is torch.ops.aten.linear.default]
    assert len(linears) == 4 * model.config.depth + 1 + 1  # qkv (the last layer: q and kv), proj, fc1, fc2; the head
    assert all("dequantize" in str(n.args[1].target) for n in linears), [str(n.args[1].target) for n in linears]


def test_compiled_int8_computes_what_the_quantized_graph_says(model):
    """Inductor's int8 GEMM with the residual sum fused in writes into the residual's buffer and got a strided one
    (the class token's last layer adds x[:, :1]) wrong: 12.6 off on logits of 16 here, 95% agreement on a ViT-S/16."""
    pytest.importorskip("torchao")
    assert model.config.classifier == "token"  # the path with the sliced residual
    calibration = [torch.randn(8, 3, 16, 16) for _ in range(4)]
    x = torch.randn(8, 3, 16, 16)
    eager = precision.prepare(model, "int8", compile=False, calibration=calibration)(x)
    compiled = precision.prepare(model, "int8", compile=True, calibration=calibration)(x)
    assert (compiled - eager).abs().max() < 0.1 * eager.abs().max()


@pytest.mark.parametrize(
    "isa, name, packed", [("AMX", "bf16", False), ("AVX512_BF16", "bf16", True), ("AMX", "fp32", True)]
)
def test_compiled_bf16_on_an_amx_cpu_keeps_torchs_gemms_unpacked(model, monkeypatch, isa, name, packed):
    """On a 16-core AMX Xeon, ViT-S/16's oneDNN-packed bf16 linears ran 3-5x slower in the whole model (RESULTS.md).
    The settings must be the runner's whenever its graph runs (inductor reads them as it compiles), also after
    another runner in the process set its own."""
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(precision, "native_bf16", lambda: isa)
    seen = []
    monkeypatch.setattr(
        torch,
        "compile",
        lambda fn, **kw: (
            lambda x: (
                seen.append((inductor_config.freezing, inductor_config.cpp_wrapper, inductor_config.cpp.weight_prepack))
                or fn(x)
            )
        ),
    )
    runner = precision.prepare(model, name, compile=True, kernels=False)
    other = precision.prepare(model, "bf16" if name == "fp32" else "fp32", compile=True, kernels=False)
    x = torch.randn(2, 3, 16, 16)
    other(x), runner(x), other(x), runner(x)
    assert seen[1::2] == [(True, True, packed)] * 2
    assert ("GEMMs unpacked" in runner.description) is not packed
    assert (
        inductor_config.cpp.weight_prepack and not inductor_config.freezing
    )  # the process's own settings, as they were


def test_smoothing_moves_an_outlier_channel_into_the_weights_and_keeps_the_function(model):
    """SmoothQuant before static int8: each block's LayerNorm-fed layers get inputs whose channels range alike, the
    copy computes what the model does in fp32, and the caller's model is untouched."""
    with torch.no_grad():
        model.blocks[0].norm1.weight[3] = 40.0  # one channel of the first Q/K/V input ranges 40x wider
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batches = [torch.randn(8, 3, 16, 16) for _ in range(2)]
    copy, layers = precision.smoothed(model, batches)
    assert layers == 2 * len(model.blocks)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    x = torch.randn(4, 3, 16, 16)
    torch.testing.assert_close(copy(x, pre_logits=True), model(x, pre_logits=True), rtol=1e-4, atol=1e-4)

    def spread(m) -> float:  # widest channel range over the median one, at the first Q/K/V input
        with torch.no_grad():
            peaks = m.blocks[0].norm1(m.patch_embed(x).flatten(2).transpose(1, 2)).abs().amax((0, 1))
        return float(peaks.max() / peaks.median())

    assert spread(copy) < spread(model) / 3
    bit = vitkit.create_model("bit_test", num_classes=3).eval()
    assert precision.smoothed(bit, [torch.randn(2, 3, *bit.config.image_size)]) == (bit, 0)


def test_int8_says_it_smoothed_and_stays_closer_to_fp32_than_without(model, monkeypatch):
    pytest.importorskip("torchao")
    with torch.no_grad():
        for block in model.blocks:  # outlier channels, as trained ViTs have them
            block.norm1.weight[:2] = 30.0
            block.norm2.weight[:2] = 30.0
    calibration = [torch.randn(8, 3, 16, 16) for _ in range(4)]
    x = torch.randn(32, 3, 16, 16)
    ref = model(x).detach()
    runner = precision.prepare(model, "int8", compile=False, calibration=calibration)
    smoothed_error = (runner(x) - ref).abs().mean()
    assert f"{2 * len(model.blocks)} layers smoothed (SmoothQuant, alpha 0.5)" in runner.description
    monkeypatch.setattr(precision, "smoothed", lambda m, batches: (m, 0))
    plain_error = (precision.prepare(model, "int8", compile=False, calibration=calibration)(x) - ref).abs().mean()
    assert smoothed_error < plain_error
