"""Eager bf16 CPU inference with its GEMMs packed for oneDNN (`OneDNNLinears` in bf16) against torch's own bf16 GEMMs:
the same bf16 runner twice in one process, interleaved, the order swapped every round. Random weights, 224 px.

    PYTHONPATH=src python benchmarks/archive/eager_bf16_gemms.py vit_s16 vit_b16 [--threads 2]

Prints, per model and batch size (8 and 1), the median ms of each and the median of the per-round ratios.
"""

import argparse
import statistics
import time

import torch

from vitkit.inference import precision
from vitkit.models import create_model


def median_seconds(fn, x, n):
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name in args.models:
        model = create_model(name).eval()
        packed = precision.prepare(model, "bf16", compile=False)
        plain = precision.prepare(model, "bf16", compile=False)
        plain._eager_linears = None
        print(f"{name}: {packed.description}; {args.threads} threads")
        for batch, n in ((8, 3), (1, 10)):
            x = torch.randn(batch, 3, *model.config.image_size)
            packed.run_batch(x), plain.run_batch(x)
            ratios, packed_s, plain_s = [], [], []
            for r in range(args.rounds):
                order = (packed, plain) if r % 2 else (plain, packed)
                seconds = {id(runner): median_seconds(runner.run_batch, x, n) for runner in order}
                packed_s.append(seconds[id(packed)])
                plain_s.append(seconds[id(plain)])
                ratios.append(plain_s[-1] / packed_s[-1])
            print(
                f"  batch {batch}: packed {1e3 * statistics.median(packed_s):.1f} ms, torch's {1e3 * statistics.median(plain_s):.1f} ms, "
                f"speed-up {statistics.median(ratios):.3f}x (rounds {min(ratios):.3f}-{max(ratios):.3f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
