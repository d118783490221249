"""bf16 against fp32 training on the CPU: step time, speed-up and MFU, and the loss curves of a short Fashion-MNIST run.

    PYTHONPATH=src python benchmarks/cpu_train_precision.py speed [--compile on|off] [--rounds 3] [--results]
    PYTHONPATH=src python benchmarks/cpu_train_precision.py speed --report R.json --command "vitkit benchmark ..."
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
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rows import fmt, write_rows


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def speed(args) -> list[dict]:
    """Rows from a `vitkit benchmark --mode train --precision fp32 --compare vitkit:bf16` report: run here, or read
    from the --report JSON that command wrote (its command line in --command)."""
    from vitkit.inference import benchmark
    from vitkit.models import get_config

    before = _load()
    if args.report:
        report = json.loads(Path(args.report).read_text())
    else:
        benchmark.set_threads(args.threads)
        config = get_config("vit_s16", image_size=96, num_classes=10)
        setup = benchmark.Setup(
            config=config, batch_size=32, mode="train", compile=args.compile == "on", rounds=args.rounds, warmup=1
        )
        report = benchmark.run(setup, ["vitkit:bf16"])
    print(benchmark.format_table(report), flush=True)
    fp32, bf16 = report["results"]["vitkit"], report["results"]["vitkit:bf16"]
    assert fp32["matmul_dtypes"] == ["fp32"] and bf16["matmul_dtypes"] == ["bf16"], "a candidate ran another dtype"
    peaks = report["peak_tflops_by_precision"]
    tag = "compiled" if report["compile"] else "eager"
    load = "" if args.report else f"; {before}"  # a saved report's load is the --note's to say
    setting = f"batch 32, 96 px, {tag}, {report['device']}, {report['rounds']} rounds{load}; {args.note}"
    base = {"benchmark": "CPU training, bf16 against fp32", "model": "vit_s16, random weights", "setting": setting}
    if args.command:
        base["command"] = args.command
    rows = [
        {
            "id": f"train-bf16-speedup-{tag}",
            "claim": f"bf16 autocast speed over fp32, {tag} (median of per-round ratios)",
            "figure": fmt(1 / report["speedup"]["vitkit/vitkit:bf16"], 2),
            "unit": "x",
            "against": f"fp32 {fp32['ms_per_batch']:.0f} ms, bf16 {bf16['ms_per_batch']:.0f} ms a step",
        },
        {
            "id": f"train-mfu-{tag}",
            "claim": f"MFU, {tag}, each of its precision's measured matmul peak: fp32",
            "figure": f"{100 * fp32['mfu']:.1f}",
            "unit": "%",
            "against": f"bf16 {100 * bf16['mfu']:.1f}%; peaks fp32 {peaks['fp32'] * 1e3:.0f}, "
            f"bf16 {peaks['bf16'] * 1e3:.0f} GFLOP/s",
        },
    ]
    return [{**base, **row} for row in rows]


def _losses(run: Path) -> tuple[list[tuple[int, float]], float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [(r["step"], r["loss"]) for r in rows if r["kind"] == "train"]
    top1 = [r["val_top1"] for r in rows if r["kind"] == "val"][-1]
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
    every = max(1, len(curves["fp32"]) // 5)
    points = {n: " ".join(f"{v:.2f}" for _, v in c[every - 1 :: every]) for n, c in curves.items()}
    rows = [
        {
            "id": "curve-loss-gap",
            "claim": "bf16 train loss against fp32's: largest relative gap over the logged windows",
            "figure": f"{100 * max(diffs):.1f}",
            "unit": "%",
            "against": f"loss every {10 * every} steps: fp32 {points['fp32']}; bf16 {points['bf16']}; val top-1 "
            f"fp32 {100 * top1['fp32']:.1f}%, bf16 {100 * top1['bf16']:.1f}%",
        },
        {
            "id": "auto-demo-speedup",
            "claim": "bf16 speed over fp32 for the demo model (forward + backward, 32 images)",
            "figure": fmt(auto, 2),
            "unit": "x",
            "against": "train.precision=auto keeps models under 0.1 GFLOPs/image (the demo: 0.015) in fp32",
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
    parser.add_argument("--report", default=None, help="speed: rows from this `vitkit benchmark --json` report")
    parser.add_argument("--command", default=None, help="speed --report: the command that wrote it")
    parser.add_argument("--results", action="store_true", help="write benchmarks/results/cpu_train_precision.csv")
    args = parser.parse_args()
    rows = speed(args) if args.part == "speed" else curve(args)
    if args.results:
        write_rows("cpu_train_precision", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
