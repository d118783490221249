"""Do vitkit's C++ CPU inference kernels (attention, bias + GELU) still pay? The same model with and without them,
eager and compiled, interleaved round after round; medians of per-round ratios (torch ops time / kernels time).

    python benchmarks/cpu_kernels.py --model vit_s16 --batch 8 --rounds 7 --threads 2 --results
    python benchmarks/cpu_kernels.py --model vit_ti16 --batch 1 --rounds 1 --compile off --results-dir /tmp/smoke

--results writes the rows cpu-kernels-MODEL-MODE-SLUG (MODE: eager, compiled; SLUG: the machine kind) of
benchmarks/results/cpu_kernels.csv through benchmarks/rows.py; --results-dir DIR writes DIR/cpu_kernels.csv instead.
Then run `python benchmarks/render.py`.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
from rows import add_results_arguments, write_asked_rows

from vitkit.inference import benchmark
from vitkit.models import get_config


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="vit_s16")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--compile", choices=["on", "off", "both"], default="both")
    add_results_arguments(p, "cpu_kernels")
    args = p.parse_args()
    benchmark.set_threads(args.threads)
    config = get_config(args.model)
    steps = {}
    for compiled in {"on": [True], "off": [False], "both": [False, True]}[args.compile]:
        for kernels in ("auto", "torch"):
            setup = benchmark.Setup(config=config, batch_size=args.batch, compile=compiled, kernels=kernels)
            torch.manual_seed(0)
            model = benchmark.build_vitkit(setup)
            steps[f"{'compiled' if compiled else 'eager'} {benchmark.inference_kernels(model)}"] = benchmark._step(
                model, setup, args.batch
            )
    times = benchmark.interleaved_times(steps, device="cpu", rounds=args.rounds, warmup=2)
    report = {
        "model": args.model,
        "batch": args.batch,
        "device": benchmark.device_name("cpu"),
        "ms": {k: 1e3 * statistics.median(v) for k, v in times.items()},
    }
    for mode in ("eager", "compiled"):
        if f"{mode} vitkit-cpu" in times:
            report[f"{mode}: torch ops / kernels"] = statistics.median(
                t / k for t, k in zip(times[f"{mode} torch"], times[f"{mode} vitkit-cpu"])
            )
    print(json.dumps(report, indent=1))
    rows = [
        {
            "id": f"cpu-kernels-{args.model.replace('_', '-')}-{mode}",
            "benchmark": "CPU kernels, compiling, int8 flows",
            "claim": f"vitkit's C++ kernels, speed over torch's ops ({mode})",
            "figure": f"{report[f'{mode}: torch ops / kernels']:.2f}",
            "unit": "x",
            "against": "torch's ops",
            "model": args.model,
            "setting": f"batch {args.batch}, {config.image_size[0]} px, fp32, {torch.get_num_threads()} threads",
        }
        for mode in ("eager", "compiled")
        if f"{mode}: torch ops / kernels" in report
    ]
    write_asked_rows(args, "cpu_kernels", rows)


if __name__ == "__main__":
    main()
