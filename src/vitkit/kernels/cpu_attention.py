"""Multi-head attention for fp32 CPU inference from the fused Q/K/V projection (cpu_attention.cpp).

    model.set_attention_kernel(cpu_attention.attention)   # after cpu_attention.load() returned True

The C++ source is compiled once per machine and torch version with the system compiler (as
torch.compile does) into a cache directory ($VITKIT_CACHE, else ~/.cache/vitkit). Where it cannot
be built, `load()` warns once and returns False, and models keep torch's SDPA. Inputs the kernel
does not cover (GPU, other dtypes, sequences longer than MAX_TOKENS, whose T x T scores would not
stay in cache, or any input before a successful `load()`) go through SDPA inside `attention`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from vitkit.checkpoint.io import atomic_path

SOURCE = Path(__file__).with_name("cpu_attention.cpp")
MAX_TOKENS = 2048
_ISA_FLAGS = {  # torch's own CPU capability decides which vector width the kernel is built for
    "AVX512": ["-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma", "-DCPU_CAPABILITY_AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2"],
}
_loaded: bool | None = None  # None: not tried yet


def attention(qkv: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, T, 3D) fused Q/K/V projections -> (B, T, D): softmax(q k^T / sqrt(d_head)) v, heads side by side."""
    B, T, three_d = qkv.shape
    head_dim = three_d // 3 // num_heads
    covered = qkv.device.type == "cpu" and qkv.dtype == torch.float32 and T <= MAX_TOKENS and not qkv.requires_grad
    if covered and _loaded:
        return torch.ops.vitkit.attention(qkv.contiguous(), num_heads, head_dim**-0.5)
    q, k, v = (t.transpose(1, 2) for t in qkv.view(B, T, 3, num_heads, head_dim).unbind(2))
    return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, T, three_d // 3)


def load() -> bool:
    """Build (or find in the cache) and register torch.ops.vitkit.attention; False, with a warning, if impossible."""
    global _loaded
    if _loaded is None:
        try:
            torch.ops.load_library(str(_build()))
            torch.library.register_fake("vitkit::attention")(_fake)
            _loaded = True
        except Exception as e:  # no compiler, no BLAS symbol, a read-only cache: SDPA still works
            warnings.warn(f"vitkit's CPU attention kernel is unavailable ({e}); using torch's SDPA", stacklevel=2)
            _loaded = False
    return _loaded


def _fake(qkv: torch.Tensor, heads: int, scale: float) -> torch.Tensor:
    return qkv.new_empty(qkv.shape[0], qkv.shape[1], qkv.shape[2] // 3)


def cache_dir() -> Path:
    root = os.environ.get("VITKIT_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"), "vitkit")
    return Path(root) / "kernels"


def _build() -> Path:
    from torch.utils import cpp_extension

    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        raise RuntimeError(f"no C++ compiler ({cxx!r} not found; install g++ or set CXX)")
    lib_dir = Path(torch.__file__).parent / "lib"
    flags = [
        "-O3", "-std=c++20", "-shared", "-fPIC", "-fopenmp",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        *_ISA_FLAGS.get(torch.backends.cpu.get_cpu_capability(), []),
        *(f"-I{p}" for p in cpp_extension.include_paths()),
    ]
    key = hashlib.sha256("\n".join([SOURCE.read_text(), torch.__version__, cxx, *flags]).encode()).hexdigest()[:16]
    target = cache_dir() / f"cpu_attention-{key}.so"
    if target.exists():
        return target
    with atomic_path(target) as tmp:  # built aside, then renamed: never half a file
        cmd = [cxx, *flags, str(SOURCE), "-o", str(tmp), f"-L{lib_dir}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{lib_dir}"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if "error" in line] or [f"exit code {done.returncode}"]
            raise subprocess.SubprocessError(f"{cxx} failed: {errors[0].strip()}")
    return target
