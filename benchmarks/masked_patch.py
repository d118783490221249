"""Masked patch prediction (paper §4.6) in miniature on Fashion-MNIST.

    PYTHONPATH=src python benchmarks/masked_patch.py [--out runs/mpp-bench] [--pretrain-steps 1000] [--finetune-steps 500] [--results]

1. pre-train `configs/pretrain_masked_patch.yaml` (labels unused) for --pretrain-steps;
2. few-shot: 5/10/25-shot closed-form ridge (PAPER.md §4) on the frozen features of the pre-trained model
   and of the same model at its random initialisation (the weights `vitkit train` starts from), 3 seeds;
3. fine-tune: the demo recipe (configs/fashion_mnist_small.yaml) for --finetune-steps from the pre-trained weights
   (model.init) and from random initialisation, and from random initialisation for pre-train + fine-tune
   steps (the same total compute); each evaluated on the test split with `vitkit eval`.
Runs that already finished in --out are reused, so an interrupted benchmark continues.
Prints a Markdown section; --results writes the rows mpp-finetune-top1-SLUG and mpp-fewshot-25-SLUG of
benchmarks/results/masked_patch.csv through benchmarks/rows.py (SLUG: the machine kind, e.g. xeon); off by default
so a quick run doesn't overwrite published figures. Then run `python benchmarks/render.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from fashion_mnist import ROOT, cpu_name, vitkit

SHOTS, SEEDS = (5, 10, 25), (0, 1, 2)


def train_run(out: Path, config: str, *overrides: str) -> dict:
    """`vitkit train` unless `out` already holds a finished run; returns its summary plus the load average."""
    if not (out / "summary.json").is_file():
        load = os.getloadavg()[0]
        done = vitkit("train", "--config", config, "--out", str(out), "--no-progress", *overrides)
        if done.returncode != 0:
            sys.exit(f"vitkit train failed:\n{done.stderr}")
        (out / "load.json").write_text(json.dumps({"start": load, "end": os.getloadavg()[0]}))
    return json.loads((out / "summary.json").read_text())


def test_top1(run: Path) -> float:
    done = vitkit("eval", str(run), "--split", "test", "--json")
    if done.returncode != 0:
        sys.exit(f"vitkit eval failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])["top1"]


def ridge_accuracy(train_x, train_y, test_x, test_y, l2_reg: float = 2.0**10) -> float:
    """PAPER.md §4 few-shot evaluator: standardise, bias feature, {-1, 1} targets, closed-form ridge, argmax."""
    mean, std = train_x.mean(0), train_x.std(0, unbiased=False) + 1e-5

    def prep(x):
        x = (x.double() - mean) / std
        return torch.cat([x, torch.full((len(x), 1), 100.0, dtype=x.dtype)], dim=1)

    X, Z = prep(train_x.double()), prep(test_x.double())
    Y = 2.0 * torch.nn.functional.one_hot(train_y, int(train_y.max()) + 1).double() - 1.0
    if len(X) >= X.shape[1]:  # primal
        W = torch.linalg.solve(X.T @ X + l2_reg * torch.eye(X.shape[1], dtype=X.dtype), X.T @ Y)
    else:  # dual
        W = X.T @ torch.linalg.solve(X @ X.T + l2_reg * torch.eye(len(X), dtype=X.dtype), Y)
    return float(((Z @ W).argmax(1) == test_y).double().mean())


def few_shot_evaluator():
    """vitkit.evaluate.metrics.lsr_accuracy where the transfer work provides it, else the ridge above."""
    try:
        from vitkit.evaluate.metrics import lsr_accuracy

        return lsr_accuracy, "vitkit.evaluate.metrics.lsr_accuracy"
    except ImportError:
        return ridge_accuracy, "ridge_accuracy in benchmarks/masked_patch.py"


@torch.inference_mode()
def features(model, images: torch.Tensor) -> dict[str, torch.Tensor]:
    """Frozen features by pooling: "token" = pre-logits (class token after the final LayerNorm), "gap" = mean patch token."""
    from vitkit.data import eval_transform

    model.eval()
    c, out = model.config, {"token": [], "gap": []}
    for start in range(0, len(images), 1000):
        tokens = model.forward_features(eval_transform(images[start : start + 1000], c.image_size, 1.0, c.mean, c.std))
        out["token"].append(model.forward_head(tokens, pre_logits=True))
        out["gap"].append(tokens[:, c.num_prefix_tokens :].mean(1))
    return {pool: torch.cat(f).float() for pool, f in out.items()}


def few_shot(models: dict, evaluate) -> dict:
    """{(name, pool): {shots: (mean, std)}} over SEEDS; shots drawn from the training split, accuracy on the test split."""
    from vitkit.data import open_split

    train, test = (open_split(None, s, channels=1, val_fraction=0.1) for s in ("train", "test"))
    picks = {}  # seed -> shots -> indices into train, n per class
    for seed in SEEDS:
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed))
        per_class = [order[train.labels[order] == k][: max(SHOTS)] for k in range(10)]
        picks[seed] = {n: torch.cat([idx[:n] for idx in per_class]) for n in SHOTS}
    used = torch.unique(torch.cat([picks[s][max(SHOTS)] for s in SEEDS]))  # only these training images need features
    row = torch.full((len(train),), -1, dtype=torch.long)
    row[used] = torch.arange(len(used))
    results = {}
    for name, model in models.items():
        train_f, test_f = features(model, train.images[used]), features(model, test.images)
        for pool in ("token", "gap"):
            accs = {
                n: torch.tensor(
                    [
                        evaluate(train_f[pool][row[picks[s][n]]], train.labels[picks[s][n]], test_f[pool], test.labels)
                        for s in SEEDS
                    ]
                )
                for n in SHOTS
            }
            results[name, pool] = {n: (float(a.mean()), float(a.std(unbiased=False))) for n, a in accs.items()}
    return results


def majority_colour_share(config) -> float:
    """Share of the held-out patches in the most common colour class: what always guessing it would score."""
    from vitkit.data import eval_transform, open_split
    from vitkit.train.objectives import mean_colour_targets

    c = config.model_config()
    val = open_split(
        None, "val", channels=c.in_chans, val_fraction=config.data.val_fraction, seed=config.data.split_seed
    )
    pixels = eval_transform(val.images, c.image_size, 1.0, (0.0,) * c.in_chans, (1.0,) * c.in_chans)
    counts = torch.bincount(mean_colour_targets(pixels, c.total_patch_size).flatten())
    return float(counts.max() / counts.sum())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/mpp-bench")
    parser.add_argument("--pretrain-steps", type=int, default=1000)
    parser.add_argument("--finetune-steps", type=int, default=500)
    parser.add_argument(
        "--results",
        action="store_true",
        help="write the rows mpp-finetune-top1-SLUG and mpp-fewshot-25-SLUG of benchmarks/results/masked_patch.csv",
    )
    args = parser.parse_args()
    out, P, S = ROOT / args.out, args.pretrain_steps, args.finetune_steps
    torch.set_num_threads(1)
    import vitkit as vk
    from vitkit.train.config import load_run_config

    started = time.time()
    pre = train_run(
        out / "pretrain",
        "configs/pretrain_masked_patch.yaml",
        f"train.steps={P}",
        f"train.eval_every={P}",
        f"train.checkpoint_every={P}",
    )
    config = load_run_config(ROOT / "configs" / "pretrain_masked_patch.yaml")
    torch.manual_seed(config.train.seed)  # the initial weights `vitkit train` draws for this config
    random_init = vk.VisionTransformer(config.model_config(num_classes=10))
    evaluate, evaluator = few_shot_evaluator()
    shots = few_shot(
        {"random init": random_init, "masked patch pre-trained": vk.load_pretrained(out / "pretrain" / "final")},
        evaluate,
    )

    recipe = ["train.warmup_steps=50", "train.checkpoint_every=100000"]
    runs = {
        f"pre-trained ({P}) + fine-tuned ({S})": train_run(
            out / "finetune",
            "configs/fashion_mnist_small.yaml",
            f"model.init={out / 'pretrain'}",
            f"train.steps={S}",
            f"train.eval_every={S}",
            *recipe,
        ),
        f"random init, trained {S}": train_run(
            out / "scratch", "configs/fashion_mnist_small.yaml", f"train.steps={S}", f"train.eval_every={S}", *recipe
        ),
        f"random init, trained {P + S}": train_run(
            out / "scratch_long",
            "configs/fashion_mnist_small.yaml",
            f"train.steps={P + S}",
            f"train.eval_every={P + S}",
            *recipe,
        ),
    }
    tuned = {name: (test_top1(Path(s["checkpoint"]).parent), s["wall_time_s"]) for name, s in runs.items()}

    date = f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"
    machine = f"{cpu_name()}, {os.cpu_count()} cores (shared), torch {torch.__version__}, 1 thread per run"
    lines = [
        f"\n### Run of {date}: {P} pre-training steps, {S} fine-tuning steps\n",
        f"Pre-training: {pre['wall_time_s']:.0f} s, held-out colour-prediction accuracy {pre['final_val_top1']:.3f} "
        f"(top-5 {pre['final_val_top5']:.3f}; 8 levels; always guessing the commonest level: {majority_colour_share(config):.3f}). Few-shot evaluator: {evaluator}; mean ± std over seeds {list(SEEDS)}, "
        "test split (10,000 images).\n",
        "| frozen features | pooling | 5-shot | 10-shot | 25-shot |",
        "|---|---|---|---|---|",
        *(
            f"| {name} | {'class token (pre-logits)' if pool == 'token' else 'mean patch token'} | "
            + " | ".join(f"{100 * m:.1f} ± {100 * s:.1f}" for m, s in (r[n] for n in SHOTS))
            + " |"
            for (name, pool), r in shots.items()
        ),
        "",
        "| model (demo recipe, batch 128) | test top-1 | train s |",
        "|---|---|---|",
        *(f"| {name} | {100 * acc:.2f} | {wall:.0f} |" for name, (acc, wall) in tuned.items()),
        "",
        f"{machine}; benchmark wall time {time.time() - started:.0f} s.\n",
    ]
    text = "\n".join(lines)
    print(text)
    if args.results:
        from rows import write_rows

        common = {
            "benchmark": "Masked patch prediction (paper §4.6)",
            "model": "vit_mini4_28 (width 64, depth 6, 206k params)",
        }
        names = list(tuned)
        n = max(SHOTS)
        (pm, ps), (rm, rs) = (shots[(who, "token")][n] for who in ("masked patch pre-trained", "random init"))
        write_rows(
            "masked_patch",
            [
                {
                    **common,
                    "id": "mpp-finetune-top1",
                    "claim": f"test top-1, pre-trained {P} steps + fine-tuned {S}",
                    "figure": f"{100 * tuned[names[0]][0]:.2f}",
                    "unit": "%",
                    "against": f"{100 * tuned[names[1]][0]:.2f}% from scratch, {S} steps; "
                    f"{100 * tuned[names[2]][0]:.2f}% from scratch, {P + S} steps",
                    "setting": "batch 128, 1 thread per run",
                },
                {
                    **common,
                    "id": f"mpp-fewshot-{n}",
                    "claim": f"{n}-shot linear accuracy on frozen class-token features",
                    "figure": f"{100 * pm:.1f} ± {100 * ps:.1f}",
                    "unit": "%",
                    "against": f"{100 * rm:.1f} ± {100 * rs:.1f}% random init",
                    "setting": f"seeds {min(SEEDS)}-{max(SEEDS)}, 10,000 test images",
                },
            ],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
