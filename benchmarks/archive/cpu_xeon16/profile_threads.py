"""The one-off script behind the 16-core Xeon profiles of 2026-11-26 (raw output and notes: git history of benchmarks/):
bf16 SDPA and linear timings at all cores and 2, then vitkit's bf16 runner compiled and eager, timed at several
thread counts (compiled at all cores first) and profiled with inductor's kernel profiling.

    T=16 PYTHONPATH=src python benchmarks/archive/cpu_xeon16/profile_threads.py vit_s16
"""
import os, statistics, sys, time
import torch
from vitkit.inference import precision
from vitkit.models import create_model
name = sys.argv[1] if len(sys.argv) > 1 else "vit_s16"
T = int(os.environ.get("T", os.cpu_count()))
torch.set_num_threads(T)
import torch._inductor.config as ic; ic.cpp.enable_kernel_profile = True
def timeit(f, x, n=10):
    ts = []
    for _ in range(n):
        s = time.perf_counter(); f(x); ts.append(time.perf_counter() - s)
    return 1e3 * statistics.median(ts)
def prof(f, x, label):
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(5):
            f(x)
    print(f"---- profile {label}", flush=True)
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=70), flush=True)
x = torch.randn(8, 3, 224, 224) if name != "vit_test" else torch.randn(8, 3, 16, 16)
import torch.nn.functional as F
for heads, d in ((6, 64), (12, 64)):
    q, k, v = (torch.randn(8, heads, 197, d, dtype=torch.bfloat16) for _ in range(3))
    for t in sorted({T, 2}, reverse=True):
        torch.set_num_threads(t)
        print(f"sdpa bf16 heads {heads} threads {t}: {timeit(lambda _: F.scaled_dot_product_attention(q, k, v), None, 20):.2f} ms", flush=True)
    w = torch.randn(3 * heads * d, heads * d, dtype=torch.bfloat16); a = torch.randn(1576, heads * d, dtype=torch.bfloat16)
    for t in sorted({T, 2}, reverse=True):
        torch.set_num_threads(t)
        print(f"linear bf16 {tuple(a.shape)}x{tuple(w.shape)} threads {t}: {timeit(lambda _: F.linear(a, w), None, 20):.2f} ms", flush=True)
torch.set_num_threads(T)
import torch._inductor.config as ic; ic.cpp.enable_kernel_profile = True
for compile_ in (True, False):
    model = create_model(name).eval()
    r = precision.prepare(model, "bf16", device="cpu", compile=compile_)
    t0 = time.perf_counter(); r.run_batch(x); r.run_batch(x); r.run_batch(x)
    print(f"== {name} compile={compile_} {r.description}; first 3 calls {time.perf_counter()-t0:.1f} s", flush=True)
    for t in sorted({T, T // 2, T // 4, 2} - {0}, reverse=True):
        torch.set_num_threads(t); r.run_batch(x)
        print(f"   threads {t}: {timeit(r.run_batch, x):.1f} ms/batch", flush=True)
    torch.set_num_threads(T)
    prof(r.run_batch, x, f"compile={compile_}")
