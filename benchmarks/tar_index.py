"""How long opening tar shards takes: vitkit's header reader against the standard library's tarfile.

    python benchmarks/tar_index.py [--samples 20000] [--rounds 5]

Writes one shard of N samples (a 2 kB stand-in image + a .cls label each, as `vitkit data --to-shards` writes
them) to a temporary folder, then lists it both ways, interleaved round by round, and prints microseconds per
sample and the median of per-round ratios. Opening a dataset lists every shard once per process (per rank).
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

from vitkit.data.sources.tar import _tar_files, _tarfile_members


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=5)
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
    for name, ts in times.items():
        print(
            f"{name}: {1e6 * statistics.median(ts) / args.samples:.1f} us per sample ({args.samples} samples, 2 members each)"
        )
    print(
        f"tarfile / vitkit: {statistics.median(a / b for a, b in zip(times['tarfile'], times['vitkit'])):.2f}x "
        f"(median of {args.rounds} interleaved rounds)"
    )


if __name__ == "__main__":
    main()
