"""When does compiling pay for itself in `eval` and feature extraction? Measures what `precision.worth_compiling`
assumes: the one-off cost of compiling (inductor, frozen weights) and the per-batch gain of the compiled model over
the eager one, per model and precision, at the batch size `eval` uses.

    python benchmarks/compile_payoff.py --model vit_s16 --batch 256 --precision fp32 bf16 [--threads 2]

For each precision: the first compiled call (compilation included) and the median per-batch times of eager and
compiled taken in turns (`benchmark.interleaved_times`); from them the compile cost in seconds and the speedup,
and the number of batches after which compiling has paid, next to the constants vitkit assumes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import vitkit
from vitkit.inference import precision
from vitkit.inference.benchmark import device_name, interleaved_times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="vit_s16")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = vitkit.create_model(args.model).eval()
    size = model.config.image_size
    x = torch.randn(args.batch, model.config.in_chans, *size)
    print(
        f"{args.model} at {size[0]} px, batch {args.batch}, {device_name('cpu')}; "
        f"vitkit assumes compile {precision.COMPILE_SECONDS:.0f} s, speedup {precision.COMPILED_SPEEDUP:.2f}x"
    )
    rows = {}
    for prec in args.precision:
        eager = precision.prepare(model, prec, compile=False)
        compiled = precision.prepare(model, prec, compile=True)
        eager(x)  # eager's first call: no compilation, a warm-up
        start = time.perf_counter()
        compiled(x)
        first = time.perf_counter() - start
        times = interleaved_times(
            {"eager": lambda: eager(x), "compiled": lambda: compiled(x)}, device="cpu", rounds=args.rounds, warmup=0
        )
        e, c = statistics.median(times["eager"]), statistics.median(times["compiled"])
        cost = first - c  # the first call minus one ordinary compiled batch
        pays_after = cost / (e - c) if e > c else float("inf")
        rows[prec] = {
            "eager_s": e,
            "compiled_s": c,
            "speedup": e / c,
            "compile_s": cost,
            "pays_after_batches": pays_after,
        }
        print(
            f"| {prec} | eager {e:.2f} s/batch | compiled {c:.2f} s/batch | {e / c:.2f}x | compile {cost:.0f} s | "
            f"pays after {pays_after:.0f} batches ({pays_after * args.batch:.0f} images) |"
        )
    print(json.dumps({"model": args.model, "batch": args.batch, "threads": torch.get_num_threads(), "results": rows}))


if __name__ == "__main__":
    main()
