"""fp32 CPU inference kernels for the transformer block (cpu_inference.cpp): attention and bias + GELU; and a bf16
attention for CPUs with AVX512_BF16 (cpu_attention_bf16.cpp, `attention_bf16`).

    if cpu_inference.load():
        block_kernels.install(model, cpu_inference)   # eval + no_grad only; training keeps torch's ops

`attention` takes the fused Q/K/V projection before its bias and does the bias and softmax(q k^T /
sqrt(d_head)) v of every head in one pass; `bias_gelu_` adds the first MLP layer's bias and applies
GELU in one pass, in place, with a polynomial in place of torch's erf. The C++ source is compiled once per machine and
torch version with the system compiler (as torch.compile does) into a cache directory ($VITKIT_CACHE,
else ~/.cache/vitkit). Where it cannot be built, `load()` warns once and returns False, and models keep
torch's ops. Inputs the kernels do not cover (GPU, other dtypes, sequences longer than MAX_TOKENS,
whose T x T scores would not stay in cache, or any input before a successful `load()`) go through
torch's own ops inside these functions.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from vitkit.kernels import build_library, cache_dir  # noqa: F401 (cache_dir: where the library lands)

SOURCE = Path(__file__).with_name("cpu_inference.cpp")
MAX_TOKENS = 800  # longer sequences go to SDPA: their T x T scores outgrow the core's L2 cache
_ISA_FLAGS = {  # torch's own CPU capability (ATEN_CPU_CAPABILITY overrides it) decides the vector width
    "AVX512": ["-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma", "-DCPU_CAPABILITY_AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2"],
}
_loaded: bool | None = None  # None: not tried yet
BF16_SOURCE = Path(__file__).with_name("cpu_attention_bf16.cpp")
HEADER = Path(__file__).with_name("cpu_exp_row.h")  # included by both sources
BF16_HEAD_SIZES = (32, 48, 64, 80, 96, 128)  # the head sizes the bf16 kernel is instantiated for
_bf16_loaded: bool | None = None


def _covered(t: torch.Tensor) -> bool:
    return bool(_loaded) and t.device.type == "cpu" and t.dtype == torch.float32 and not t.requires_grad


def attention(qkv: torch.Tensor, bias: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, T, 3D) Q/K/V projections before their (3D) bias -> (B, T, D): softmax(q k^T / sqrt(d_head)) v, heads side by side."""
    B, T, three_d = qkv.shape
    head_dim = three_d // 3 // num_heads
    if _covered(qkv) and T <= MAX_TOKENS and bias.dtype == torch.float32:
        return torch.ops.vitkit.attention(qkv.contiguous(), bias.contiguous(), num_heads, head_dim**-0.5)
    q, k, v = (t.transpose(1, 2) for t in (qkv + bias).view(B, T, 3, num_heads, head_dim).unbind(2))
    return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, T, three_d // 3)


def bias_gelu_(h: torch.Tensor, bias: torch.Tensor, approximate: bool = False) -> torch.Tensor:
    """GELU(h + bias) over the last dimension, written over h where the kernel runs (h is not needed after).

    `approximate`: the tanh form instead of the exact (erf) one.
    """
    if _covered(h) and h.dim() >= 1 and bias.dtype == torch.float32:
        out = h.contiguous()
        torch.ops.vitkit.bias_gelu_(out, bias.contiguous(), approximate)
        return out
    return F.gelu(h + bias, approximate="tanh" if approximate else "none")


def attention_bf16(qkv: torch.Tensor, bias: torch.Tensor, num_heads: int) -> torch.Tensor | None:
    """The bf16 twin of `attention` (scores and softmax in fp32 inside, bf16 in and out), or None where it does not
    cover the input (not loaded, not bf16 on the CPU, gradients, longer than MAX_TOKENS, another head size)."""
    B, T, three_d = qkv.shape
    head_dim = three_d // 3 // num_heads
    if (
        qkv.device.type == "cpu"
        and qkv.dtype == bias.dtype == torch.bfloat16
        and not qkv.requires_grad
        and bf16_covers(head_dim, T)
    ):
        return torch.ops.vitkit_bf16.attention(qkv.contiguous(), bias.contiguous(), num_heads, head_dim**-0.5)
    return None


def bf16_covers(head_dim: int, tokens: int) -> bool:
    """Whether `attention_bf16` runs the kernel for this head size and sequence length (once `load_bf16()` succeeded)."""
    return bool(_bf16_loaded) and tokens <= MAX_TOKENS and head_dim in BF16_HEAD_SIZES


def load() -> bool:
    """Build (or find in the cache) and register torch.ops.vitkit.*; False, with a warning, if impossible."""
    global _loaded
    if _loaded is None:
        try:
            torch.ops.load_library(str(_build()))
            torch.library.register_fake("vitkit::attention")(_attention_shape)
            torch.library.register_fake("vitkit::bias_gelu_")(lambda h, bias, approximate: None)
            _loaded = True
        except Exception as e:  # no compiler, no BLAS symbol, a read-only cache: torch's ops still work
            warnings.warn(
                f"vitkit's CPU inference kernels are unavailable ({e}); using torch's SDPA and GELU", stacklevel=2
            )
            _loaded = False
    return _loaded


def load_bf16() -> bool:
    """Build (or find in the cache) and register torch.ops.vitkit_bf16.attention: only on CPUs with AVX512_BF16
    (as torch detects it); False elsewhere, and with a warning where it cannot be built."""
    global _bf16_loaded
    if _bf16_loaded is None:
        _bf16_loaded = False
        if getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)():
            try:
                torch.ops.load_library(str(_build(BF16_SOURCE, ["-mavx512bf16", *_ISA_FLAGS["AVX512"]])))
                torch.library.register_fake("vitkit_bf16::attention")(_attention_shape)
                _bf16_loaded = True
            except Exception as e:
                warnings.warn(f"vitkit's bf16 attention kernel is unavailable ({e}); using bf16 matmuls", stacklevel=2)
    return _bf16_loaded


def _attention_shape(qkv: torch.Tensor, bias: torch.Tensor, heads: int, scale: float) -> torch.Tensor:
    return qkv.new_empty(qkv.shape[0], qkv.shape[1], qkv.shape[2] // 3)


def _build(source: Path = SOURCE, isa: list[str] | None = None) -> Path:
    """The library of `source` compiled for torch's CPU capability (or the `isa` flags given)."""
    from torch.utils import cpp_extension

    lib_dir = Path(torch.__file__).parent / "lib"
    flags = [
        "-O3",
        "-std=c++20",
        "-shared",
        "-fPIC",
        "-fopenmp",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        *(isa if isa is not None else _ISA_FLAGS.get(torch.backends.cpu.get_cpu_capability(), [])),
        *(f"-I{p}" for p in cpp_extension.include_paths()),
    ]
    link = [f"-L{lib_dir}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{lib_dir}"]
    return build_library(source, os.environ.get("CXX", "c++"), flags, link, key=[torch.__version__, HEADER.read_text()])
