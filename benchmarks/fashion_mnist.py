"""Fashion-MNIST accuracy and wall time of the demo recipe.

    PYTHONPATH=src python benchmarks/fashion_mnist.py [--config configs/fashion_mnist.yaml] [--out DIR] [--results] [KEY=VALUE ...]

Runs exactly what a user runs: `vitkit train --config CONFIG --out DIR`, then
`vitkit eval DIR --split test --json`, and records test top-1, training wall time, images/s, the
machine and how loaded it was (the mean 1-minute load average during training; the CPU may be
shared with other jobs). Target on a 2-core CPU: >= 90% test top-1 within 10 minutes of training.

Prints one JSON line. With --results it also writes the rows demo-test-top1-SLUG and demo-train-time-SLUG of
benchmarks/results/demo.csv (benchmarks/rows.py; SLUG names the machine kind, e.g. xeon, epyc); then run
`python benchmarks/render.py`. Off by default so a quick run doesn't overwrite published figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def vitkit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vitkit", *args], capture_output=True, text=True, cwd=ROOT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/fashion_mnist.yaml")
    parser.add_argument("--out", default=None, help="run directory (default: runs/bench-<time>)")
    parser.add_argument(
        "--results", action="store_true", help="write the figures to benchmarks/results/demo.csv (see rows.py)"
    )
    parser.add_argument("--note", default="", help="free text for the rows' setting column")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    out = args.out or f"runs/bench-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"

    loads: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(5.0):
            loads.append(os.getloadavg()[0])

    threading.Thread(target=sample, daemon=True).start()
    start = time.time()
    trained = vitkit("train", "--config", args.config, "--out", out, "--no-progress", *args.overrides)
    done.set()
    if trained.returncode != 0:
        print(trained.stdout, trained.stderr, file=sys.stderr)
        return 1
    evaluated = vitkit("eval", out, "--split", "test", "--json", "--threads", "1")
    if evaluated.returncode != 0:
        print(evaluated.stderr, file=sys.stderr)
        return 1
    summary = json.loads((ROOT / out / "summary.json").read_text())
    result = json.loads(evaluated.stdout.strip().splitlines()[-1])
    import torch

    row = {
        "date": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        "config": args.config + ("" if not args.overrides else " " + " ".join(args.overrides)),
        "test_top1": result["top1"],
        "test_top5": result["top5"],
        "train_wall_s": summary["wall_time_s"],
        "process_wall_s": time.time() - start,
        "img_s": summary["img_s"],
        "steps": summary["steps"],
        "threads": summary["threads"],
        "load_mean": sum(loads) / max(len(loads), 1),
        "machine": f"{cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__}",
    }
    print(json.dumps(row))
    if args.results:
        from rows import write_rows

        model = args.config
        setting = f"{row['steps']} steps, {row['threads']} threads, load {row['load_mean']:.1f}"
        setting += f"; {args.note}" if args.note else ""
        common = {"benchmark": "Fashion-MNIST demo (`make demo`)", "model": model, "setting": setting}
        if args.overrides:
            common["model"] += " with " + " ".join(args.overrides)
        write_rows(
            "demo",
            [
                {
                    **common,
                    "id": "demo-test-top1",
                    "claim": "test top-1 on the 10,000 test images",
                    "figure": f"{row['test_top1']:.4f}",
                    "unit": "top-1",
                },
                {
                    **common,
                    "id": "demo-train-time",
                    "claim": "training wall time (summary.json)",
                    "figure": f"{row['train_wall_s']:.0f}",
                    "unit": "s",
                    "setting": f"{setting}; {row['img_s']:,.0f} img/s",
                },
            ],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
