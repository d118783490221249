"""How long opening tar shards takes: vitkit's header reader against the standard library's tarfile.

    python benchmarks/tar_index.py --results                                        # 20,000 samples, 5 rounds
    python benchmarks/tar_index.py --samples 200 --rounds 1 --results-dir /tmp/smoke   # a smoke run

Writes one shard of N samples (a 2 kB stand-in image + a .cls label each, as `vitkit data --to-shards` writes
them) to a temporary folder, then lists it both ways, interleaved round by round, and prints microseconds per
sample and the median of per-round ratios. Opening a dataset lists every shard once per process (per rank).

--results writes the row tar-index-SLUG (SLUG: the machine kind) of benchmarks/results/input_pipeline.csv through
benchmarks/rows.py; --results-dir DIR writes DIR/input_pipeline.csv instead. Then run `python benchmarks/render.py`.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tarfile
import tempfile
import time
from pathlib import Path

from rows import add_results_arguments, write_asked_rows

from vitkit.data.sources.tar import _tar_files, _tarfile_members


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=5)
    add_results_arguments(p, "input_pipeline")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "shard-000000.tar"
        with tarfile.open(path, "w") as tar:
            for i in range(args.samples):
                for ext, payload in ((".jpg", os.urandom(2000)), (".cls", str(i % 10).encode())):
                    info = tarfile.TarInfo(f"{i:09d}{ext}")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))

        def headers():
            with open(path, "rb") as f:
                return [m[:3] for m in _tar_files(f, path)]

        def standard():
            return [m[:3] for m in _tarfile_members(path)]

        assert headers() == standard()
        times = {"tarfile": [], "vitkit": []}
        for _ in range(args.rounds):
            for name, fn in (("tarfile", standard), ("vitkit", headers)):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    per_sample = {name: 1e6 * statistics.median(ts) / args.samples for name, ts in times.items()}
    for name, us in per_sample.items():
        print(f"{name}: {us:.1f} us per sample ({args.samples} samples, 2 members each)")
    ratio = statistics.median(a / b for a, b in zip(times["tarfile"], times["vitkit"]))
    print(f"tarfile / vitkit: {ratio:.2f}x (median of {args.rounds} interleaved rounds)")
    row = {
        "id": "tar-index",
        "benchmark": "Input pipeline",
        "claim": "opening tar shards: vitkit's header reader over tarfile "
        f"({per_sample['vitkit']:.1f} vs {per_sample['tarfile']:.1f} us a sample)",
        "figure": f"{ratio:.1f}",
        "unit": "x",
        "against": "Python's tarfile",
        "model": f"one shard of {args.samples:,} samples",
        "setting": f"{args.rounds} interleaved rounds",
    }
    write_asked_rows(args, "input_pipeline", [row])


if __name__ == "__main__":
    main()
