"""Position embeddings (paper App. D.4): the five variants of the demo ViT, same recipe, several seeds.

    python benchmarks/paper/pos_embed.py --out runs/paper/pos_embed            # CPU default: 500 steps of 256 a run, ~40 min (RESULTS.md)
    python benchmarks/paper/pos_embed.py --out DIR --seeds 5 --steps 4000 --device cuda
    python benchmarks/paper/pos_embed.py --out DIR --data ~/photos --test-split val           # your own images

Variants (model.pos_embed): none, learned (1D), learned_2d (row + column), relative (attention biases per
2D offset), sincos2d. Each seed changes the initial weights and the data order. Writes pos_embed.json,
pos_embed.md (mean, sample std and each variant's difference from "none" with its standard error) and
pos_embed.png. The paper's claim (Table 8): any position embedding beats none by a clear margin; 1D, 2D
and relative perform about the same.
--results also writes the rows paper-pos-embed-VARIANT-SLUG (each variant minus none) of benchmarks/results/paper.csv (benchmarks/rows.py;
SLUG: the machine kind); off by default so a quick run doesn't overwrite published figures.
"""

from __future__ import annotations

import math
import sys

from common import chosen, defaults, families, header, parser, pyplot, report, run_one, save_figure, write_results

VARIANTS = ["none", "learned", "learned_2d", "relative", "sincos2d"]
FULL = {"steps": 500, "batch_size": 256, "test_images": None, "seeds": 3}
CI = {"steps": 2, "batch_size": 16, "test_images": 40, "seeds": 1}


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--seeds", type=int, default=None, help="runs per variant (default 3)")
    p.add_argument("--variants", default=",".join(VARIANTS))
    args = p.parse_args()
    defaults(args, full=FULL, ci=CI)
    variants = chosen(args.variants, VARIANTS)
    vit = families(args.image_size, args.channels)["ViT"]
    rows = []
    for seed in range(args.seeds):  # seed-major: an interrupted run still has every variant at the lower seeds
        for v in variants:
            rows.append(
                {"variant": v, "seed": seed, **run_one(f"{v}_seed{seed}", {**vit, "pos_embed": v}, args, seed=seed)}
            )
    stats = {v: _stats([r["test_top1"] for r in rows if r["variant"] == v]) for v in variants}
    base = stats.get("none")
    for v, s in stats.items():
        if base and v != "none":
            s["minus_none"] = s["mean"] - base["mean"]
            s["stderr_of_difference"] = math.sqrt(s["stderr"] ** 2 + base["stderr"] ** 2)
    result = {
        "header": {**header(args, " ".join(["python", *sys.argv])), "seeds": args.seeds},
        "rows": rows,
        "stats": stats,
    }
    table = (
        ["pos_embed", f"mean {args.test_split} top-1", "std", "per seed", "minus none (± s.e.)"],
        [
            [
                v,
                s["mean"],
                s["std"],
                " ".join(f"{a:.4f}" for a in s["values"]),
                f"{s['minus_none']:+.4f} ± {s['stderr_of_difference']:.4f}" if "minus_none" in s else "-",
            ]
            for v, s in stats.items()
        ],
    )
    report(
        args.out,
        "pos_embed",
        result,
        table,
        f"{args.seeds} seed(s) per variant. Paper (App. D.4, Table 8): "
        "none is clearly worse; 1D, 2D and relative about the same.",
    )
    plot(stats, args.out / "pos_embed.png", result["header"])
    write_results(
        args,
        [
            {
                "id": f"paper-pos-embed-{v.replace('_', '-')}",
                "claim": f"{v} position embedding minus none, mean {args.test_split} top-1 ({args.seeds} seeds)",
                "figure": f"{s['minus_none']:+.4f} ± {s['stderr_of_difference']:.4f}",
                "unit": "top-1",
                "against": f"none {base['mean']:.4f}",
                "model": "demo ViT",
            }
            for v, s in stats.items()
            if "minus_none" in s
        ],
    )
    return 0


def _stats(values: list[float]) -> dict:
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return {"mean": mean, "std": std, "stderr": std / math.sqrt(len(values)), "values": values}


def plot(stats, path, h) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    names = list(stats)
    ax.bar(names, [stats[v]["mean"] for v in names], yerr=[stats[v]["std"] for v in names], capsize=4, color="#8ab")
    for i, v in enumerate(names):
        ax.plot([i] * len(stats[v]["values"]), stats[v]["values"], "k.", ms=4)
    low = min(min(s["values"]) for s in stats.values())
    ax.set(
        ylabel=f"{h['test_split']} top-1 (bar: mean, line: std, dots: seeds)",
        title="Position embeddings (App. D.4)",
        ylim=(max(low - 0.05, 0), None),
    )
    save_figure(fig, path, h, f"per run, {h['seeds']} seed(s)")


if __name__ == "__main__":
    sys.exit(main())
