"""The CPU demos' training step eager, under torch.compile (train.compile=true), and compiled in bf16, in turns.

    python benchmarks/cpu_demo_compile.py --threads 2 --rounds 20 --results
    python benchmarks/cpu_demo_compile.py --rounds 1 --results-dir /tmp/smoke   # a smoke run

For configs/fashion_mnist.yaml (the plain demo) and configs/fashion_mnist_hybrid.yaml (the hybrid demo): the model,
optimizer and loss of the config at its batch size, one copy eager (fp32), one compiled as `vitkit train` compiles it
(fp32), one compiled under bf16 autocast (what train.precision=auto picks for a compiled run on a CPU with AMX or
AVX512_BF16), all from the same weights on the same random batch. Prints ms per step of each and the medians of
per-round ratios.

--results writes demo-step-compiled-SLUG (compiled fp32 and compiled bf16 over eager fp32) to
benchmarks/results/demo.csv and hybrid-demo-step-compiled-SLUG to benchmarks/results/hybrid_demo.csv, through
benchmarks/rows.py; --results-dir DIR writes under DIR instead. Then run `python benchmarks/render.py`.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F
from rows import add_results_arguments, write_asked_rows

from vitkit.devices import compile_cache_by_isa
from vitkit.inference.benchmark import device_name, interleaved_times
from vitkit.kernels import short_attention
from vitkit.models.registry import build_model
from vitkit.train.config import load_run_config
from vitkit.train.optim import make_optimizer

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
DEMOS = {  # results file: (row id prefix, config)
    "demo": ("demo-step", "fashion_mnist.yaml"),
    "hybrid_demo": ("hybrid-demo-step", "fashion_mnist_hybrid.yaml"),
}
VARIANTS = {"eager": (False, None), "compiled": (True, None), "compiled_bf16": (True, torch.bfloat16)}


def step_times(config_name: str, rounds: int) -> dict[str, float]:
    """ms per training step of each variant, and the medians of per-round ratios: compiled over eager (fp32), and
    compiled bf16 over compiled fp32."""
    config = load_run_config(CONFIGS / config_name)
    model_config, t = config.model_config(), config.train
    torch.manual_seed(0)
    base = short_attention.install(build_model(model_config))
    x = torch.randn(t.batch_size, model_config.in_chans, *model_config.image_size)
    y = torch.randint(0, model_config.num_classes, (t.batch_size,))
    compile_cache_by_isa()
    steps = {}
    for name, (compiled, dtype) in VARIANTS.items():
        model = copy.deepcopy(base)
        forward = torch.compile(model, options=short_attention.compile_options("cpu")) if compiled else model
        opt = make_optimizer(model, t)

        def step(forward=forward, opt=opt, dtype=dtype):
            with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
                logits = forward(x)
            F.cross_entropy(logits.float(), y, label_smoothing=config.augment.label_smoothing).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        steps[name] = step
    times = interleaved_times(steps, device="cpu", rounds=rounds, warmup=3)  # the first compiled calls compile
    ms = {f"{name}_ms": 1e3 * statistics.median(times[name]) for name in VARIANTS}

    def ratio(slow: str, fast: str) -> float:
        return statistics.median(a / b for a, b in zip(times[slow], times[fast]))

    return {
        **ms,
        "compiled": ratio("eager", "compiled"),
        "compiled_bf16": ratio("eager", "compiled_bf16"),
        "bf16": ratio("compiled", "compiled_bf16"),
        "batch": t.batch_size,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--rounds", type=int, default=20)
    add_results_arguments(p, "demo")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{device_name('cpu')}, torch {torch.__version__}")
    report = {"device": device_name("cpu"), "threads": torch.get_num_threads(), "torch": torch.__version__}
    for results, (prefix, config_name) in DEMOS.items():
        r = report[config_name] = step_times(config_name, args.rounds)
        print(
            f"configs/{config_name} training step, batch {r['batch']}: eager {r['eager_ms']:.1f} ms, compiled "
            f"{r['compiled_ms']:.1f} ms ({r['compiled']:.2f}x), compiled bf16 {r['compiled_bf16_ms']:.1f} ms "
            f"({r['bf16']:.2f}x compiled fp32)",
            flush=True,
        )
        common = {
            "benchmark": "Fashion-MNIST demo (`make demo`)" if results == "demo" else "Hybrid demo",
            "unit": "x",
            "model": f"configs/{config_name}",
            "setting": f"batch {r['batch']}, {report['threads']} threads, interleaved rounds",
        }
        rows = [
            {
                **common,
                "id": f"{prefix}-compiled",
                "claim": "step compiled over eager fp32: fp32 / bf16 (auto)",
                "figure": f"{r['compiled']:.2f} / {r['compiled_bf16']:.2f}",
                "against": f"eager fp32 ({r['compiled_ms']:.1f} / {r['compiled_bf16_ms']:.1f} vs {r['eager_ms']:.1f} ms)",
            }
        ]
        write_asked_rows(args, results, rows)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
