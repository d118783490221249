"""Inference at a chosen precision: fp32, bf16 or int8, compiled where compiling pays.

    runner = prepare(model, "int8", calibration=images)   # normalised (B, C, H, W) float -> float32 outputs
    logits = runner(x)
    print(runner.description)                              # e.g. "int8 (PT2E static, x86 inductor quantizer, 256 calibration images), compiled"

fp32   the model as it is; torch.compile with frozen weights (packed GEMMs, fused bias + GELU) when the
       job is long enough to earn the compilation back (`compile=None`: decided after timing the first
       batch eagerly, see `worth_compiling`); the GEMMs are MKL's on Intel CPUs, oneDNN's on others
       (`onednn_fp32_gemms`; eager too, with weights packed once, `OneDNNLinears`). On the CPU, a ViT's
       attention and bias + GELU run through vitkit's C++ kernels (vitkit.kernels.cpu_inference) where they
       build, as `vitkit benchmark` measures them (`kernels=False`: torch's ops), set on the model only while
       the runner runs.
bf16   on the CPU, a bf16 copy of the model (weights and activations in bf16; LayerNorm, softmax and GEMM
       sums accumulated in fp32): no casts between ops and half the memory traffic, so faster than
       autocast. Only where the CPU has native bf16 instructions (AVX512_BF16 or
       AMX, read from /proc/cpuinfo); elsewhere bf16 would be emulated and slower than fp32, so it is refused
       with a message. With AVX512_BF16 but no AMX, torch's flash kernel is slow, and attention
       instead runs through vitkit's bf16 attention kernel (vitkit.kernels.cpu_inference.attention_bf16: fp32 scores and
       softmax, head sizes 32-128). For other head sizes it runs as explicit bf16 matmuls and softmax, whose
       scores are rounded to bf16 (`explicit_bf16_attention`). Compiled on a CPU with AMX, its GEMMs stay
       torch's, not packed for oneDNN (`_inference_settings`). On a GPU, bf16 autocast of the model itself.
int8   PyTorch's PT2E flow with the x86 inductor quantizer (from torchao): static int8 activations and
       per-channel int8 weights, observers calibrated on the caller's images, then compiled (the
       quantized graph only runs fast once inductor fuses it into int8 GEMMs). CPU only. Attention, the largest
       float part, runs in bf16 where the CPU has it: on a CPU with AMX everything between the int8 GEMMs
       (attention, LayerNorm, GELU) runs under bf16 autocast ("int8-mixed-bf16"); on AVX512_BF16 without AMX,
       where that autocast's casts cost more than it saves and torch's flash attention is no faster in bf16 than in
       fp32, attention alone runs as explicit bf16 matmuls and softmax. Every linear is quantized, also
       the class-token-only last layer's Q and K/V projections (slices of the fused weight). Before that, the
       layers a LayerNorm feeds (each block's Q/K/V and first MLP layer) are smoothed on the calibration images
       (`smoothed`, SmoothQuant): the same function in fp32, with activations that one int8 scale fits better.

int8-dynamic  torchao's dynamic int8: per-channel int8 weights, activations quantized per token as each batch comes
       (no calibration), then compiled. CPU only. Closer to fp32 than static int8, whose activation scales are
       fixed at calibration. Attention and fc1's bias + GELU run through vitkit's kernels, like fp32's; on AVX512_BF16
       without AMX, attention in the bf16 kernel (`_Int8DynamicKernels`), where inductor's own graph is slower.

Every runner pads a short last batch up to the batch size it was built for, so one compiled graph
serves a whole dataset.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import time
import warnings
from collections.abc import Callable, Iterable

import torch
from torch import nn

from vitkit.devices import compile_cache_by_isa
from vitkit.errors import ConfigError
from vitkit.kernels import block_kernels, cpu_inference, import_torchao, patch_gemm, swap
from vitkit.models.vit import Block

PRECISIONS = ("fp32", "bf16", "int8", "int8-dynamic")
CALIBRATION_IMAGES = 256  # images the int8 observers see by default: a few hundred of the user's own
# Compilation (inductor, frozen weights) costs about COMPILE_SECONDS once, the cost on a small, loaded machine (an
# idle one compiles several times faster); a job compiles when the first batch's time shows that its remaining
# batches, each COMPILED_SPEEDUP times faster, save more than that. The loaded machine's cost is kept: a wrong "no"
# loses at most the speedup, a wrong "yes" minutes of compiling. benchmarks/compile_payoff.py measures both.
COMPILE_SECONDS = 150.0
COMPILED_SPEEDUP = 1.2  # compiled over eager: fusing bias + GELU and packing the GEMMs, more so in bf16 than fp32
# fp32 whose eager GEMMs are oneDNN's too (`OneDNNLinears`): eager already runs packed GEMMs, so compiled adds little
# and compiling such a job does not pay back
ONEDNN_FP32_COMPILED_SPEEDUP = 1.03


def cpuinfo(field: str) -> str:
    """The value of the first `field` line of /proc/cpuinfo ("" where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            line = next((line for line in f if line.split(":", 1)[0].strip() == field), "")
    except OSError:
        return ""
    return line.split(":", 1)[-1].strip()


# The instruction sets oneDNN may use under each ONEDNN_MAX_CPU_ISA cap, as /proc/cpuinfo names the ones vitkit plans by.
_ISA_CAPS = {
    "avx2": set(),
    "avx2_vnni": {"avx_vnni"},
    "avx2_vnni_2": {"avx_vnni"},
    "avx512_core": set(),
    "avx512_core_vnni": {"avx512_vnni"},
    "avx512_core_bf16": {"avx512_vnni", "avx512_bf16"},
    "avx512_core_fp16": {"avx512_vnni", "avx512_bf16"},
    "avx10_1_512": {"avx512_vnni", "avx512_bf16"},
}
_CAPPED = {"avx_vnni", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "amx_tile"}


def cpu_flags() -> set[str]:
    """The CPU's flags as oneDNN may use them: an ONEDNN_MAX_CPU_ISA cap (e.g. AVX2) takes away the instruction sets
    above it, so that vitkit plans bf16 and int8 as it would on a CPU of that kind."""
    flags = set(cpuinfo("flags").split())
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().lower()
    if cap in _ISA_CAPS or cap in ("sse41", "avx"):
        flags -= _CAPPED - _ISA_CAPS.get(cap, set())
        if not cap.startswith("avx512") and not cap.startswith("avx10"):
            flags = {f for f in flags if not f.startswith("avx512")}
    return flags


def int8_vnni() -> str | None:
    """The CPU's int8 dot-product instructions ("AMX", "AVX512_VNNI", "AVX_VNNI"); None where oneDNN would sum u8 x s8
    pairs in saturating 16-bit lanes, which corrupts int8 GEMMs over the full 8-bit range."""
    flags = cpu_flags()
    return next(
        (
            name
            for flag, name in (("amx_int8", "AMX"), ("avx512_vnni", "AVX512_VNNI"), ("avx_vnni", "AVX_VNNI"))
            if flag in flags
        ),
        None,
    )


def onednn_fp32_gemms() -> bool:
    """Whether fp32 runs its linear layers through oneDNN instead of MKL: on x86 CPUs not made by Intel.

    MKL chooses its code path by CPU vendor: on other vendors' CPUs it leaves their vector units partly idle, where
    oneDNN's GEMMs use them fully. On Intel CPUs MKL's path stays."""
    return cpuinfo("vendor_id") not in ("", "GenuineIntel") and torch.backends.mkldnn.is_available()


def native_bf16() -> str | None:
    """The CPU's native bf16 instructions ("AMX" or "AVX512_BF16"), None when bf16 would be emulated."""
    flags = cpu_flags()
    if "amx_bf16" in flags:
        return "AMX"
    if "avx512_bf16" in flags:
        return "AVX512_BF16"
    return None


def check(precision: str, device: torch.device | str = "cpu") -> str:
    """What `precision` runs on `device` (a short phrase for reports); a ConfigError where it cannot run well."""
    device = torch.device(device)
    if precision not in PRECISIONS:
        raise ConfigError(f"--precision: expected one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "fp32":
        return "fp32"
    if precision == "bf16":
        if device.type != "cpu":
            return "bf16 autocast"
        isa = native_bf16()
        if isa is None:
            raise ConfigError(
                "--precision bf16: this CPU has no native bf16 (no avx512_bf16 or amx_bf16 in /proc/cpuinfo), "
                "so bf16 would be emulated and slower than fp32; use --precision fp32 or int8"
            )
        return f"bf16 ({isa}, bf16 weights and activations)"
    if device.type != "cpu":
        raise ConfigError(
            f"--precision {precision}: runs on the CPU only (x86 int8 GEMMs); use --device cpu or --precision bf16"
        )
    try:
        import_torchao()
    except ImportError:
        raise ConfigError(
            f"--precision {precision}: needs torchao; install the int8 extra (pip install 'vitkit[int8]')"
        ) from None
    vnni = int8_vnni()
    if vnni is None:
        raise ConfigError(
            f"--precision {precision}: this CPU has no VNNI (no amx_int8, avx512_vnni or avx_vnni in "
            "/proc/cpuinfo, or ONEDNN_MAX_CPU_ISA caps them), so int8 GEMMs would saturate; use --precision fp32"
        )
    if precision == "int8-dynamic":
        return f"int8 dynamic (torchao: activations quantized per token as they come, per-channel int8 weights, {vnni})"
    mixed = (
        ", bf16 between the int8 GEMMs"
        if int8_mixed_bf16()
        else ", attention in bf16"
        if explicit_bf16_attention()
        else ""
    )
    return f"int8 (PT2E static, x86 inductor quantizer, {vnni}{mixed})"


def int8_mixed_bf16() -> bool:
    """Whether int8 runs its float parts in bf16: only where the CPU has AMX (see the module docstring)."""
    return "amx_bf16" in cpu_flags()


def explicit_bf16_attention() -> bool:
    """Whether attention leaves torch's flash kernel for bf16 matmuls where the CPU has AVX512_BF16 but no AMX. On
    such a CPU the flash kernel ran no faster in bf16 than in fp32; with AMX, its bf16 GEMMs are AMX's.
    - In int8's graph (otherwise fp32 between its GEMMs), attention runs as explicit bf16 matmuls and softmax
      (`_attention_bf16`).
    - In the bf16 model, it runs through vitkit's bf16 attention kernel (`_Bf16Attention`), which keeps the
      scores in fp32.
    The kernel is both faster than the written-out matmuls and closer to fp32, since it does not round the scores
    to bf16."""
    return native_bf16() == "AVX512_BF16"


def worth_compiling(first_batch_seconds: float, batches_left: int, speedup: float = COMPILED_SPEEDUP) -> bool:
    """Whether compiling saves more time over the remaining batches, each `speedup` times faster, than it costs."""
    return batches_left * first_batch_seconds * (1 - 1 / speedup) > COMPILE_SECONDS


def quiet_torch_internals() -> None:
    """Silence two notices torch's own quantization and compilation code print about itself (nothing a user can act on)."""
    warnings.filterwarnings(
        "ignore", message="To copy construct from a tensor", category=UserWarning, module=r"torch\._inductor"
    )
    warnings.filterwarnings(
        "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
    )
    # the quantizer leaves a max-pool whose input is fp32 (a hybrid's ResNet stem, after its float convolution) in fp32, as it should
    warnings.filterwarnings("ignore", message="The input of maxpool2d is not quantized", category=UserWarning)


def _inference_settings(precision: str) -> dict[str, bool]:
    """Inductor's settings for a CPU inference graph: weights frozen into constants (GEMMs packed for oneDNN, with bias
    and GELU fused into them) and the graph's kernel calls made from C++, not Python.

    Except bf16 on a CPU with AMX, whose linears stay torch's GEMMs, unpacked: there each packed GEMM alone is
    faster than torch's, but the model as a whole runs several times slower, from OpenMP's waiting threads between
    them. Unpacked is not a sure cure: the runner's fallback to eager still decides. int8's GEMMs need the packing."""
    packed = not (precision == "bf16" and native_bf16() == "AMX")
    return {"freezing": True, "cpp_wrapper": True, "cpp.weight_prepack": packed}


class _Forward(nn.Module):
    """model(x) or model(x, pre_logits=True) as a plain one-argument module (what export and compile take)."""

    def __init__(self, model: nn.Module, pre_logits: bool):
        super().__init__()
        self.model, self.pre_logits = model, pre_logits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x, pre_logits=True) if self.pre_logits else self.model(x)


FIRST_BATCH_CALIBRATION = ", calibrated on its first batch (no calibration images given)"


class Runner:
    """A model prepared for inference at one precision: call it on normalised images, get float32 outputs."""

    def __init__(
        self,
        model: nn.Module,
        precision: str,
        *,
        device: torch.device,
        pre_logits: bool = False,
        compile: bool | None = None,
        calibration: Iterable[torch.Tensor] | None = None,
        batches: int | None = None,
        kernels: bool = True,
    ):
        self.precision, self.device = precision, torch.device(device)
        self.description = check(precision, self.device)
        self._kernels = _cpu_kernels(model, precision, self.device) if kernels else None
        self.uses_kernels = self._kernels is not None
        self.bf16_attention = False  # the bf16 copy's attention outside torch's flash kernel (`_set_bf16_attention`)
        self.description += self._kernels_description(model)
        self._cast = precision == "bf16" and self.device.type == "cpu"  # a bf16 copy; the caller's model stays fp32
        self._autocast = (precision == "bf16" and not self._cast) or (precision == "int8" and int8_mixed_bf16())
        model.eval()
        self.forward = _Forward(copy.deepcopy(model).to(torch.bfloat16) if self._cast else model, pre_logits)
        if self._cast:
            patch_gemm.install(self.forward.model)
        if self._cast and explicit_bf16_attention() and block_kernels.takes_kernels(model):
            self._set_bf16_attention(model)
        # vitkit's kernels swapped in for each call, the same swap-ins every time (a compiled graph keeps its modules)
        self._kernel_swap_ins = None if self._kernels is None else block_kernels.replacement(self._kernels)
        self.batch_size: int | None = None
        self._batches_left = batches
        # int8 only pays compiled
        self._compile = compile if compile is not None or not precision.startswith("int8") else True
        self._fn: Callable[[torch.Tensor], torch.Tensor] | None = None
        self._set_eager_linears(model)
        self._calibration = calibration
        # said before the first batch runs, so that no report leaves it out
        if precision == "int8" and calibration is None:
            self.description += FIRST_BATCH_CALIBRATION
        self.compiled = False
        self._eager_seconds: float | None = None  # auto mode's eager batch, until compiled has been timed against it
        self._eager_description = self.description
        self._compiled_seconds: list[float] = []

    def _kernels_description(self, model: nn.Module) -> str:
        """What the description says of vitkit's CPU kernels, "" without them."""
        if self._kernels is _Int8DynamicKernels:
            return (
                ", attention in vitkit's bf16 kernel (fp32 scores)"
                if _bf16_kernel_covers(model)
                else ", attention in vitkit's fp32 kernel"
            ) + ", bias + GELU in its fp32 kernel"
        return ", vitkit's attention and bias + GELU kernels" if self.uses_kernels else ""

    def _set_bf16_attention(self, model: nn.Module) -> None:
        """Attention of the runner's bf16 copy (never the caller's model) outside torch's flash kernel."""
        block_kernels.install(self.forward.model, _Bf16Attention)
        self.bf16_attention = True
        kernel = _bf16_kernel_covers(model)  # the kernel where it builds and covers the heads, else bf16 matmuls
        self.description += (
            ", attention in vitkit's bf16 kernel (fp32 scores)" if kernel else ", attention as bf16 matmuls and softmax"
        )

    def _set_eager_linears(self, model: nn.Module) -> None:
        """fp32 GEMMs through oneDNN where MKL is slow (`onednn_fp32_gemms`): compiled, inductor packs them; eager,
        this mode does, for models large enough to gain from it (`OneDNNLinears.MIN_WEIGHTS`). Eager bf16 packs them
        too where the CPU has AVX512_BF16 but no AMX (with AMX, packed bf16 GEMMs stall: `_inference_settings`)."""
        self._onednn = self.precision == "fp32" and self.device.type == "cpu" and onednn_fp32_gemms()
        packs = self._onednn or (self._cast and native_bf16() == "AVX512_BF16")
        self._eager_linears = (
            OneDNNLinears(torch.bfloat16 if self._cast else torch.float32)
            if packs and OneDNNLinears.worth_it(model)
            else None
        )
        if self._eager_linears is not None:
            self.description += ", oneDNN GEMMs" if self._onednn else ", eager GEMMs packed for oneDNN"

    def _build(self, x: torch.Tensor) -> None:
        """The callable for batches shaped like x (the first batch)."""
        quiet_torch_internals()
        if self.precision == "int8":
            n = self._quantize(x)
            self.description = self.description.replace(FIRST_BATCH_CALIBRATION, "") + (
                f", {n} calibration images{_calibration_source(self._calibration)}"
                if self._calibration is not None
                else f", calibrated on its first batch ({n} images)"
            )
        elif self.precision == "int8-dynamic":
            self._quantize_dynamic()
        self._fn = self._compiled() if self._compile else self.forward
        self.compiled = bool(self._compile)

    def _compiled(self) -> Callable[[torch.Tensor], torch.Tensor]:
        dynamic, settings = None, {}
        if self.device.type == "cpu":
            settings = _inference_settings(self.precision)
            if self._onednn:
                # with frozen weights inductor packs fp32 linear layers for MKL when every shape is static, for oneDNN
                # when the batch size is symbolic
                dynamic = True
                if self._eager_linears is None:  # else the description says so already
                    self.description += ", oneDNN GEMMs"
        self.description += ", compiled" if settings.get("cpp.weight_prepack", True) else ", compiled (GEMMs unpacked)"
        compile_cache_by_isa()
        compiled = torch.compile(self.forward, dynamic=dynamic)

        def run(x: torch.Tensor) -> torch.Tensor:
            # inductor reads its settings when the first batch compiles, and on every recompilation: they are this
            # runner's while its graph runs, whatever other runners in the process set (torch.compile's own options
            # argument does not reach the freezing pass)
            import torch._inductor.config as inductor_config  # loads dynamo: only where a graph compiles

            with inductor_config.patch(settings):
                return compiled(x)

        return run

    def _quantize(self, x: torch.Tensor) -> int:
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

        quantizer = _quantizer_class()()
        quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())
        batches = [x] if self._calibration is None else list(self._calibration)
        model, layers = smoothed(self.forward.model, [b.to(self.device, torch.float32) for b in batches])
        self.forward = _Forward(model, self.forward.pre_logits)  # a smoothed copy: the caller's model stays as it is
        if layers:
            self.description += f", {layers} layers smoothed (SmoothQuant, alpha {SMOOTHING})"
        with torch.no_grad():
            batch = torch.export.Dim("batch", min=1, max=4096)  # one quantized graph for every batch size
            example = x if len(x) > 1 else x.expand(2, *x.shape[1:])  # a batch of one would fix the batch size at 1
            with swap.swapped(self.forward, _dense_class_row):
                graph = torch.export.export(self.forward, (example,), dynamic_shapes={"x": {0: batch}}).module()
            _fold_weight_slices(graph)
            observed = prepare_pt2e(graph, quantizer)
            seen = 0
            for images in batches:
                for chunk in images.split(len(x)):
                    observed(self._pad(chunk.to(self.device, torch.float32)))
                    seen += len(chunk)
            self.forward = convert_pt2e(observed)
            if explicit_bf16_attention() and not _attention_in_bf16(self.forward):  # a model without attention (BiT)
                self.description = self.description.replace(", attention in bf16", "")
        return seen

    def _quantize_dynamic(self) -> None:
        """Every linear layer of a copy of the model with int8 weights (per channel) and int8 activations, quantized per
        token as they come (torchao): no calibration, more exact than static int8 and slower."""
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

        model = copy.deepcopy(self.forward.model)  # the caller's model stays fp32
        quantize_(model, Int8DynamicActivationInt8WeightConfig())
        self.forward = _Forward(model, self.forward.pre_logits)

    def _pad(self, x: torch.Tensor) -> torch.Tensor:
        short = self.batch_size - len(x)
        return torch.cat([x, x[-1:].expand(short, *x.shape[1:])]) if short > 0 else x

    def _run(self, x: torch.Tensor) -> torch.Tensor:
        if self.compiled:  # how dynamo sees batch sizes; eager, which library multiplies
            gemms = _size_oblivious() if self._onednn else contextlib.nullcontext()
        else:
            gemms = self._eager_linears or contextlib.nullcontext()
        x = x.to(torch.bfloat16) if self._cast else x  # a bf16 copy of the model takes bf16 images
        with (
            torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self._autocast),
            self._with_kernels(),
            gemms,
        ):
            return self._fn(x).float()

    def _with_kernels(self):
        """vitkit's fp32 CPU kernels on the model for one call; afterwards the caller's model is as it was."""
        if self._kernel_swap_ins is None:
            return contextlib.nullcontext()
        return swap.swapped(self.forward.model, self._kernel_swap_ins)

    @torch.inference_mode()
    def settle(self, x: torch.Tensor) -> None:
        """Run batches like x until the runner has chosen its path for good: where it decides by itself, eager, or
        compiled and checked against eager (what a long `eval` runs; `vitkit benchmark --compile auto` times this)."""
        self(x)
        while self._eager_seconds is not None:
            self(x)

    @torch.inference_mode()
    def run_batch(self, x: torch.Tensor) -> torch.Tensor:
        """One batch of any size as it is, unpadded (a compiled runner compiles once more for a new size)."""
        if self._fn is None:
            return self(x)
        return self._run(x.to(self.device, torch.float32))

    @torch.inference_mode()
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.device, torch.float32)
        if self._fn is None:
            self.batch_size = len(x)
            if self._compile is None:  # auto: time one batch eagerly, then decide
                self._fn = self.forward
                start = time.perf_counter()
                out = self._run(x)
                eager_seconds = self._seconds_since(start)
                left = (self._batches_left or 1) - 1
                speedup = ONEDNN_FP32_COMPILED_SPEEDUP if self._onednn and self._eager_linears else COMPILED_SPEEDUP
                self._compile = worth_compiling(eager_seconds, left, speedup)
                if self._compile:
                    self._fn, eager_description = None, self.description
                    self._build(x)
                    self._eager_seconds, self._eager_description = eager_seconds, eager_description
                return out
            self._build(x)
        if len(x) > self.batch_size:
            return torch.cat([self(part) for part in x.split(self.batch_size)])
        if self._eager_seconds is not None:
            return self._run_checked(self._pad(x))[: len(x)]
        return self._run(self._pad(x))[: len(x)]

    def _seconds_since(self, start: float) -> float:
        """Time since `start` with the batch finished: a GPU runs it after the call returns."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - start

    def _run_checked(self, x: torch.Tensor) -> torch.Tensor:
        """A batch of a runner that chose to compile by itself: the faster of its two compiled batches after the one
        that compiled must beat the eager batch it was chosen on, else the runner goes back to eager. Compiled can lose:
        on many threads, oneDNN's packed GEMMs between OpenMP's spinning threads (`_inference_settings`)."""
        start = time.perf_counter()
        out = self._run(x)
        self._compiled_seconds.append(self._seconds_since(start))
        if len(self._compiled_seconds) == 3:  # the first of them ran the compiler
            seconds, eager = min(self._compiled_seconds[1:]), self._eager_seconds
            self._eager_seconds = None
            if seconds > eager:
                self._fn, self.compiled = self.forward, False
                self.description = self._eager_description + (
                    f", eager (compiled ran slower here: {1e3 * seconds:.0f} against {1e3 * eager:.0f} ms a batch)"
                )
        return out


class OneDNNLinears(torch.overrides.TorchFunctionMode):
    """Inside it, F.linear on CPU tensors of its dtype (fp32, or bf16) without gradients runs oneDNN's GEMM on a weight
    packed for it once.

    Eager fp32 on CPUs where MKL is slow (`onednn_fp32_gemms`). A packed weight is reused while its source tensor's version counter is
    unchanged, so a weight written in place (an optimizer step, load_state_dict) is packed again; the packs hold their
    sources alive. Inference tensors (made under torch.inference_mode) have no version counter and keep torch's GEMM.

    Each call to oneDNN costs more than MKL's and the mode adds a little to every torch function, which small models
    and small GEMMs do not earn back. So only GEMMs of at least MIN_MACS
    go to oneDNN, and runners use the mode only for models with at least MIN_WEIGHTS linear weights (ViT-Ti: 5.5M)."""

    MIN_MACS = 16_000_000  # rows x inputs x outputs: ViT-S/16's smallest at batch 1 (197 x 384 x 384) is 29M
    MIN_WEIGHTS = 4_000_000

    @classmethod
    def worth_it(cls, model: nn.Module) -> bool:
        return sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear)) >= cls.MIN_WEIGHTS

    def __init__(self, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.dtype = dtype  # the GEMMs it takes: fp32, or bf16 (a bf16 model's)
        # (ptr, shape, strides) -> source, version, pack
        self._packed: dict[tuple, tuple[torch.Tensor, int, torch.Tensor]] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.linear and not torch.is_grad_enabled():
            x, weight, *rest = args
            bias = rest[0] if rest else kwargs.get("bias")
            if (
                all(t is None or (t.dtype == self.dtype and t.device.type == "cpu") for t in (x, weight, bias))
                and weight.dim() == 2
                and x.numel() * weight.shape[0] >= self.MIN_MACS
                and not weight.is_inference()
            ):
                return self.linear(x, weight, bias)
        return func(*args, **kwargs)

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """F.linear(x, weight, bias) by oneDNN's GEMM, `weight` packed on first use (CPU tensors of the mode's dtype)."""
        rows = x.reshape(-1, x.shape[-1])
        out = torch.ops.mkldnn._linear_pointwise(rows, self._pack(weight, len(rows)), bias, "none", [], "")
        return out.view(*x.shape[:-1], out.shape[-1])

    def _pack(self, weight: torch.Tensor, rows: int) -> torch.Tensor:
        key = (weight.data_ptr(), tuple(weight.shape), weight.stride())
        source = weight if weight._base is None else weight._base  # a slice of a fused weight is a new view each call
        hit = self._packed.get(key)
        if hit is None or hit[0] is not source or hit[1] != weight._version:
            hit = self._packed[key] = (
                source,
                weight._version,
                torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), rows),
            )
        return hit[2]


def _size_oblivious() -> contextlib.AbstractContextManager:
    """Dynamo traces a batch of one like any other batch size, not as the constant 1, so that its graph's GEMMs are
    packed for oneDNN too. A switch of torch's own (torch.fx.experimental._config); where a torch lacks it, sizes of
    one stay constants."""
    try:
        from torch.fx.experimental import _config as config
    except ImportError:
        return contextlib.nullcontext()
    return (
        config.patch(backed_size_oblivious=True)
        if hasattr(config, "backed_size_oblivious")
        else contextlib.nullcontext()
    )


def _cpu_kernels(model: nn.Module, precision: str, device: torch.device):
    """vitkit.kernels.cpu_inference where it serves this runner (fp32 or int8-dynamic, CPU, a model that takes them,
    the library builds: once per machine and torch version, some seconds), else None. int8-dynamic
    takes `_Int8DynamicKernels` where attention runs in bf16 (`explicit_bf16_attention`)."""
    if precision not in ("fp32", "int8-dynamic") or device.type != "cpu" or not block_kernels.takes_kernels(model):
        return None
    with warnings.catch_warnings():  # where they cannot build (no compiler), torch's ops run, as they do without them
        warnings.simplefilter("ignore")
        if not cpu_inference.load():
            return None
        if precision == "int8-dynamic" and explicit_bf16_attention() and cpu_inference.load_bf16():
            return _Int8DynamicKernels
        return cpu_inference


def _bf16_kernel_covers(model: nn.Module) -> bool:
    """Whether vitkit's bf16 attention kernel builds and covers this ViT's heads and sequence length."""
    c = model.config
    return cpu_inference.load_bf16() and cpu_inference.bf16_covers(
        c.width // c.num_heads, c.num_patches + c.num_prefix_tokens
    )


class _Int8DynamicKernels:
    """The float parts between int8-dynamic's GEMMs where the CPU has AVX512_BF16 but no AMX (`explicit_bf16_attention`):
    attention through vitkit's bf16 kernel (q, k and v rounded to bf16, scores and softmax in fp32; its fp32 kernel
    where the bf16 one does not cover the heads), fc1's bias + GELU through vitkit's fp32 kernel. Left to inductor,
    the GELU fused with the per-token quantization that follows it computes erf twice an element, and attention runs
    torch's fp32 flash kernel: together slower than these kernels."""

    bias_gelu_ = staticmethod(cpu_inference.bias_gelu_)

    @staticmethod
    def attention(qkv: torch.Tensor, bias: torch.Tensor, num_heads: int) -> torch.Tensor:
        out = cpu_inference.attention_bf16(qkv.to(torch.bfloat16), bias.to(torch.bfloat16), num_heads)
        return cpu_inference.attention(qkv, bias, num_heads) if out is None else out.float()


class _DenseClassRow(Block):
    """A block whose class-token-only pass adds its attention output to a dense copy of the class token's row:
    compiled int8 may fuse that residual sum into the quantized GEMM, writing into the residual's buffer, which must
    then be dense (the row of a (B, T, D) tensor is strided). The same sums as Block."""

    def forward(
        self, x: torch.Tensor, *, class_token_only: bool = False, grid: tuple[int, int] | None = None
    ) -> torch.Tensor:
        if not class_token_only:
            return super().forward(x, grid=grid)
        # (2) and (3) for the class token, (B, 1, D)
        row = x[:, :1].contiguous() + self.drop_path(self.ls1(self.attn(self.norm1(x), queries=1, grid=grid)))
        return row + self.drop_path(self.ls2(self.mlp(self.norm2(row))))


def _dense_class_row(module: nn.Module) -> nn.Module | None:
    """The swap-in (vitkit.kernels.swap) that int8's graph is exported with: every Block as a `_DenseClassRow`."""
    return swap.adopt(_DenseClassRow, module) if type(module) is Block else None


SMOOTHING = 0.5  # SmoothQuant's migration strength: how much of an activation channel's range moves to the weights


@torch.no_grad()
def smoothed(model: nn.Module, batches: list[torch.Tensor], alpha: float = SMOOTHING) -> tuple[nn.Module, int]:
    """A copy of `model` whose layers fed by a LayerNorm (each block's Q/K/V and first MLP layer) take their inputs
    divided per channel by s = max|x|^alpha / max|w|^(1 - alpha): the LayerNorm's scale and shift divided by s, the
    layer's weight columns multiplied by it. The same function in fp32; a channel whose activations range far wider
    than the others no longer sets the one scale static int8 gives the whole tensor (SmoothQuant, Xiao et al. 2023).
    The maxima are of the LayerNorms' outputs over `batches`. Returns the copy and how many layers it smoothed;
    (the model itself, 0) for a model without such blocks (BiT)."""
    pairs = [pair for block in getattr(model, "blocks", []) for pair in _layernorm_fed(block)]
    if not pairs:
        return model, 0
    maxima: dict[nn.Module, torch.Tensor] = {}

    def record(norm: nn.Module, _, out: torch.Tensor) -> None:
        peak = out.detach().abs().reshape(-1, out.shape[-1]).amax(0)
        maxima[norm] = peak if norm not in maxima else torch.maximum(maxima[norm], peak)

    hooks = [norm.register_forward_hook(record) for norm, _ in pairs]
    try:
        for images in batches:
            model(images)
    finally:
        for hook in hooks:
            hook.remove()
    originals: dict[int, object] = {}  # id of each of the model's objects -> its copy
    copied = copy.deepcopy(model, originals)
    for norm, linear in pairs:
        s = maxima[norm].clamp(min=1e-5) ** alpha / linear.weight.abs().amax(0).clamp(min=1e-5) ** (1 - alpha)
        s = s.clamp(min=1e-5)
        originals[id(norm)].weight.div_(s)
        originals[id(norm)].bias.div_(s)
        originals[id(linear)].weight.mul_(s)
    return copied, len(pairs)


def _layernorm_fed(block: nn.Module) -> list[tuple[nn.LayerNorm, nn.Linear]]:
    """A transformer block's (LayerNorm, the linear layer it feeds) pairs: (norm1, Q/K/V) and (norm2, fc1); none for
    other blocks (a ResNet unit)."""
    attn, mlp = getattr(block, "attn", None), getattr(block, "mlp", None)
    found = (
        (getattr(block, "norm1", None), getattr(attn, "qkv", None)),
        (getattr(block, "norm2", None), getattr(mlp, "fc1", None)),
    )
    return [
        (norm, linear)
        for norm, linear in found
        if isinstance(norm, nn.LayerNorm) and norm.elementwise_affine and isinstance(linear, nn.Linear)
    ]


def _quantizer_class():
    """The x86 inductor quantizer, also covering linears it does not find by itself (`_Quantizer.annotate`)."""
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

    class _Quantizer(xiq.X86InductorQuantizer):
        def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
            """As the x86 quantizer, and also every F.linear on a parameter called inside another module: it finds
            linears by their nn.Linear module, and the class-token-only last layer projects its one query and its
            keys and values with F.linear on slices of the fused Q/K/V weight (made parameters by
            `_fold_weight_slices`), which otherwise stayed fp32."""
            super().annotate(model)
            for node in model.graph.nodes:
                if (
                    node.target is torch.ops.aten.linear.default
                    and xiq.QUANT_ANNOTATION_KEY not in node.meta
                    and getattr(node.args[1], "op", None) == "get_attr"
                ):
                    self._annotate_linear_node_helper(node, True, self.global_config)
            return model

    return _Quantizer


def _fold_weight_slices(graph: torch.fx.GraphModule) -> None:
    """Make every slice of a parameter that feeds a linear layer a parameter of its own (the class-token-only last
    layer's Q and K/V projections, see `_quantizer_class`), so that the quantizer can quantize it as a weight."""
    aten = torch.ops.aten
    for node in list(graph.graph.nodes):
        source = node.args[0] if node.op == "call_function" and node.target is aten.slice.Tensor else None
        if getattr(source, "op", None) != "get_attr" or not all(
            user.target is aten.linear.default for user in node.users
        ):
            continue
        name = f"{source.target.replace('.', '_')}_slice_{node.name}"
        weight = functools.reduce(getattr, source.target.split("."), graph)
        sliced = aten.slice.Tensor(weight, *node.args[1:]).detach().clone()
        graph.register_parameter(name, nn.Parameter(sliced, requires_grad=False))
        with graph.graph.inserting_before(node):
            constant = graph.graph.get_attr(name)
            constant.meta = dict(node.meta)  # "val" and the module stack, which the quantizer reads
            node.replace_all_uses_with(constant)
        graph.graph.erase_node(node)
    graph.graph.lint()
    graph.recompile()


def _softmax_attention(q, k, v, attn_mask=None, scale=None):
    """softmax(scale q k^T + attn_mask) v, written out (two matmuls and a softmax, in q's dtype)."""
    scores = (q * (q.shape[-1] ** -0.5 if scale is None else scale)) @ k.transpose(-2, -1)
    if attn_mask is not None:
        scores = scores + attn_mask.to(scores.dtype)
    return scores.softmax(-1) @ v


def _attention_bf16(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
    """scaled_dot_product_attention (inference: no dropout, no causal mask) with its matmuls and softmax in bf16."""
    return _softmax_attention(
        q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16), attn_mask, scale
    ).float()


class _Bf16Attention:
    """Inference kernels (vitkit.kernels.block_kernels.InferenceKernels) for the bf16 model where `explicit_bf16_attention`:
    vitkit's bf16 attention kernel (vitkit.kernels.cpu_inference.attention_bf16: fp32 scores and softmax) where it
    builds and covers the input, else attention written out in the model's dtype; the MLP keeps torch's ops (no
    `bias_gelu_`)."""

    bias_gelu_ = None

    @staticmethod
    def attention(qkv: torch.Tensor, bias: torch.Tensor, num_heads: int) -> torch.Tensor:
        out = cpu_inference.attention_bf16(qkv, bias, num_heads)
        if out is not None:
            return out
        B, T, three_d = qkv.shape
        q, k, v = (qkv + bias).view(B, T, 3, num_heads, three_d // 3 // num_heads).permute(2, 0, 3, 1, 4).unbind(0)
        return _softmax_attention(q, k, v).transpose(1, 2).reshape(B, T, three_d // 3)


def _attention_in_bf16(graph: torch.fx.GraphModule) -> int:
    """Every scaled_dot_product_attention of a quantized graph as `_attention_bf16` (returns how many): on AVX512_BF16
    without AMX, explicit bf16 matmuls run attention faster than torch's fp32 (or bf16) flash kernel."""
    found = [
        node
        for node in graph.graph.nodes
        if node.op == "call_function" and node.target is torch.ops.aten.scaled_dot_product_attention.default
    ]
    for node in found:
        node.target = _attention_bf16
    graph.recompile()
    return len(found)


def _calibration_source(calibration) -> str:
    """' of WHERE' for calibration batches that say where they come from (evaluation.CalibrationImages)."""
    where = getattr(calibration, "where", "")
    return f" of {where}" if where else ""


def prepare(
    model: nn.Module,
    precision: str = "fp32",
    *,
    device: torch.device | str = "cpu",
    pre_logits: bool = False,
    compile: bool | None = None,
    calibration: Iterable[torch.Tensor] | None = None,
    batches: int | None = None,
    kernels: bool = True,
) -> Runner:
    """`model` ready for inference at `precision` (see the module docstring).

    compile: True / False, or None to decide after the first batch from its time and `batches` (how many the job has).
    calibration: normalised image batches for int8's observers (default: the first batch it is called on).
    kernels: fp32 on the CPU runs vitkit's attention and bias + GELU kernels where they build; False keeps torch's.
    """
    return Runner(
        model.to(device),
        precision,
        device=torch.device(device),
        pre_logits=pre_logits,
        compile=compile,
        calibration=calibration,
        batches=batches,
        kernels=kernels,
    )
