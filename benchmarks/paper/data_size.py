"""Data size (paper Fig. 3 and 4): ViT, BiT ResNet and hybrid of similar compute on nested training subsets.

    python benchmarks/paper/data_size.py --out runs/paper/data_size            # CPU default: 500 steps of 256 a run, ~40 min (RESULTS.md)
    python benchmarks/paper/data_size.py --out DIR --sizes 1000,5000,20000,57000 --steps 4000 --device cuda
    python benchmarks/paper/data_size.py --out DIR --data ~/photos --test-split val --sizes 100,300,1000   # your own images

Each family trains for the same number of steps on the first n images of one seeded permutation of the
training split (`data.train_images`: every subset holds the smaller ones; validation images are held out before,
so n images train): the same compute, n varies. Any data vitkit reads works (`--data`, `--test-split val` for
a folder with only train/ and val/). Scores: test top-1
(Fig. 3 fine-tunes, here the model is trained on the target task directly) and 10-shot linear accuracy of the
frozen features (Fig. 4: the official least-squares few-shot evaluator, 10 images per class drawn from the full
training split, mean of 2 draws). Writes data_size.json, data_size.md and data_size.png (accuracy against n).
The paper's claim: ResNets do better on small data, ViT catches up and overtakes as the data grows.
--results also writes the rows paper-data-size-N-SLUG (the smallest and largest subset) of benchmarks/results/paper.csv (benchmarks/rows.py;
SLUG: the machine kind); off by default so a quick run doesn't overwrite published figures.
"""

from __future__ import annotations

import sys

import numpy as np
from common import (
    FAMILIES,
    chosen,
    defaults,
    fail,
    families,
    fewshot_pool,
    header,
    lines,
    parser,
    pyplot,
    report,
    run_one,
    save_figure,
    write_results,
)

FULL = {"sizes": "1000,5000,20000,57000", "steps": 500, "batch_size": 256, "test_images": None}
CI = {"sizes": "60,120", "steps": 2, "batch_size": 16, "test_images": 40}


def few_per_class(args) -> tuple[str, int] | None:
    """(name, count) of a class with fewer than 10 images in the training split (what the 10-shot column draws from)."""
    train = fewshot_pool(args, args.channels, args.image_size)
    counts = np.bincount(train.labels.numpy(), minlength=len(train.class_names))
    k = int(counts.argmin())
    return (train.class_names[k], int(counts[k])) if counts[k] < 10 else None


def main() -> int:
    p = parser(__doc__)
    p.add_argument(
        "--sizes",
        default=None,
        help="training subset sizes, comma-separated (default 1000,5000,20000,57000: all of Fashion-MNIST's after 5%% validate)",
    )
    p.add_argument("--families", default="ViT,BiT,hybrid")
    args = p.parse_args()
    defaults(args, full=FULL, ci=CI)
    names = chosen(args.families, FAMILIES)
    sizes = sorted(int(n) for n in args.sizes.split(","))
    if sizes[-1] > args.train_count:
        fail(f"--sizes: {sizes[-1]:,} is more than the training split holds: {args.train_described}")
    if sizes[0] < args.batch_size:  # checked before any run trains, not after the first
        fail(
            f"--sizes: {sizes[0]:,} training images are fewer than one batch of {args.batch_size}; lower --batch-size or raise --sizes"
        )
    fewest = few_per_class(args)
    if fewest is not None:
        fail(
            f"the 10-shot column draws 10 training images of every class, and class {fewest[0]!r} has {fewest[1]}; "
            "use data with 10 or more images of each class"
        )
    models = families(args.image_size, args.channels)
    rows = []
    for n in sizes:
        for family in names:
            rows.append(
                {
                    "family": family,
                    "subset": n,
                    **run_one(f"{family}_{n}", models[family], args, train_images=n, fewshot=(10,)),
                }
            )
    result = {"header": header(args, " ".join(["python", *sys.argv])), "rows": rows}
    table = (
        ["training images", *[f"{f} {args.test_split} top-1" for f in names], *[f"{f} 10-shot" for f in names]],
        [
            [n, *[_get(rows, f, n, "test_top1") for f in names], *[_get(rows, f, n, "fewshot10") for f in names]]
            for n in sizes
        ],
    )
    report(
        args.out,
        "data_size",
        result,
        table,
        "One run (seed 0) per cell; 10-shot: the mean of 2 draws of 10 images per class "
        "from the whole training split, frozen features, least squares. Paper (Fig. 3, 4): ResNets win on small data, ViT "
        "overtakes with more.",
    )
    plot(rows, names, sizes, args.out / "data_size.png", result["header"])
    write_results(
        args,
        [
            {
                "id": f"paper-data-size-{n}",
                "claim": f"{args.test_split} top-1 at {n:,} training images: " + " / ".join(names),
                "figure": " / ".join(f"{_get(rows, f, n, 'test_top1'):.4f}" for f in names),
                "unit": "top-1",
                "model": ", ".join(names),
            }
            for n in (sizes[0], sizes[-1])
        ],
    )
    return 0


def _get(rows: list[dict], family: str, n: int, key: str):
    return next(r[key] for r in rows if r["family"] == family and r["subset"] == n)


def plot(rows, names, sizes, path, h) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in zip(
        axes,
        ("test_top1", "fewshot10"),
        (f"{h['test_split'].capitalize()} top-1 (Fig. 3)", "10-shot linear accuracy (Fig. 4)"),
    ):
        series = {f: (sizes, [_get(rows, f, n, key) for n in sizes]) for f in names}
        lines(ax, series, xlabel="training images (nested subsets)", ylabel="accuracy", title=title)
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.minorticks_off()
    save_figure(fig, path, h)


if __name__ == "__main__":
    sys.exit(main())
