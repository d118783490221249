"""Activation checkpointing (train.grad_checkpointing): the memory autograd holds for backward, with and without.

    PYTHONPATH=src python benchmarks/memory_checkpointing.py [--models vit_l16 vit_h14] [--batch 4]

The figure is the storage of every tensor saved for backward during one training forward pass
(benchmark.activation_memory_mb), fp32, parameters excluded: exact, and the same on any machine.
"""

from __future__ import annotations

import argparse

import torch

from vitkit.inference import benchmark
from vitkit.models import VisionTransformer, get_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["vit_l16", "vit_h14"])
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    print("| model | batch | activations, plain (MB) | with checkpointing (MB) | saving |")
    print("|---|---|---|---|---|")
    for name in args.models:
        config = get_config(name)
        model = VisionTransformer(config)
        x = torch.randn(args.batch, config.in_chans, *config.image_size)
        plain = benchmark.activation_memory_mb(model, x)
        model.set_grad_checkpointing(True)
        ckpt = benchmark.activation_memory_mb(model, x)
        print(f"| {name} | {args.batch} | {plain:,.0f} | {ckpt:,.0f} | {1 - ckpt / plain:.0%} |", flush=True)
        del model


if __name__ == "__main__":
    main()
