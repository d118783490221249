"""Fashion-MNIST test top-1 and training time of the CPU demos, run exactly as a user runs them.

    PYTHONPATH=src python benchmarks/fashion_mnist.py --results                     # the plain demo (make demo)
    PYTHONPATH=src python benchmarks/fashion_mnist.py --demo hybrid --results       # the hybrid demo
    PYTHONPATH=src python benchmarks/fashion_mnist.py --out DIR train.seed=1       # any overrides; nothing written

Runs `vitkit train --config CONFIG --out DIR`, then `vitkit eval DIR --split test --json`, and prints one JSON line:
test top-1, training time (summary.json), images/s, threads, and how loaded the machine was (the mean 1-minute load
average during training: the CPU may be shared with other jobs). The demos' target on a 2-core CPU: >= 91% (plain)
and >= 92% (hybrid) test top-1 within 10 minutes of training.

--results writes the row demo-test-top1-SLUG of benchmarks/results/demo.csv (hybrid-demo-test-top1-SLUG of
hybrid_demo.csv; SLUG names the machine kind: xeon, epyc) as "top-1 / seconds", keeping the row's headline and
against columns where it has them (--against replaces the latter); --results-dir DIR writes under DIR instead. Then
run `python benchmarks/render.py`. Overrides are refused with --results: a row is of the config as it ships.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path

import yaml
from rows import RESULTS_DIR, add_results_arguments, machine_slug, with_slug, write_asked_rows

ROOT = Path(__file__).resolve().parents[1]

DEMOS = {  # --demo: (config, results file, row id, benchmark)
    "plain": ("configs/fashion_mnist.yaml", "demo", "demo-test-top1", "Fashion-MNIST demo (`make demo`)"),
    "hybrid": ("configs/fashion_mnist_hybrid.yaml", "hybrid_demo", "hybrid-demo-test-top1", "Hybrid demo"),
}


def vitkit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vitkit", *args], capture_output=True, text=True, cwd=ROOT)


def trained(config: str, out: str, overrides: list[str]) -> tuple[dict, dict, float] | None:
    """(summary.json, eval's JSON, the mean load average while training) of one run; None (said) where it failed."""
    loads: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(5.0):
            loads.append(os.getloadavg()[0])

    threading.Thread(target=sample, daemon=True).start()
    run = vitkit("train", "--config", config, "--out", out, "--no-progress", *overrides)
    done.set()
    if run.returncode != 0:
        print(run.stdout, run.stderr, file=sys.stderr)
        return None
    scored = vitkit("eval", out, "--split", "test", "--json", "--threads", "1")
    if scored.returncode != 0:
        print(scored.stderr, file=sys.stderr)
        return None
    summary = json.loads((ROOT / out / "summary.json").read_text())
    summary["batch_size"] = yaml.safe_load((ROOT / out / "run.yaml").read_text())["train"]["batch_size"]
    return summary, json.loads(scored.stdout.strip().splitlines()[-1]), sum(loads) / max(len(loads), 1)


def kept(results_dir: Path | None, name: str, row_id: str) -> dict:
    """The headline and against columns of the row `row_id` (with this machine's slug) where the file has it."""
    path = (results_dir or RESULTS_DIR) / f"{name}.csv"
    if not path.exists():
        return {}
    with path.open(newline="", encoding="utf-8") as f:
        row = next((r for r in csv.DictReader(f) if r["id"] == with_slug(row_id, machine_slug())), {})
    return {k: row[k] for k in ("headline", "against") if row.get(k)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", choices=sorted(DEMOS), default="plain")
    parser.add_argument("--out", default=None, help="run directory (default: runs/bench-<time>)")
    parser.add_argument("--against", default=None, help="the row's against column (default: the row's own)")
    parser.add_argument("--note", default="", help="free text appended to the row's setting column")
    add_results_arguments(parser, "demo")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args()
    config, name, row_id, benchmark = DEMOS[args.demo]
    if args.overrides and (args.results or args.results_dir):
        parser.error("--results writes the config as it ships: drop the overrides, or --results")
    out = args.out or f"runs/bench-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
    got = trained(config, out, args.overrides)
    if got is None:
        return 1
    summary, result, load = got
    row = {
        "config": " ".join([config, *args.overrides]),
        "test_top1": result["top1"],
        "train_wall_s": summary["wall_time_s"],
        "img_s": summary["img_s"],
        "steps": summary["steps"],
        "threads": summary["threads"],
        "load_mean": load,
    }
    print(json.dumps(row))
    setting = (
        f"{row['steps']:,} steps x {summary['batch_size']}, {row['threads']} threads, {row['img_s']:,.0f} img/s, "
        f"load {load:.1f}"
    )
    write_asked_rows(
        args,
        name,
        [
            {
                "id": row_id,
                "benchmark": benchmark,
                "claim": "test top-1 on the 10,000 test images / training time (summary.json)",
                "figure": f"{row['test_top1']:.4f} / {row['train_wall_s']:.0f}",
                "unit": "top-1 / s",
                "model": config,
                "setting": setting + (f"; {args.note}" if args.note else ""),
                **kept(args.results_dir, name, row_id),
                **({"against": args.against} if args.against else {}),
            }
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
