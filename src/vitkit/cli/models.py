"""`vitkit models`: the table of named variants with their size and cost."""

from __future__ import annotations

import argparse
import json

from vitkit.models import MODELS, get_config
from vitkit.models.summary import describe

COLUMNS = ("name", "layers", "width", "mlp", "heads", "patch", "resolution", "backbone", "params", "gflops")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list the model variants (Table 1 and hybrids) with parameters and GFLOPs")
    p.add_argument(
        "names", nargs="*", help="only these models (any name create_model accepts, e.g. vit_s8 or ViT-B/16)"
    )
    p.add_argument("--num-classes", type=int, default=None, help="count parameters with this many classes")
    p.add_argument("--image-size", type=int, default=None, help="count at this resolution (square)")
    p.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    overrides = {}
    if args.num_classes is not None:
        overrides["num_classes"] = args.num_classes
    if args.image_size is not None:
        overrides["image_size"] = args.image_size
    rows = [{"name": name, **describe(get_config(name, **overrides))} for name in (args.names or MODELS)]
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    cells = [[_fmt(row[c]) for c in COLUMNS] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(COLUMNS)]
    print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(COLUMNS, widths))))
    for r in cells:
        print("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))))
    return 0


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2f}" if value >= 0.01 else f"{value:.4f}"
    if isinstance(value, int) and value >= 10_000:
        return f"{value:,}"
    return str(value)
