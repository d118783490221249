"""Speed of a model: throughput, batch-1 latency, peak memory, FLOPs and MFU, beside reference implementations.

Machines are shared and noisy, so every figure comes from one run in which the candidates (vitkit, the
reference implementations and a large matmul that measures the device's peak) take turns, round after
round. Ratios and MFU are computed per round and reported as medians.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from datetime import datetime, timezone
from typing import Any

import torch
import torch.nn.functional as F

from vitkit.devices import compile_cache_by_isa, fused_optimizer
from vitkit.errors import ConfigError
from vitkit.inference import precision
from vitkit.kernels import float8, short_attention
from vitkit.models import VisionTransformer, ViTConfig
from vitkit.models.distill import one_output
from vitkit.models.summary import count_flops
from vitkit.models.vit import check_room

DTYPES = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "int8": torch.float32,
    "int8-dynamic": torch.float32,
    "fp8": torch.bfloat16,  # training: the blocks' linear layers in torchao's float8, bf16 autocast elsewhere
}
REFERENCES = ("transformers", "timm")
BACKENDS = ("onnxruntime", "openvino")  # deployment runtimes, fed vitkit's own ONNX export
LONG_JOB = 1_000_000  # batches: `--compile auto` times vitkit as a long eval runs it (compiled, checked against eager)


@dataclasses.dataclass
class Setup:
    config: ViTConfig
    batch_size: int = 8
    dtype: str = "fp32"
    device: str = "cpu"
    mode: str = "inference"  # inference | train
    compile: bool | None = False  # None (auto): compiled, and for CPU/GPU inference back to eager where that ran faster
    kernels: str = "auto"  # auto: vitkit's CPU inference kernels where they apply | torch
    grad_checkpointing: bool = False
    rounds: int = 5
    warmup: int = 2
    process_memory: bool = False  # also each candidate's resident memory, built again in a fresh process

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype: expected one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.kernels not in ("auto", "torch"):
            raise ConfigError(f"kernels: expected auto or torch, got {self.kernels!r}")
        if self.mode not in ("inference", "train"):
            raise ConfigError(f"mode: expected inference or train, got {self.mode!r}")
        if self.dtype == "fp8" and self.mode != "train":
            raise ConfigError("--precision fp8: training only (torchao's float8 training linears); use --mode train")
        if self.batch_size <= 0 or self.rounds <= 0:
            raise ConfigError("batch and rounds must be positive")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError("device: CUDA was asked for but no GPU is visible; use --device cpu")
        h, w = self.config.image_size
        what = f"--batch {self.batch_size} at --image-size {h}" + (f"x{w}" if h != w else "")
        check_room(self.config, self.batch_size, what, "choose a smaller --batch or --image-size")


# -- what one step is ------------------------------------------------------------------------
def _autocast(setup: Setup):
    if DTYPES[setup.dtype] == torch.float32:  # fp32, or int8 whose runner keeps its own precision
        return nullcontext()
    return torch.autocast(device_type=torch.device(setup.device).type, dtype=DTYPES[setup.dtype])


def _step(model: torch.nn.Module, setup: Setup, batch_size: int) -> Callable[[], Any]:
    """A closure that runs one inference batch or one training step of `model` on random data."""
    c = setup.config
    x = torch.randn(batch_size, c.in_chans, *c.image_size, device=setup.device)
    if setup.mode == "inference":
        own_precision = not isinstance(model, torch.nn.Module) or isinstance(model, _Prepared)  # runtimes and runners
        if isinstance(model, torch.nn.Module):
            model.eval()

        def infer():
            with torch.inference_mode(), nullcontext() if own_precision else _autocast(setup):
                return model(x)

        return infer
    model.train()
    y = torch.randint(0, max(c.num_classes, 1), (batch_size,), device=setup.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused_optimizer(setup.device))  # as training's

    def train_step():
        with _autocast(setup):
            out = model(x)
            logits = out.logits if hasattr(out, "logits") else one_output(out)
            loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return train_step


# the side of the square matmul that measures a device's practical peak (`_matmul`)
PEAK_SIDE = {"cpu": 2048, "cuda": 8192}


def _matmul(setup: Setup) -> tuple[Callable[[], Any], int]:
    """A large square matmul in the benchmark's dtype: the device's practical peak (int8: `_int8_matmul`)."""
    n = PEAK_SIDE["cpu" if setup.device == "cpu" else "cuda"]
    if setup.dtype.startswith("int8"):
        return _int8_matmul(n), INT8_REPEATS * 2 * n**3
    if setup.dtype == "fp8":  # the CPU emulates fp8 (vitkit.kernels.float8): its multiplies are fp32's
        if torch.device(setup.device).type != "cuda":
            return _matmul(dataclasses.replace(setup, dtype="fp32"))
        return _fp8_matmul(n, setup.device), 2 * n**3
    dtype = DTYPES[setup.dtype]
    a = torch.randn(n, n, device=setup.device).to(dtype)
    b = torch.randn(n, n, device=setup.device).to(dtype)
    if torch.device(setup.device).type == "cpu" and dtype == torch.float32 and precision.onednn_fp32_gemms():
        # the GEMM fp32 runs on this CPU: oneDNN's with a packed weight (torch.mm would be MKL's slower path here)
        weight, gemm = b.t().contiguous(), precision.OneDNNLinears()
        return (lambda: gemm.linear(a, weight)), 2 * n**3
    return (lambda: torch.mm(a, b)), 2 * n**3


INT8_SCALES = (0.02, 128, 0.01)  # the peak GEMM's activation scale and zero point, and its weights' scale
# the int8 peak multiplies its square this many times a call: one multiply is short beside bf16's, and a larger
# square runs slower (it outgrows the caches)
INT8_REPEATS = 4


def _int8_matmul(n: int) -> Callable[[], torch.Tensor]:
    """u8 x s8 -> fp32 through oneDNN's quantized linear on a packed weight, as int8's compiled graph runs its GEMMs,
    INT8_REPEATS times: int8 peaks at about twice bf16 where the CPU has AMX; torch's own int8 matmul reaches only
    bf16's."""
    x = torch.randint(0, 256, (n, n), dtype=torch.uint8)
    weight = torch.randint(-127, 128, (n, n), dtype=torch.int8)
    packed = torch.ops.onednn.qlinear_prepack(weight, [n, n])
    x_scale, x_zero, w_scale = INT8_SCALES
    scales, zeros = torch.full((n,), w_scale), torch.zeros(n, dtype=torch.int64)
    x_scale_t, x_zero_t = torch.tensor(x_scale), torch.tensor(x_zero)

    def multiply() -> torch.Tensor:
        for _ in range(INT8_REPEATS):
            out = torch.ops.onednn.qlinear_pointwise.tensor(
                x, x_scale_t, x_zero_t, packed, scales, zeros, None, 1.0, 0, torch.float32, "none", [None], ""
            )
        return out

    return multiply


def _fp8_matmul(n: int, device: str) -> Callable[[], torch.Tensor]:
    """e4m3 x e4m3 -> bf16 through torch's scaled matmul, as float8 training's linear layers multiply."""
    a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()  # column-major, as the scaled matmul takes it
    one = torch.ones((), device=device)
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


# -- the candidates ---------------------------------------------------------------------------
def build_vitkit(setup: Setup) -> torch.nn.Module:
    model = VisionTransformer(setup.config).to(setup.device)
    model.set_grad_checkpointing(setup.grad_checkpointing)
    train = setup.mode == "train"
    if train and setup.kernels != "torch":  # as training runs it: short sequences written out
        short_attention.install(model)
    if train and setup.dtype == "fp8":  # as train.precision=fp8 runs it
        float8.convert(model, torch.device(setup.device))
    # what eval and predict run (vitkit.inference.precision, with its kernels)
    if setup.mode == "inference" and setup.dtype != "fp16":
        runner = precision.prepare(
            model,
            setup.dtype,
            device=setup.device,
            compile=setup.compile,
            kernels=setup.kernels != "torch",
            batches=LONG_JOB,
        )
        if setup.compile is None:
            runner.settle(
                torch.randn(setup.batch_size, setup.config.in_chans, *setup.config.image_size, device=setup.device)
            )
        return _Prepared(runner, model)
    if setup.compile is not False:
        compile_cache_by_isa()
        model = torch.compile(model, options=short_attention.compile_options(setup.device) if train else None)
    return model


class _Prepared(torch.nn.Module):
    """A vitkit.inference.precision.Runner as a module the benchmark can time (autocast is the runner's own)."""

    def __init__(self, runner: precision.Runner, model: torch.nn.Module):
        super().__init__()
        self.runner, self.model = runner, model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.runner.run_batch(x)


def _plain(model: torch.nn.Module) -> torch.nn.Module:
    """The eager model behind a built candidate."""
    return model.model if isinstance(model, _Prepared) else getattr(model, "_orig_mod", model)


def inference_kernels(model: torch.nn.Module) -> str:
    """Which attention and GELU a built vitkit candidate runs: "vitkit-cpu" where its runner chose vitkit's C++ kernels
    (fp32 CPU inference, `Setup.kernels` auto, the library builds; see `precision.prepare`), "vitkit-bf16" where a
    bf16 runner's attention leaves torch's flash kernel (`precision.explicit_bf16_attention`), "short-attention" where
    training writes short attention out (`short_attention.install`; it applies where its rule says), else "torch".
    A candidate from another library (timm, transformers) has none of vitkit's seams: "torch", its library's own ops."""
    if isinstance(model, _Prepared):
        # bf16 on AVX512_BF16 without AMX: its own attention, whatever --kernels says
        return "vitkit-cpu" if model.runner.uses_kernels else "vitkit-bf16" if model.runner.bf16_attention else "torch"
    plain = _plain(model)
    if not isinstance(plain, VisionTransformer):
        return "torch"
    written_out = any(isinstance(b.attn, short_attention.WrittenOutAttention) for b in plain.blocks)
    return "short-attention" if written_out else "torch"


def build_reference(name: str, config: ViTConfig, device: str) -> torch.nn.Module:
    """The same architecture in another library, random weights (speed does not depend on them)."""
    if config.backbone is not None or config.classifier != "token" or config.pos_embed != "learned":
        raise ConfigError(f"--compare {name}: only plain class-token ViTs with learned position embeddings compare")
    if config.image_size[0] != config.image_size[1] or config.patch_size[0] != config.patch_size[1]:
        raise ConfigError(f"--compare {name}: only square images and patches compare")
    if name == "transformers":
        try:
            import transformers
        except ImportError as err:
            raise ConfigError(
                f"--compare transformers: transformers does not import here ({err}); install it (pip install "
                "transformers) or leave it out"
            ) from None

        hf = transformers.ViTConfig(
            hidden_size=config.width,
            num_hidden_layers=config.depth,
            num_attention_heads=config.num_heads,
            intermediate_size=config.mlp_dim,
            image_size=config.image_size[0],
            patch_size=config.patch_size[0],
            num_channels=config.in_chans,
            num_labels=max(config.num_classes, 1),
            layer_norm_eps=config.layer_norm_eps,
            attn_implementation="sdpa",
        )
        return transformers.ViTForImageClassification(hf).to(device)
    if name == "timm":
        try:
            from timm.models.vision_transformer import VisionTransformer as TimmViT
        except ImportError as err:
            raise ConfigError(
                f"--compare timm: timm does not import here ({err}); install timm (pip install timm, which needs "
                "torchvision) or leave timm out"
            ) from None

        return TimmViT(
            img_size=config.image_size[0],
            patch_size=config.patch_size[0],
            in_chans=config.in_chans,
            num_classes=config.num_classes,
            embed_dim=config.width,
            depth=config.depth,
            num_heads=config.num_heads,
            mlp_ratio=config.mlp_dim / config.width,
        ).to(device)
    raise ConfigError(f"--compare: unknown reference {name!r}; choose from {', '.join(REFERENCES)}")


def build_backend(
    name: str, model: torch.nn.Module, setup: Setup, precision_: str, folder: str
) -> Callable[[torch.Tensor], Any]:
    """`model` exported by vitkit to ONNX in `folder` and loaded into a deployment runtime at `precision_`, its threads
    pinned to torch's count (see export.runtime_session for spinning): a function of a batch."""
    from vitkit.inference.export import export, runtime_session

    path = os.path.join(
        folder, ("int8.onnx" if name == "onnxruntime" else "int8.xml") if precision_ == "int8" else "model.onnx"
    )
    if not os.path.exists(path):
        if precision_ == "int8":  # quantized by NNCF on one random batch, as vitkit int8 is calibrated here: speed only
            c = model.config
            calibration = [
                torch.randn(setup.batch_size, c.in_chans, *c.image_size, generator=torch.Generator().manual_seed(0))
            ]
            export(model, path, format="onnx" if name == "onnxruntime" else "openvino", calibration=calibration)
        else:
            export(model, path, format="onnx")
    return runtime_session(name, path, precision=precision_, threads=torch.get_num_threads())


def build_candidate(
    name: str, precision_: str, setup: Setup, folder: str, exported_from: torch.nn.Module | None = None
):
    """One --compare candidate: vitkit at `precision_`, a deployment runtime on the file exported into `folder` (from
    `exported_from` if it is not there yet), or a reference library, compiled when vitkit is (library against library,
    both at their best)."""
    if name == "vitkit":
        return build_vitkit(dataclasses.replace(setup, dtype=precision_))
    if name in BACKENDS:
        return build_backend(name, exported_from, setup, precision_, folder)
    reference = build_reference(name, setup.config, setup.device)
    compile_cache_by_isa()
    return torch.compile(reference) if setup.compile is not False else reference


def parse_candidates(compare: list[str] | tuple[str, ...], setup: Setup) -> list[tuple[str, str, str]]:
    """(label, library, precision) of every --compare entry: a reference, "vitkit" or a backend, each optionally
    ":fp32", ":bf16" or ":int8" (default: the benchmark's precision; references run it through autocast)."""
    out = []
    reference_precision = "bf16" if setup.dtype == "fp8" else setup.dtype  # no reference has fp8 of its own
    for entry in compare:
        name, _, prec = entry.partition(":")
        prec = prec or (reference_precision if name in REFERENCES else setup.dtype)
        if name not in (*REFERENCES, *BACKENDS, "vitkit"):
            raise ConfigError(
                f"--compare: unknown candidate {name!r}; choose from vitkit, {', '.join(REFERENCES + BACKENDS)}"
            )
        if prec not in DTYPES:
            raise ConfigError(f"--compare {entry}: unknown precision {prec!r}; choose from {', '.join(DTYPES)}")
        if name in REFERENCES and prec != reference_precision:
            raise ConfigError(
                f"--compare {entry}: references run at the benchmark's --precision ({setup.dtype}; bf16 beside fp8)"
            )
        if name in BACKENDS and prec == "int8-dynamic":
            raise ConfigError(f"--compare {entry}: the runtimes' int8 is NNCF's static quantization; use {name}:int8")
        if name in BACKENDS and setup.mode != "inference":
            raise ConfigError(f"--compare {name}: deployment runtimes only run inference; use --mode inference")
        out.append((entry if ":" in entry else name, name, prec))
    return out


def available_references() -> list[str]:
    found = []
    for name in REFERENCES:
        try:
            __import__(name)
        except Exception:
            continue
        found.append(name)
    return found


# -- measuring ----------------------------------------------------------------------------------
def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def interleaved_times(
    steps: dict[str, Callable[[], Any]], *, device: str, rounds: int, warmup: int
) -> dict[str, list[float]]:
    """Seconds per call of every step, taking turns round after round (the order rotating)."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    _sync(device)
    times: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for r in range(rounds):
        # each round starts one later: none always follows the same
        for name in names[r % len(names) :] + names[: r % len(names)]:
            step = steps[name]
            _sync(device)
            start = time.perf_counter()
            step()
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return times


def peak_memory_mb(step: Callable[[], Any], device: str) -> float:
    """Memory allocated at the high-water mark of one step beyond what was allocated before it (the allocator's view).

    On CUDA from the allocator's statistics; on CPU, which keeps none, from the allocations and frees
    torch's profiler records. Either way it does not depend on what the C library keeps cached.
    """
    return profile_step(step, device)[0]


# matrix products as torch's dispatcher runs them: eager, autocast, compiled graphs' GEMM calls, oneDNN's packed linears
MATMUL_OPS = {
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::_addmm_activation",
    "mkldnn::_linear_pointwise",
    "onednn::qlinear_pointwise",
    "quantized::linear_dynamic",
    "aten::_int_mm",
}
_DTYPE_NAMES = {
    "float": "fp32",
    "c10::BFloat16": "bf16",
    "c10::Half": "fp16",
    "unsigned char": "int8",
    "signed char": "int8",
}


def profile_step(step: Callable[[], Any], device: str) -> tuple[float, list[str]]:
    """One step under torch's profiler: its peak memory in MB (see `peak_memory_mb`) and the dtypes its matrix
    products' first operands had ("fp32", "bf16", "fp16", "int8"), sorted: the precision that actually ran."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    with (
        _stderr_silenced(),
        profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof,
    ):
        step()
        _sync(device)
    events = list(prof.profiler.kineto_results.events())
    matmuls = sorted(
        {_DTYPE_NAMES.get(e.dtypes()[0], e.dtypes()[0]) for e in events if e.name() in MATMUL_OPS and e.dtypes()}
    )
    if cuda:
        return (torch.cuda.max_memory_allocated() - base) / 2**20, matmuls
    live = peak = 0
    for _, nbytes in sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]"):
        live += nbytes
        peak = max(peak, live)
    return peak / 2**20, matmuls


def resident_memory_mb(setup: Setup, name: str, precision_: str, folder: str) -> dict[str, float]:
    """One candidate built and run (warm-up and two steps) in a fresh process, every candidate alike whoever allocates
    its memory (torch, ONNX Runtime, OpenVINO): "rss_mb", its resident set after the steps, and "peak_rss_mb", the
    high-water mark while building and running it, both above the resident set just before (torch, the runtime's
    library and vitkit imported). A deployment runtime loads the file `run` exported into `folder`."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_memory_child, args=(setup, name, precision_, folder, torch.get_num_threads(), send))
    child.start()
    send.close()
    try:
        result = receive.recv()
    except EOFError:
        result = {"rss_mb": float("nan"), "peak_rss_mb": float("nan")}  # the child died (e.g. out of memory)
    child.join()
    return result


def _memory_child(setup: Setup, name: str, precision_: str, folder: str, threads: int, send) -> None:
    torch.set_num_threads(threads)
    if name in BACKENDS:
        from vitkit.inference.export import _import_runtime

        _import_runtime(name)  # the library is part of the baseline, like torch
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the high-water mark restarts from the resident set now
    base = _status_kb("VmRSS")
    mine = dataclasses.replace(setup, dtype=precision_)
    step = _step(build_candidate(name, precision_, setup, folder), mine, setup.batch_size)
    for _ in range(setup.warmup + 2):
        step()
    send.send({"rss_mb": (_status_kb("VmRSS") - base) / 1024, "peak_rss_mb": (_status_kb("VmHWM") - base) / 1024})


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith(key + ":")))


@contextmanager
def _stderr_silenced():
    """The profiler's C++ side prints start/stop lines straight to file descriptor 2."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def activation_memory_mb(model: torch.nn.Module, x: torch.Tensor) -> float:
    """Memory autograd keeps for backward after a training forward of `x`: every saved tensor's storage, once.

    Exact and independent of the allocator and of other processes; parameters are not counted.
    """
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    del out
    return sum(seen.values()) / 2**20


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(device)
    name = precision.cpuinfo("model name") or platform.processor() or "cpu"
    threads = torch.get_num_threads()
    return f"{name}, {threads} thread{'s' * (threads != 1)}"


def run(setup: Setup, compare: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Benchmark vitkit (and `compare` candidates, see parse_candidates) under `setup`; a JSON-ready dict."""
    import tempfile

    train = setup.mode == "train"
    flops = count_flops(setup.config, setup.batch_size, backward=train)  # model FLOPs: MFU for every candidate
    executed = count_flops(setup.config, setup.batch_size, backward=train, executed=True)
    models: dict[str, Any] = {"vitkit": build_vitkit(setup)}
    candidates = parse_candidates(compare, setup)
    # each candidate's step runs at its own precision (a vitkit:bf16 row beside an fp32 run trains in bf16)
    setups = {"vitkit": setup, **{label: dataclasses.replace(setup, dtype=prec) for label, _, prec in candidates}}
    with tempfile.TemporaryDirectory(prefix="vitkit-bench-") as folder:
        for label, name, prec in candidates:
            models[label] = build_candidate(name, prec, setup, folder, _plain(models["vitkit"]))
        times, peaks, results = _timed(models, setups, flops)
        if setup.process_memory:
            for label, name, prec in [("vitkit", "vitkit", setup.dtype), *candidates]:
                results[label].update(resident_memory_mb(setup, name, prec, folder))
    ratios = {
        f"vitkit/{name}": statistics.median(r / v for r, v in zip(times[name], times["vitkit"]))
        for name in models
        if name != "vitkit"
    }
    return {
        **_what_was_run(setup, models, candidates),
        "gflops_per_image": flops / setup.batch_size / 1e9,
        "vitkit_executed_gflops_per_image": executed / setup.batch_size / 1e9,
        "peak_tflops": statistics.median(peaks[_peak_dtype(setup.dtype)]) / 1e12,
        "peak_tflops_by_precision": {kind: statistics.median(p) / 1e12 for kind, p in peaks.items()},
        "results": results,
        "speedup": ratios,
    }


def _timed(
    models: dict[str, Any], setups: dict[str, Setup], flops: float
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, Any]]:
    """Every model's batches (each at its own `setups` entry's precision) timed in turns with a large matmul in each
    precision among them (its peak): the times, each precision's peak FLOP/s per round, and per model its speed, MFU
    (of its precision's peak), memory, the dtypes its matrix products ran in and (in inference) batch-1 latency."""
    setup = setups["vitkit"]
    steps = {name: _step(model, setups[name], setup.batch_size) for name, model in models.items()}
    kinds = {name: _peak_dtype(s.dtype) for name, s in setups.items()}  # each candidate's MFU is of its own peak
    matmuls = {kind: _matmul(dataclasses.replace(setup, dtype=kind)) for kind in dict.fromkeys(kinds.values())}
    times = interleaved_times(
        {**{f"matmul {k}": step for k, (step, _) in matmuls.items()}, **steps},
        device=setup.device,
        rounds=setup.rounds,
        warmup=setup.warmup,
    )
    peaks = {k: [n / t for t in times[f"matmul {k}"]] for k, (_, n) in matmuls.items()}
    results: dict[str, Any] = {}
    for name in models:
        ts = times[name]
        external = not isinstance(models[name], torch.nn.Module)
        memory, matmuls = profile_step(steps[name], setup.device)
        results[name] = {
            "ms_per_batch": 1e3 * statistics.median(ts),
            "img_per_s": setup.batch_size / statistics.median(ts),
            "tflops": flops / statistics.median(ts) / 1e12,
            # against the same round's peak in the candidate's precision
            "mfu": statistics.median(flops / t / p for t, p in zip(ts, peaks[kinds[name]])),
            # torch's allocator only: a runtime's own arenas are seen by resident_memory_mb alone
            "peak_memory_mb": None if external else memory,
            "matmul_dtypes": matmuls,  # as torch's profiler saw them: what ran, whatever the label says
        }
        if setup.mode != "train":
            one = _step(models[name], setups[name], 1)
            lat = interleaved_times({name: one}, device=setup.device, rounds=setup.rounds, warmup=1)[name]
            results[name]["latency_ms_batch1"] = 1e3 * statistics.median(lat)
    return times, peaks, results


def _what_was_run(setup: Setup, models: dict[str, Any], candidates: list[tuple[str, str, str]]) -> dict[str, Any]:
    """The report's header: when, where, and what each candidate ran."""
    c = setup.config
    vitkit = models["vitkit"]
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": device_name(setup.device),
        "torch": torch.__version__,
        "mode": setup.mode,
        "dtype": setup.dtype,
        "batch_size": setup.batch_size,
        "image_size": list(c.image_size),
        "compile": vitkit.runner.compiled if isinstance(vitkit, _Prepared) else setup.compile is not False,
        "kernels": inference_kernels(vitkit),
        "precision": vitkit.runner.description if isinstance(vitkit, _Prepared) else setup.dtype,
        "candidates": {
            label: _what_ran(models[label], name, prec)
            for label, name, prec in [("vitkit", "vitkit", setup.dtype), *candidates]
        },
        "grad_checkpointing": setup.grad_checkpointing,
        "rounds": setup.rounds,
    }


def _what_ran(model, name: str, precision_: str) -> str:
    """A candidate's description: a vitkit runner's own (precision, kernels, compiled), else library and precision
    (autocast where not fp32), whether compiled, and vitkit's training kernels where installed."""
    if isinstance(model, _Prepared):
        return f"vitkit {model.runner.description}"
    if not isinstance(model, torch.nn.Module):  # a deployment runtime
        return f"{name} {precision_}"
    autocast = " autocast" if DTYPES[precision_] != torch.float32 else ""
    if precision_ == "fp8":
        autocast = f" ({float8.converted(_plain(model))} linear layers in torchao's float8, bf16 autocast elsewhere)"
    compiled = ", compiled" if hasattr(model, "_orig_mod") else ""
    kernels = inference_kernels(model)
    return f"{name} {precision_}{autocast}{compiled}" + (f", {kernels}" if kernels != "torch" else "")


def _executed_note(report: dict[str, Any]) -> str:
    executed = report["vitkit_executed_gflops_per_image"]
    if abs(executed - report["gflops_per_image"]) < 1e-9:
        return ""
    return f"; vitkit executes {executed:.3g}: its class-token model skips the last layer's unread tokens"


def _peak_dtype(dtype: str) -> str:
    """The dtype `_matmul` measures the peak in, for a benchmark run in `dtype`."""
    if dtype.startswith("int8"):  # int8 and int8-dynamic multiply alike
        return "int8"
    if dtype == "fp8":
        return "fp8"
    return (
        str(DTYPES[dtype])
        .replace("torch.", "")
        .replace("float32", "fp32")
        .replace("bfloat16", "bf16")
        .replace("float16", "fp16")
    )


def _peak_line(report: dict[str, Any]) -> str:
    """The measured matmul peak(s) that MFU is of: one per precision the candidates ran."""
    peaks = report.get("peak_tflops_by_precision") or {_peak_dtype(report["dtype"]): report["peak_tflops"]}
    if len(peaks) == 1:
        ((kind, peak),) = peaks.items()
        return (
            f"measured {kind} matmul peak {peak * 1e3:.1f} {'GOP/s' if kind == 'int8' else 'GFLOP/s'} (every candidate's MFU is of it: "
            "over 100% for one in a faster precision)\n"
        )
    listed = ", ".join(f"{kind} {peak * 1e3:.1f}" for kind, peak in peaks.items())
    unit = "GFLOP/s, int8 in GOP/s" if "int8" in peaks else "GFLOP/s"  # fp8's peak: fp8 FLOP/s
    return f"measured matmul peaks ({unit}): {listed}; each candidate's MFU is of its own precision's peak\n"


def _cell(value: float | None, unit: str = " ") -> str:
    """A table cell 15 characters wide: one decimal from 10 up, three significant digits below (a small model's
    0.0234 MB is not 0.0)."""
    if value is None:
        return f"{'-':>14} "
    return (f"{value:>14.1f}" if abs(value) >= 10 or value == 0 else f"{value:>14.3g}") + unit


def format_table(report: dict[str, Any]) -> str:
    """A readable summary of `run`'s report."""
    head = (
        f"{report['mode']} {report['dtype']} batch {report['batch_size']} at {report['image_size'][0]}x{report['image_size'][1]}"
        f" on {report['device']} ({report['date']}, torch {report['torch']}, compile={report['compile']},"
        f" kernels={report['kernels']})\n"
        f"random images and random weights (speed only); each figure a median over {report['rounds']} round{'s' * (report['rounds'] != 1)} of one"
        f" {'batch' if report['mode'] == 'inference' else 'step'} per candidate\n"
        f"{report['gflops_per_image']:.3g} GFLOPs per image (model FLOPs, for every MFU){_executed_note(report)}\n"
        + _peak_line(report)
    )
    resident = any("rss_mb" in r for r in report["results"].values())
    cols = ["img/s", "ms/batch", "GFLOP/s", "MFU", "latency b1 ms", "step mem MB"] + (
        ["RSS MB", "peak RSS MB"] if resident else []
    )
    width = max(16, *(len(name) + 2 for name in report["results"]))
    lines = [(f"{'':{width}}" + "".join(f"{c:>14} " for c in cols)).rstrip()]
    for name, r in report["results"].items():
        values = [
            r["img_per_s"],
            r["ms_per_batch"],
            r["tflops"] * 1e3,
            100 * r["mfu"],
            r.get("latency_ms_batch1"),  # none in training
            r["peak_memory_mb"],
        ] + ([r.get("rss_mb"), r.get("peak_rss_mb")] if resident else [])
        lines.append(
            f"{name:{width}}" + "".join(_cell(v, "%" if i == 3 else " ") for i, v in enumerate(values)).rstrip()
        )
    for name, ratio in report["speedup"].items():
        lines.append(f"speed-up {name}: {ratio:.2f}x (median of per-round ratios)")
    lines += [f"{label}: {what}" for label, what in report.get("candidates", {}).items()]
    return head + "\n".join(lines)


def set_threads(threads: int | None) -> None:
    torch.set_num_threads(threads or len(os.sched_getaffinity(0)))
