"""Training threads on a shared CPU: vitkit's default thread count against train.threads=1, with and without one
busy competing process on the same machine.

    PYTHONPATH=src python benchmarks/threads.py --results          # the measurement: about 16 minutes on 2 cores
    PYTHONPATH=src python benchmarks/threads.py --rounds 1 --steps 10 --results-dir /tmp/threads   # a smoke run

Run it on a quiet machine (nothing else busy: the competing process is the benchmark's own). Each run is a real
`vitkit train` process (a 96-wide, 6-deep ViT at 32 px on synthetic images, batch 64, --steps steps); its training
time is the inverse of summary.json's img_s (training steps alone: the logged windows, without start-up, data
preparation, the timing probe or evaluation). The candidates, in turns within each round (the order rotates by round):

  default      no train.threads: the CPUs this process can get less those busy at start; OpenMP threads that
               sleep when idle (OMP_WAIT_POLICY=PASSIVE, set by the CLI) where other processes run at start
  threads=1    train.threads=1
  spinning     the behaviour before: train.threads=<all cores> and libgomp's own spinning (GOMP_SPINCOUNT=300000,
               its default when no policy is set)

each alone, and each beside one busy process (a pure-Python spin loop, started before the run and stopped after
it). Reported: medians over rounds of the per-round ratios of each candidate's time to threads=1's under the same
load (below 1: faster than one thread). The acceptance: default <= 1.0 with one busy process on 2 cores.

--results writes the rows threads-*-SLUG of benchmarks/results/threads.csv through benchmarks/rows.py (SLUG: the
machine kind); --results-dir DIR writes them to DIR/threads.csv instead (a smoke run leaves the published figures
alone). Then run `python benchmarks/render.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rows import cores, write_rows

CANDIDATES = ("default", "threads=1", "spinning")
LOADS = ("idle", "busy")
SPIN = "while True:\n    pass\n"


def candidate_args(name: str) -> tuple[list[str], dict[str, str]]:
    """The overrides and environment of a candidate."""
    if name == "threads=1":
        return ["train.threads=1"], {}
    if name == "spinning":
        return [f"train.threads={cores()}"], {"GOMP_SPINCOUNT": "300000"}
    return [], {}


def train_once(name: str, steps: int, folder: Path) -> float:
    """Seconds per training image (1 / summary.json's img_s) of one `vitkit train` run of candidate `name`."""
    out = folder / f"run-{time.monotonic_ns()}"
    overrides, extra = candidate_args(name)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    command = [sys.executable, "-m", "vitkit", "train", "--out", str(out), "--no-progress"]
    command += [
        "data.name=synthetic",
        "data.synthetic_size=1024",
        "model.name=vit_mini4_32",
        "model.classifier=token",
        f"train.steps={steps}",
        "train.batch_size=64",
        f"train.eval_every={steps}",
        f"train.log_every={max(steps // 5, 1)}",
        f"train.checkpoint_every={steps}",
        *overrides,
    ]
    done = subprocess.run(command, env={**env, **extra}, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{name}: vitkit train failed:\n{done.stderr[-2000:]}")
    return 1.0 / float(json.loads((out / "summary.json").read_text())["img_s"])


def measure(rounds: int, steps: int) -> dict[tuple[str, str], list[float]]:
    """Per load and candidate, the seconds per training image of every round."""
    times: dict[tuple[str, str], list[float]] = {(load, name): [] for load in LOADS for name in CANDIDATES}
    with tempfile.TemporaryDirectory(prefix="vitkit-threads-") as tmp:
        for r in range(rounds):
            order = CANDIDATES[r % len(CANDIDATES) :] + CANDIDATES[: r % len(CANDIDATES)]
            for load in LOADS:
                for name in order:
                    spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if load == "busy" else None
                    try:
                        time.sleep(0.5 if spinner else 0)  # the competitor is running when the run starts
                        seconds = train_once(name, steps, Path(tmp))
                    finally:
                        if spinner is not None:
                            spinner.kill()
                            spinner.wait()
                    times[load, name].append(seconds)
                    print(f"round {r + 1}/{rounds} {load:<4} {name:<9} {1 / seconds:7.1f} img/s", flush=True)
    return times


def ratios(times: dict[tuple[str, str], list[float]]) -> dict[tuple[str, str], float]:
    """Median over rounds of each candidate's time over threads=1's under the same load."""
    return {
        (load, name): statistics.median(t / one for t, one in zip(times[load, name], times[load, "threads=1"]))
        for load in LOADS
        for name in CANDIDATES
        if name != "threads=1"
    }


def rows(found: dict[tuple[str, str], float], rounds: int, steps: int, load_at_start: str) -> list[dict]:
    setting = f"{steps} steps of 64 at 32 px, {rounds} rounds; /proc/loadavg at start {load_at_start}"
    claims = {
        "default": "default threads / train.threads=1, training time",
        "spinning": "the old default (all cores, spinning OpenMP threads) / train.threads=1, training time",
    }
    return [
        {
            "id": f"threads-{name}-{load}",
            "benchmark": "Training threads on a shared CPU",
            "claim": f"{claims[name]}, {'one busy competing process' if load == 'busy' else 'nothing else running'}",
            "figure": f"{ratio:.3f}",
            "unit": "x time (below 1: faster)",
            "against": "train.threads=1",
            "model": "ViT width 96, depth 6, patch 8 (vit_mini4_32)",
            "setting": setting,
        }
        for (load, name), ratio in found.items()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--results", action="store_true", help="write benchmarks/results/threads.csv")
    parser.add_argument("--results-dir", type=Path, help="write DIR/threads.csv instead")
    args = parser.parse_args()
    load_at_start = Path("/proc/loadavg").read_text().split()[:3]
    times = measure(args.rounds, args.steps)
    found = ratios(times)
    for (load, name), ratio in found.items():
        print(f"{load:<4} {name:<9} {ratio:.3f}x the time of train.threads=1")
    if args.results or args.results_dir:
        path = write_rows("threads", rows(found, args.rounds, args.steps, " ".join(load_at_start)), args.results_dir)
        print(f"rows: {path}")


if __name__ == "__main__":
    main()
