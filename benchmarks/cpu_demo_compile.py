"""The CPU demos' training step eager and under torch.compile (train.compile=true), in turns.

    python benchmarks/cpu_demo_compile.py --threads 2 --rounds 20 --results
    python benchmarks/cpu_demo_compile.py --rounds 1 --results-dir /tmp/smoke   # a smoke run

For configs/fashion_mnist.yaml (the plain demo) and configs/fashion_mnist_hybrid.yaml (the hybrid demo): the model,
optimizer and loss of the config at its batch size, one copy eager and one compiled as `vitkit train` compiles it,
both from the same weights on the same random batch. Prints ms per step of each and the median of per-round ratios.

--results writes demo-step-compiled-SLUG (benchmarks/results/demo.csv) and hybrid-demo-step-compiled-SLUG
(benchmarks/results/hybrid_demo.csv) through benchmarks/rows.py; --results-dir DIR writes under DIR instead. Then run
`python benchmarks/render.py`.
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
DEMOS = {  # results file: (row id, config)
    "demo": ("demo-step-compiled", "fashion_mnist.yaml"),
    "hybrid_demo": ("hybrid-demo-step-compiled", "fashion_mnist_hybrid.yaml"),
}


def step_times(config_name: str, rounds: int) -> dict[str, float]:
    """ms per training step, eager and compiled, and the median of per-round eager / compiled ratios."""
    config = load_run_config(CONFIGS / config_name)
    model_config, t = config.model_config(), config.train
    torch.manual_seed(0)
    eager = short_attention.install(build_model(model_config))
    x = torch.randn(t.batch_size, model_config.in_chans, *model_config.image_size)
    y = torch.randint(0, model_config.num_classes, (t.batch_size,))
    compile_cache_by_isa()
    compiled = copy.deepcopy(eager)
    forwards = {
        "eager": (eager, eager),
        "compiled": (compiled, torch.compile(compiled, options=short_attention.compile_options(torch.device("cpu")))),
    }
    steps = {}
    for name, (model, forward) in forwards.items():
        opt = make_optimizer(model, t)

        def step(forward=forward, opt=opt):
            F.cross_entropy(forward(x), y, label_smoothing=config.augment.label_smoothing).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        steps[name] = step
    times = interleaved_times(steps, device="cpu", rounds=rounds, warmup=3)  # the first compiled call compiles
    return {
        "eager_ms": 1e3 * statistics.median(times["eager"]),
        "compiled_ms": 1e3 * statistics.median(times["compiled"]),
        "speedup": statistics.median(e / c for e, c in zip(times["eager"], times["compiled"])),
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
    print(f"{device_name('cpu')}, torch {torch.__version__}, fp32, {torch.get_num_threads()} threads")
    report = {"device": device_name("cpu"), "threads": torch.get_num_threads(), "torch": torch.__version__}
    for results, (row_id, config_name) in DEMOS.items():
        r = report[config_name] = step_times(config_name, args.rounds)
        print(
            f"configs/{config_name} training step, batch {r['batch']}: {r['compiled_ms']:.1f} ms compiled against "
            f"{r['eager_ms']:.1f} ms eager: {r['speedup']:.2f}x",
            flush=True,
        )
        row = {
            "id": row_id,
            "benchmark": "Fashion-MNIST demo (`make demo`)" if results == "demo" else "Hybrid demo",
            "claim": "training step compiled (train.compile=true) over eager",
            "figure": f"{r['speedup']:.2f}",
            "unit": "x",
            "against": f"eager ({r['compiled_ms']:.1f} vs {r['eager_ms']:.1f} ms)",
            "model": f"configs/{config_name}",
            "setting": f"batch {r['batch']}, fp32, {report['threads']} threads, interleaved rounds",
        }
        write_asked_rows(args, results, [row])
    print(json.dumps(report))


if __name__ == "__main__":
    main()
