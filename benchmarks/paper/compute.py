"""Compute (paper Fig. 5): three sizes of each family, test accuracy against counted training FLOPs.

    python benchmarks/paper/compute.py --out runs/paper/compute                # CPU default: 500 steps of 256 a run, ~40 min (RESULTS.md)
    python benchmarks/paper/compute.py --out DIR --steps 5000 --device cuda
    python benchmarks/paper/compute.py --out DIR --data ~/photos --test-split val             # your own images

Every model trains on the whole training split for the same number of steps; its training compute is the
FLOPs of one forward and backward pass (counted on the meta device: matmuls, convolutions, attention; a
multiply-add is 2) times the images seen. Writes compute.json, compute.md and compute.png (accuracy
against training FLOPs, log scale, one line per family). The paper's claim: ViT needs 2-4x less compute
than BiT ResNets for the same transfer accuracy; hybrids beat ViT at small compute, the gap closes with size.
--results also writes the row paper-compute-best-SLUG of benchmarks/results/paper.csv (benchmarks/rows.py; SLUG:
the machine kind); off by default so a quick run doesn't overwrite published figures.
"""

from __future__ import annotations

import sys

from common import (
    FAMILIES,
    chosen,
    defaults,
    families,
    header,
    lines,
    parser,
    pyplot,
    report,
    run_one,
    save_figure,
    write_results,
)


def sizes(image_size: int, channels: int) -> dict[str, list[tuple[str, dict]]]:
    """(label, model section) per family: small, the shared size of data_size.py, large."""
    f = families(image_size, channels)
    vit, bit, hybrid = f["ViT"], f["BiT"], f["hybrid"]
    return {
        "ViT": [
            ("w64 d4", {**vit, "width": 64, "mlp_dim": 128, "depth": 4}),
            ("w96 d6", vit),
            ("w128 d8", {**vit, "width": 128, "mlp_dim": 256, "depth": 8}),
        ],
        "BiT": [
            ("R11x1", bit),
            ("R20x1", {**bit, "layers": [2, 2, 2]}),
            ("R20x2", {**bit, "layers": [2, 2, 2], "width_factor": 2}),
        ],
        "hybrid": [("d1", {**hybrid, "depth": 1}), ("d2", hybrid), ("d4", {**hybrid, "depth": 4})],
    }


FULL = {"steps": 500, "batch_size": 256, "test_images": None}
CI = {"steps": 2, "batch_size": 16, "test_images": 40}


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--families", default="ViT,BiT,hybrid")
    p.add_argument("--sizes-per-family", type=int, default=3, help="the first N sizes of each family (CI: fewer)")
    args = p.parse_args()
    defaults(args, full=FULL, ci=CI)
    names = chosen(args.families, FAMILIES)
    models = sizes(args.image_size, args.channels)
    rows = []
    for family in names:
        for label, model in models[family][: args.sizes_per_family]:
            name = f"{family}_{label.replace(' ', '_')}"
            rows.append({"family": family, "size": label, **run_one(name, model, args)})
    result = {"header": header(args, " ".join(["python", *sys.argv])), "rows": rows}
    table = (
        ["family", "size", "params", "training FLOPs", f"{args.test_split} top-1"],
        [[r["family"], r["size"], r["params"], f"{r['train_flops']:.3g}", r["test_top1"]] for r in rows],
    )
    report(
        args.out,
        "compute",
        result,
        table,
        "One run (seed 0) per size. Paper (Fig. 5): ViT reaches an accuracy with 2-4x less compute than BiT; "
        "hybrids lead at small compute.",
    )
    plot(rows, names, args.out / "compute.png", result["header"])
    best = {f: max((r for r in rows if r["family"] == f), key=lambda r: r["test_top1"]) for f in names}
    write_results(
        args,
        [
            {
                "id": "paper-compute-best",
                "claim": f"{args.test_split} top-1, best "
                + " / ".join(f"{f} {r['size']} ({r['train_flops']:.2e} FLOPs)" for f, r in best.items()),
                "figure": " / ".join(f"{r['test_top1']:.4f}" for r in best.values()),
                "unit": "top-1",
                "model": ", ".join(names),
            }
        ],
    )
    return 0


def plot(rows, names, path, h) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ordered = {f: sorted((r for r in rows if r["family"] == f), key=lambda r: r["train_flops"]) for f in names}
    lines(
        ax,
        {f: ([r["train_flops"] for r in mine], [r["test_top1"] for r in mine]) for f, mine in ordered.items()},
        xlabel="training FLOPs (counted)",
        ylabel=f"{h['test_split']} top-1",
        title="Accuracy against compute (Fig. 5)",
    )
    for r in rows:
        ax.annotate(
            r["size"], (r["train_flops"], r["test_top1"]), fontsize=7, xytext=(3, 3), textcoords="offset points"
        )
    save_figure(fig, path, h, "per model")


if __name__ == "__main__":
    sys.exit(main())
