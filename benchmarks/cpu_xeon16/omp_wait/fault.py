"""The one-off script behind RESULTS.md's "compiled-bf16 fault found: OpenMP's spin-waiting" (2026-11-26): vitkit's bf16
runner at all cores, compiled or eager, one variant per process, median of 15 batches of 8 after the first.

    OMP_WAIT_POLICY=PASSIVE MODEL=vit_b16 PYTHONPATH=src python benchmarks/cpu_xeon16/omp_wait/fault.py compiled

argv: eager | compiled | no_cpp_wrapper | no_freezing. The OpenMP runtimes it lists are the loaded files whose
name has "omp" in it (the Cython entries of the raw files matched "Compiler", not an OpenMP runtime).
"""
import os, statistics, sys, time, torch
import torch._inductor.config as ic
from vitkit import precision
from vitkit.models import create_model
variant = sys.argv[1]; T = os.cpu_count(); torch.set_num_threads(T)
if variant == "no_cpp_wrapper":
    precision._freeze_for_inference = lambda: setattr(ic, "freezing", True)
if variant == "no_freezing":
    precision._freeze_for_inference = lambda: setattr(ic, "cpp_wrapper", True)
x = torch.randn(8, 3, 224, 224)
r = precision.prepare(create_model(os.environ.get("MODEL", "vit_s16")).eval(), "bf16", device="cpu", compile=variant != "eager")
t0 = time.perf_counter(); r.run_batch(x); first = time.perf_counter() - t0
ts = []
for _ in range(15):
    s = time.perf_counter(); r.run_batch(x); ts.append(time.perf_counter() - s)
omp = sorted({l.split()[-1] for l in open("/proc/self/maps") if "omp" in l.split()[-1].rsplit("/", 1)[-1]})
print(f"{variant:16s} {1e3*statistics.median(ts):7.1f} ms  first {first:5.1f} s  env OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}  {omp}", flush=True)
