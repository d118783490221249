"""Peak memory and time of `inspection.mean_attention_distance` against keeping every attention map.

    PYTHONPATH=src python benchmarks/inspect_memory.py --results     # vit_ti16 at 384 px, 64 images, batches 16 and 4
    PYTHONPATH=src python benchmarks/inspect_memory.py --image-size 32 --images 4 --batch-sizes 2 --results-dir DIR

Each setting runs in a fresh process and reports its peak resident memory above the baseline
(torch, the model and the images already loaded). "all maps" is the naive way: one explicit forward
over all images keeping every layer's (B, heads, T, T) probabilities; the inspection function goes
layer by layer and batch by batch, so its peak follows --batch-size, not the number of images.

--results writes the rows inspect-memory-batchN-SLUG (one per --batch-sizes; SLUG: the machine kind) of
benchmarks/results/memory.csv through benchmarks/rows.py; --results-dir DIR writes DIR/memory.csv instead. Then run
`python benchmarks/render.py`.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time

from rows import add_results_arguments, write_asked_rows

CHILD = """
import json, resource, sys, time, torch, vitkit
from vitkit.evaluate import inspection
name, size, n, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
model = vitkit.create_model(name, image_size=size).eval()
x = torch.randn(n, model.config.in_chans, size, size)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
if batch == 0:
    with torch.inference_mode():
        _, maps = model.forward_features_explicit(x)
else:
    inspection.mean_attention_distance(model, x, batch_size=batch)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"peak_mib": (peak - base) / 1024, "seconds": seconds}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="vit_ti16")
    parser.add_argument("--image-size", type=int, default=384)
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 4])
    add_results_arguments(parser, "memory")
    args = parser.parse_args()

    print(
        f"{args.model} at {args.image_size}px, {args.images} images; {platform.machine()}, {time.strftime('%Y-%m-%d')}"
    )
    print("| method | batch | peak memory above baseline (MiB) | time (s) |")
    print("|---|---|---|---|")
    peaks = {}
    for batch in [0, *args.batch_sizes]:
        cmd = [sys.executable, "-c", CHILD, args.model, str(args.image_size), str(args.images), str(batch)]
        result = json.loads(
            subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        )
        method = "all maps kept (forward_features_explicit)" if batch == 0 else "mean_attention_distance"
        print(f"| {method} | {batch or args.images} | {result['peak_mib']:.0f} | {result['seconds']:.1f} |", flush=True)
        peaks[batch] = result["peak_mib"]
    rows = [
        {
            "id": f"inspect-memory-batch{batch}",
            "benchmark": "Memory: activation checkpointing and inspection",
            "claim": f"peak memory of mean_attention_distance, batch {batch}",
            "figure": f"{peaks[batch]:.0f}",
            "unit": "MiB",
            "against": f"{peaks[0]:,.0f} MiB with all attention maps kept",
            "model": f"{args.model} at {args.image_size} px",
            "setting": f"{args.images} random images",
        }
        for batch in args.batch_sizes
    ]
    write_asked_rows(args, "memory", rows)


if __name__ == "__main__":
    main()
