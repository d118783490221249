"""The one-off script behind the 16-core Xeon findings (git history of benchmarks/RESULTS.md) "the compiled-bf16 fault is OpenMP's spin-waiting" and
"oneDNN's packed bf16 linears are the fault" (2026-11-26): vitkit's bf16 runner at all cores, compiled or eager, one
variant per process, median of 15 batches of 8 after the first.

    OMP_WAIT_POLICY=PASSIVE MODEL=vit_b16 PYTHONPATH=src python benchmarks/archive/cpu_xeon16/omp_wait/fault.py compiled

argv: eager | compiled | no_cpp_wrapper | no_freezing | no_prepack (inductor settings changed from vitkit's own;
when these runs were made, vitkit's own settings were freezing, the C++ wrapper and packed weights for every
precision). PROFILE=1 prints torch.profiler's table of five more batches. The OpenMP runtimes it lists are the
loaded files whose name has "omp" in it (the Cython entries of the raw files matched "Compiler", not an OpenMP runtime).
"""
import os, statistics, sys, time, torch
from vitkit.inference import precision
from vitkit.models import create_model
variant = sys.argv[1]; T = os.cpu_count(); torch.set_num_threads(T)
changed = {"no_cpp_wrapper": {"cpp_wrapper": False}, "no_freezing": {"freezing": False}, "no_prepack": {"cpp.weight_prepack": False}}
if variant in changed:
    own = precision._inference_settings
    precision._inference_settings = lambda name: {**own(name), **changed[variant]}
x = torch.randn(8, 3, 224, 224)
r = precision.prepare(create_model(os.environ.get("MODEL", "vit_s16")).eval(), "bf16", device="cpu", compile=variant != "eager")
t0 = time.perf_counter(); r.run_batch(x); first = time.perf_counter() - t0
ts = []
for _ in range(15):
    s = time.perf_counter(); r.run_batch(x); ts.append(time.perf_counter() - s)
omp = sorted({l.split()[-1] for l in open("/proc/self/maps") if "omp" in l.split()[-1].rsplit("/", 1)[-1]})
print(f"{variant:16s} {1e3*statistics.median(ts):7.1f} ms  first {first:5.1f} s  env OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}  {omp}", flush=True)
if os.environ.get("PROFILE"):
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(5):
            r.run_batch(x)
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=60), flush=True)
