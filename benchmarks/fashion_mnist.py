"""Fashion-MNIST accuracy and wall time of the demo recipe, appended to benchmarks/RESULTS.md.

    PYTHONPATH=src python benchmarks/fashion_mnist.py [--config configs/fashion_mnist.yaml] [--out DIR] [KEY=VALUE ...]

Runs exactly what a user runs: `vitkit train --config CONFIG --out DIR`, then
`vitkit eval DIR --split test --json`, and records test top-1, training wall time, images/s, the
machine and how loaded it was (the mean 1-minute load average during training; the CPU may be
shared with other jobs). Target on a 2-core CPU: >= 90% test top-1 within 10 minutes of training.
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
    parser.add_argument("--results", default=str(ROOT / "benchmarks" / "RESULTS.md"))
    parser.add_argument("--note", default="", help="free text for the table row")
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
    line = (
        f"| {row['date']} | `{row['config']}` | {row['test_top1']:.4f} | {row['train_wall_s']:.0f} | {row['img_s']:.0f} "
        f"| {row['steps']} | {row['threads']} | {row['load_mean']:.1f} | {row['machine']} | {args.note} |\n"
    )
    results = Path(args.results)
    text = results.read_text() if results.exists() else "# Benchmark results\n"
    header = "## Fashion-MNIST demo recipe (`benchmarks/fashion_mnist.py`)"
    if header not in text:
        text += (
            f"\n{header}\n\n"
            "`vitkit train --config configs/fashion_mnist.yaml --out DIR` then `vitkit eval DIR --split test --json`.\n"
            "Target: >= 90% test top-1 within 10 minutes of training on the 2-core CPU. train s = training wall time\n"
            "(summary.json, data loading and checkpoints included); load = mean 1-minute load average while training\n"
            "(2.0 = both cores busy; above that the CPU was shared with other jobs).\n\n"
            "| date | config | test top-1 | train s | img/s | steps | threads | load | machine | note |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n"
        )
    from vitkit.files import atomic_path

    head, sep, rest = text.partition(header)
    table_end = rest.find("\n\n", rest.find("|---|"))
    rest = rest + line if table_end < 0 else rest[: table_end + 1] + line + rest[table_end + 1 :]
    with atomic_path(results) as tmp:
        tmp.write_text(head + sep + rest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
