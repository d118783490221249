"""Activation checkpointing (train.grad_checkpointing): the memory autograd holds for backward, with and without.

    PYTHONPATH=src python benchmarks/memory_checkpointing.py --batch 4 --results   # vit_l16 and vit_h14
    PYTHONPATH=src python benchmarks/memory_checkpointing.py --models vit_ti16 --batch 1 --results-dir /tmp/smoke

The figure is the storage of every tensor saved for backward during one training forward pass
(benchmark.activation_memory_mb), fp32, parameters excluded: exact, and the same on any machine.

--results writes the rows checkpointing-MODEL of benchmarks/results/memory.csv through benchmarks/rows.py (no
machine suffix: the count is the same on any machine); --results-dir DIR writes DIR/memory.csv instead. Then run
`python benchmarks/render.py`.
"""

from __future__ import annotations

import argparse

import torch
from rows import add_results_arguments, write_asked_rows

from vitkit.inference import benchmark
from vitkit.models import VisionTransformer, get_config


def row(name: str, batch: int, size: tuple[int, int], plain: float, ckpt: float) -> dict:
    return {
        "id": f"checkpointing-{name.replace('_', '-')}",
        "benchmark": "Memory: activation checkpointing and inspection",
        "claim": f"activations kept for backward with `train.grad_checkpointing` ({1 - ckpt / plain:.0%} saved)",
        "figure": f"{ckpt:.0f}",
        "unit": "MB",
        "against": f"{plain:,.0f} MB plain",
        "model": name,
        "setting": f"batch {batch}, {size[0]} px, fp32",
        "machine": "CPU (exact count of saved tensors, any machine)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["vit_l16", "vit_h14"])
    parser.add_argument("--batch", type=int, default=4)
    add_results_arguments(parser, "memory")
    args = parser.parse_args()
    print("| model | batch | activations, plain (MB) | with checkpointing (MB) | saving |")
    print("|---|---|---|---|---|")
    rows = []
    for name in args.models:
        config = get_config(name)
        model = VisionTransformer(config)
        x = torch.randn(args.batch, config.in_chans, *config.image_size)
        plain = benchmark.activation_memory_mb(model, x)
        model.set_grad_checkpointing(True)
        ckpt = benchmark.activation_memory_mb(model, x)
        print(f"| {name} | {args.batch} | {plain:,.0f} | {ckpt:,.0f} | {1 - ckpt / plain:.0%} |", flush=True)
        rows.append(row(name, args.batch, config.image_size, plain, ckpt))
        del model
    write_asked_rows(args, "memory", rows, slug=False)


if __name__ == "__main__":
    main()
