"""bf16 against fp32 training on the CPU: step time, speed-up and MFU, and the loss curves of a short Fashion-MNIST run.

    PYTHONPATH=src python benchmarks/cpu_train_precision.py speed [--compile on|off] [--rounds 3] [--results]
    PYTHONPATH=src python benchmarks/cpu_train_precision.py curve [--steps 200] [--images 6000] [--results]

speed  `vitkit benchmark --mode train` in one process: ViT-S/16 at 96 px, batch 32, fp32 and a vitkit:bf16 candidate
       taking turns with a large matmul in each precision; MFU of each against its own precision's measured peak.
curve  the demo model (configs/fashion_mnist.yaml) trained on a subset of Fashion-MNIST in fp32 and in bf16, same
       seed and data order: the loss curves side by side, final train loss and validation top-1. Also what
       `train.precision=auto` measures for the demo model (bf16's forward + backward speed over fp32's).

With --results the figures go to benchmarks/results/cpu_train_precision.csv (benchmarks/rows.py). Say in --note how
loaded the machine was (the ratios are measured side by side; absolute times move with the load).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rows import fmt, write_rows


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def speed(args) -> list[dict]:
    from vitkit.inference import benchmark
    from vitkit.models import get_config

    benchmark.set_threads(args.threads)
    config = get_config("vit_s16", image_size=96, num_classes=10)
    setup = benchmark.Setup(
        config=config, batch_size=32, mode="train", compile=args.compile == "on", rounds=args.rounds, warmup=1
    )
    before = _load()
    report = benchmark.run(setup, ["vitkit:bf16"])
    print(benchmark.format_table(report), flush=True)
    fp32, bf16 = report["results"]["vitkit"], report["results"]["vitkit:bf16"]
    assert fp32["matmul_dtypes"] == ["fp32"] and bf16["matmul_dtypes"] == ["bf16"], "a candidate ran another dtype"
    peaks = report["peak_tflops_by_precision"]
    setting = (
        f"batch 32, 96 px, {'compiled' if args.compile == 'on' else 'eager'}, {torch.get_num_threads()} threads, "
        f"{args.rounds} rounds; {before} before, {_load()} after; {args.note}".rstrip("; ")
    )
    base = {"benchmark": "CPU training, bf16 against fp32", "model": "vit_s16, random weights", "setting": setting}
    tag = "compiled" if args.compile == "on" else "eager"
    rows = [
        {
            "id": f"train-fp32-ms-{tag}",
            "claim": "fp32 ms a step",
            "figure": f"{fp32['ms_per_batch']:.0f}",
            "unit": "ms",
        },
        {
            "id": f"train-bf16-ms-{tag}",
            "claim": "bf16 ms a step",
            "figure": f"{bf16['ms_per_batch']:.0f}",
            "unit": "ms",
        },
        {
            "id": f"train-bf16-speedup-{tag}",
            "claim": "bf16 speed over fp32 (median of per-round ratios)",
            "figure": fmt(1 / report["speedup"]["vitkit/vitkit:bf16"], 2),
            "unit": "x",
            "headline": "CPU bf16 training" if args.compile == "on" else "",
        },
        {
            "id": f"train-fp32-mfu-{tag}",
            "claim": "fp32 MFU of the measured fp32 matmul peak",
            "figure": f"{100 * fp32['mfu']:.1f}",
            "unit": "%",
            "against": f"fp32 peak {peaks['fp32'] * 1e3:.0f} GFLOP/s",
        },
        {
            "id": f"train-bf16-mfu-{tag}",
            "claim": "bf16 MFU of the measured bf16 matmul peak",
            "figure": f"{100 * bf16['mfu']:.1f}",
            "unit": "%",
            "against": f"bf16 peak {peaks['bf16'] * 1e3:.0f} GFLOP/s",
        },
    ]
    return [{**base, **row} for row in rows]


def _losses(run: Path) -> tuple[list[tuple[int, float]], float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [(r["step"], r["loss"]) for r in rows if r["kind"] == "train"]
    top1 = [r["top1"] for r in rows if r["kind"] == "val"][-1]
    return train, top1


def curve(args) -> list[dict]:
    from vitkit.train import train
    from vitkit.train.config import load_run_config
    from vitkit.train.precision import measure_speedup

    overrides = [
        f"train.steps={args.steps}",
        f"data.train_images={args.images}",
        "train.warmup_steps=20",
        "train.log_every=10",
        f"train.eval_every={args.steps}",
        f"train.checkpoint_every={args.steps}",
        "train.batch_size=128",
        "train.progress=false",
        f"train.threads={args.threads or 0}",
    ]
    before = _load()
    curves, top1 = {}, {}
    with tempfile.TemporaryDirectory(prefix="vitkit-precision-") as folder:
        for name in ("fp32", "bf16"):
            config = load_run_config("configs/fashion_mnist.yaml", overrides + [f"train.precision={name}"])
            train(config, Path(folder) / name)
            curves[name], top1[name] = _losses(Path(folder) / name)
        from vitkit.models import build_model

        demo = build_model(config.model_config(num_classes=10))
        auto = measure_speedup(demo, 32)
    diffs = [abs(a - b) / a for (_, a), (_, b) in zip(curves["fp32"], curves["bf16"])]
    print(json.dumps({"curves": curves, "top1": top1, "auto_speedup": auto}), flush=True)
    setting = (
        f"{args.images} training images, {args.steps} steps of 128, seed 0; {before} before, {_load()} after; "
        f"{args.note}".rstrip("; ")
    )
    base = {"benchmark": "CPU training, bf16 against fp32", "model": "demo (configs/fashion_mnist.yaml)"}
    base["setting"] = setting
    last = {name: statistics.mean(loss for _, loss in c[-3:]) for name, c in curves.items()}
    rows = [
        {
            "id": "curve-loss-gap",
            "claim": "bf16 train loss against fp32's, largest relative gap over the logged windows",
            "figure": f"{100 * max(diffs):.1f}",
            "unit": "%",
            "against": "loss curves: "
            + "; ".join(f"{n} " + " ".join(f"{v:.3f}" for _, v in c) for n, c in curves.items()),
        },
        {
            "id": "curve-final-loss",
            "claim": "train loss, mean of the last 3 logged windows: bf16",
            "figure": f"{last['bf16']:.4f}",
            "unit": "loss",
            "against": f"fp32 {last['fp32']:.4f}",
        },
        {
            "id": "curve-val-top1",
            "claim": "validation top-1 at the end: bf16",
            "figure": f"{100 * top1['bf16']:.2f}",
            "unit": "%",
            "against": f"fp32 {100 * top1['fp32']:.2f}%",
        },
        {
            "id": "auto-demo-speedup",
            "claim": "what train.precision=auto measures for the demo model: bf16 speed over fp32 (forward + backward, 32 images)",
            "figure": fmt(auto, 2),
            "unit": "x",
            "against": "auto skips models under 0.1 GFLOPs/image (the demo: 0.015) and trains them in fp32",
        },
    ]
    return [{**base, **row} for row in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["speed", "curve"])
    parser.add_argument("--compile", choices=["on", "off"], default="on")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--images", type=int, default=6000)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--note", default="", help="e.g. how loaded the machine was")
    parser.add_argument("--results", action="store_true", help="write benchmarks/results/cpu_train_precision.csv")
    args = parser.parse_args()
    rows = speed(args) if args.part == "speed" else curve(args)
    if args.results:
        write_rows("cpu_train_precision", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
