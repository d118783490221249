"""Cost as the work grows: throughput and memory against resolution and batch size.

    PYTHONPATH=src python benchmarks/scaling.py [--model vit_s16] [--compile off] [--out benchmarks/scaling] [--results]

Training memory: the storage autograd keeps for backward in one training forward
(benchmark.activation_memory_mb), through the fused attention (SDPA: no T x T matrix kept) and through
the explicit path (which keeps the softmax probabilities), at 224, 384 and 512 px with patch 16.
Inference: img/s, MFU and the allocator's peak memory for one batch (`vitkit benchmark`'s figures, the
model timed in turns with a matmul for the machine's peak) at each resolution (batch 8) and at batch
sizes 1-32 (224 px). Writes scaling.json and scaling.png.

--results also writes the rows scaling-RES-img-s-SLUG and scaling-RES-train-memory-SLUG of
benchmarks/results/scaling.csv through benchmarks/rows.py (SLUG: the machine kind, e.g. xeon); off by default so
a quick run doesn't overwrite published figures. Then run `python benchmarks/render.py`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch import nn

from vitkit.inference import benchmark
from vitkit.models import VisionTransformer, get_config


class ExplicitAttention(nn.Module):
    """The same model, forward through the explicit attention path."""

    def __init__(self, model: VisionTransformer):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.forward_features_explicit(x)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="vit_s16")
    parser.add_argument("--resolutions", type=int, nargs="+", default=[224, 384, 512])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-speed", action="store_true", help="training memory only")
    parser.add_argument(
        "--compile", choices=["on", "off"], default="on", help="torch.compile, as vitkit benchmark does (default on)"
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/scaling"))
    parser.add_argument(
        "--results",
        action="store_true",
        help="write the rows scaling-RES-{img-s,train-memory}-SLUG of benchmarks/results/scaling.csv",
    )
    args = parser.parse_args()
    benchmark.set_threads(None)
    rows = []
    for res in args.resolutions:
        config = get_config(args.model, image_size=res)
        model = VisionTransformer(config)
        x = torch.randn(2, 3, res, res)
        row = {
            "resolution": res,
            "tokens": config.num_patches + 1,
            "act_mb_fused": benchmark.activation_memory_mb(model, x) / 2,
            "act_mb_explicit": benchmark.activation_memory_mb(ExplicitAttention(model), x) / 2,
        }
        if not args.skip_speed:
            row.update(inference(config, 8, args))
        rows.append(row)
        print(json.dumps(row), flush=True)
    batches = []
    if not args.skip_speed:
        for batch in args.batches:
            batches.append({"batch": batch, **inference(get_config(args.model), batch, args)})
            print(json.dumps(batches[-1]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(
        json.dumps({"model": args.model, "resolution": rows, "batch": batches}, indent=2)
    )
    plot(args.model, rows, batches, args.out.with_suffix(".png"))
    if args.results:
        write_results(args, rows)


def write_results(args: argparse.Namespace, rows: list[dict]) -> None:
    """scaling.csv: per resolution, inference img/s (batch 8) and training activations per image (fused SDPA)."""
    from rows import write_rows

    benchmark_name = "Cost as the work grows (`benchmarks/scaling.py`)"
    out = []
    for r in rows:
        res, tokens = r["resolution"], r["tokens"]
        if "img_s" in r:
            out.append(
                {
                    "id": f"scaling-{res}-img-s",
                    "benchmark": benchmark_name,
                    "claim": f"inference speed at {res} px ({tokens} tokens), MFU {100 * r['mfu']:.1f}%",
                    "figure": f"{r['img_s']:.1f}",
                    "unit": "img/s",
                    "model": f"{args.model}, {'compiled' if args.compile == 'on' else 'eager'}, fp32, "
                    f"kernels: {r['kernels']}",
                    "setting": f"batch 8, {torch.get_num_threads()} threads, {args.rounds} rounds",
                }
            )
        out.append(
            {
                "id": f"scaling-{res}-train-memory",
                "benchmark": benchmark_name,
                "claim": f"training activations per image at {res} px (fused SDPA)",
                "figure": f"{r['act_mb_fused']:.1f}",
                "unit": "MB/img",
                "against": f"{r['act_mb_explicit']:.1f} MB/img through the explicit softmax",
                "model": args.model,
                "setting": "exact count of saved tensors",
            }
        )
    write_rows("scaling", out)


def inference(config, batch: int, args: argparse.Namespace) -> dict:
    torch._dynamo.reset()  # a fresh static-shape compile for each shape, as a separate `vitkit benchmark` run gets
    report = benchmark.run(
        benchmark.Setup(config=config, batch_size=batch, rounds=args.rounds, compile=args.compile == "on")
    )
    r = report["results"]["vitkit"]
    return {
        "img_s": r["img_per_s"],
        "mfu": r["mfu"],
        "peak_mb": r["peak_memory_mb"],
        "device": report["device"],
        "kernels": report["kernels"],
        "compile": report["compile"],
        "date": report["date"],
    }


def plot(model: str, rows: list[dict], batches: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    panels = 4 if batches else 1
    fig = Figure(figsize=(4.2 * panels, 3.4), layout="constrained")
    axes = fig.subplots(1, panels, squeeze=False)[0]
    tokens = [r["tokens"] for r in rows]
    axes[0].plot(tokens, [r["act_mb_fused"] for r in rows], "o-", label="fused SDPA")
    axes[0].plot(tokens, [r["act_mb_explicit"] for r in rows], "s--", label="explicit softmax")
    axes[0].set(
        xlabel="tokens (224, 384, 512 px)", ylabel="activation memory per image (MB)", title=f"{model}: training memory"
    )
    axes[0].legend()
    if batches:
        axes[1].plot([r["resolution"] for r in rows], [r["img_s"] for r in rows], "o-")
        axes[1].set(xlabel="resolution (px)", ylabel="inference img/s (batch 8)", title="throughput vs resolution")
        axes[2].plot([b["batch"] for b in batches], [b["img_s"] for b in batches], "o-")
        axes[2].set(xscale="log", xlabel="batch size", ylabel="inference img/s (224 px)", title="throughput vs batch")
        axes[3].plot(tokens, [r["peak_mb"] / 8 for r in rows], "o-")
        axes[3].set(
            xlabel="tokens (224, 384, 512 px)", ylabel="inference peak memory per image (MB)", title="inference memory"
        )
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
