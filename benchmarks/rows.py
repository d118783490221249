"""Benchmark scripts write their figures as rows of benchmarks/results/NAME.csv through `write_rows`.

    from rows import write_rows  # benchmarks/ is on sys.path when a script in it runs
    write_rows("demo", [{"id": "demo-test-top1", "benchmark": "...", "claim": "...", "figure": "0.9010", "unit": "top-1"}])

A row is a dict with at least id, benchmark, claim, figure and unit (against, model, setting and headline are
optional); machine, software, date and command are filled from the running process unless the row gives them.
The id gets the machine's short slug (`machine_slug()`: xeon, epyc, xeon16, h100, ...) appended unless it already
ends with it, so two machines' rows sit side by side; `slug=False` keeps the ids as given, for a figure that is the
same on any machine (a count, not a timing). A row whose id is already in the file replaces it in place
(the newest figure wins; older ones are in git history); every other row and the column order stay.
Standard library only; torch is imported, when installed, for its version and the GPU's name.
"""

from __future__ import annotations

import csv
import os
import platform
import re
import shlex
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
NEEDED = ("id", "benchmark", "claim", "figure", "unit")
# Packages a figure may depend on, named in the software column when installed.
PACKAGES = (
    "torch",
    "torchvision",
    "timm",
    "triton",
    "torchao",
    "transformers",
    "openvino",
    "onnxruntime",
    "nncf",
    "jax",
    "flax",
    "Pillow",
    "simplejpeg",
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from render import COLUMNS  # noqa: E402


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo, else what platform knows."""
    for line in _cpuinfo().splitlines():
        if line.startswith("model name"):
            return " ".join(line.split(":", 1)[1].split())
    return platform.processor() or platform.machine() or "unknown CPU"


def cores() -> int:
    """CPU cores this process may run on (its affinity), not the machine's total."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_flags() -> list[str]:
    """AMX and AVX512_BF16, where the CPU has them (the flags that change which kernels run)."""
    flags: set[str] = set()
    for line in _cpuinfo().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    found = []
    if any(f.startswith("amx") for f in flags):
        found.append("AMX")
    if "avx512_bf16" in flags:
        found.append("AVX512_BF16")
    return found


def gpu_name() -> str | None:
    """The first CUDA device's name, when torch is installed and sees one."""
    try:
        import torch
    except ImportError:
        return None
    try:
        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except Exception:  # a broken driver is no GPU for this purpose
        return None
    return None


def machine() -> str:
    """E.g. 'Intel(R) Xeon(R) Platinum 8480+ (AMX, AVX512_BF16), 2 cores' or 'NVIDIA H100 80GB HBM3, 16 CPU cores'."""
    gpu = gpu_name()
    if gpu:
        return f"{gpu}, {cores()} CPU cores ({cpu_name()})"
    flags = ", ".join(cpu_flags())
    return f"{cpu_name()}{f' ({flags})' if flags else ''}, {cores()} cores"


def machine_slug() -> str:
    """A short name for the kind of machine, used as the ids' suffix.

    A GPU's model (h100, h200, a100, ...); else the CPU's family (xeon, epyc, else the model name's first word),
    with the core count appended unless it is 2 (the 2-core machines the first rows came from: xeon, epyc; a
    16-core Xeon is xeon16).
    """
    gpu = gpu_name()
    if gpu:
        found = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", gpu)
        return (found.group(1) if found else re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")).lower()
    name = cpu_name().lower()
    family = next((f for f in ("xeon", "epyc", "ryzen", "core", "graviton", "neoverse") if f in name), None)
    if family is None:
        words = re.findall(r"[a-z0-9]+", re.sub(r"\((r|tm)\)", " ", name))
        family = words[0] if words else "cpu"
    n = cores()
    return family if n == 2 else f"{family}{n}"


def software(packages: tuple[str, ...] = PACKAGES) -> str:
    """'python 3.12.3, torch 2.13.0+cpu, ...': Python and every installed package of `packages`."""
    parts = [f"python {platform.python_version()}"]
    for name in packages:
        try:
            parts.append(f"{name.lower()} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    if not any(p.startswith("torch ") for p in parts):
        try:
            import torch

            parts.append(f"torch {torch.__version__}")
        except ImportError:
            pass
    return ", ".join(parts)


def today() -> str:
    """The UTC date and minute, as the rows write it: '2026-11-22 13:07 UTC'."""
    return f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"


def command(argv: list[str] | None = None) -> str:
    """The command line that ran, paths under the repository root written relative to it."""
    argv = list(sys.argv if argv is None else argv)
    out = []
    for arg in argv:
        path = Path(arg)
        if path.is_absolute():
            try:
                arg = str(path.resolve().relative_to(ROOT))
            except ValueError:
                pass
        out.append(arg)
    head = "python" if out and Path(sys.executable).name.startswith("python") else None
    return shlex.join(([head] if head else []) + out)


def with_slug(row_id: str, slug: str) -> str:
    return row_id if row_id.endswith(f"-{slug}") or row_id == slug else f"{row_id}-{slug}"


def write_rows(name: str, rows: list[dict], results_dir: Path | None = None, *, slug: bool = True) -> Path:
    """Upsert `rows` into RESULTS_DIR/NAME.csv (RESULTS_DIR: `results_dir` where given); returns the file's path.

    Each row's id gets the machine slug as its suffix (unless it has it, or `slug` is False); machine, software,
    date and command are filled unless given. A row with an id already in the file replaces that row where it
    stands; new rows go at the end; other rows and the columns (render.COLUMNS) stay.
    """
    folder = Path(results_dir) if results_dir is not None else RESULTS_DIR
    path = folder / f"{name}.csv"
    suffix, filled = machine_slug() if slug else None, None
    incoming = []
    for row in rows:
        missing = [k for k in NEEDED if not str(row.get(k, "")).strip()]
        if missing:
            raise ValueError(f"row {row.get('id', '?')!r}: empty {', '.join(missing)}")
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise ValueError(f"row {row['id']!r}: no such column {', '.join(sorted(unknown))}")
        if filled is None:
            filled = {"machine": machine(), "software": software(), "date": today(), "command": command()}
        new = {c: "" for c in COLUMNS}
        new.update({k: ("" if v is None else str(v)) for k, v in row.items()})
        new["id"] = with_slug(new["id"], suffix) if suffix else new["id"]
        for k, v in filled.items():
            new[k] = new[k] or v
        incoming.append(new)
    existing: list[dict[str, str]] = []
    columns = list(COLUMNS)
    if path.exists():
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            columns = list(reader.fieldnames or COLUMNS)
            existing = list(reader)
        columns += [c for c in COLUMNS if c not in columns]
    position = {r["id"]: i for i, r in enumerate(existing)}
    for new in incoming:
        if new["id"] in position:
            existing[position[new["id"]]] = new
        else:
            position[new["id"]] = len(existing)
            existing.append(new)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        for r in existing:
            writer.writerow({c: r.get(c) or "" for c in columns})
    os.replace(tmp, path)
    print(f"wrote {len(incoming)} row(s) to {path}", file=sys.stderr)
    return path


def fmt(x: float, digits: int = 4) -> str:
    """A figure as the rows write it: fixed digits, no exponent unless tiny."""
    if x != 0 and abs(x) < 10 ** -(digits - 1):
        return f"{x:.2e}"
    return f"{x:.{digits}f}"


def add_results_arguments(parser, name: str) -> None:
    """--results (write benchmarks/results/NAME.csv) and --results-dir DIR (write DIR/NAME.csv instead)."""
    parser.add_argument("--results", action="store_true", help=f"write the rows of benchmarks/results/{name}.csv")
    parser.add_argument("--results-dir", type=Path, metavar="DIR", help=f"write them to DIR/{name}.csv instead")


def write_asked_rows(args, name: str, rows: list[dict], *, slug: bool = True) -> Path | None:
    """`write_rows` where `args` (of `add_results_arguments`) asked for it; None where it did not."""
    if not (args.results or args.results_dir):
        return None
    return write_rows(name, rows, args.results_dir, slug=slug)
