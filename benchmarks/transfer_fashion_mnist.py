"""Transfer on Fashion-MNIST (paper §3.2, §4.1): pre-train a small ViT at 28x28, fine-tune it at 40x40 with the
same 4x4 patches (7x7 -> 10x10 grid, position embeddings interpolated), and evaluate its frozen features
(few-shot, linear probe, k-NN) against the same architecture randomly initialised.

    PYTHONPATH=src python benchmarks/transfer_fashion_mnist.py [--runs runs] [--results]

Runs exactly the `vitkit` commands it prints, in --runs. Finished steps are reused: the pre-training is
skipped when RUNS/pretrain28/final exists and `vitkit finetune` keeps the finished runs of a sweep; the
evaluations are always run again. Prints a Markdown section (commands, tables, machine, date); --results
writes the rows transfer-finetune-top1-SLUG, transfer-fewshot-1shot-SLUG, transfer-linear-probe-SLUG and
transfer-knn-SLUG of benchmarks/results/transfer.csv through benchmarks/rows.py (SLUG: the machine kind, e.g.
xeon); off by default so a quick run doesn't overwrite published figures. Then run `python benchmarks/render.py`.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SWEEP = "0.001,0.003,0.01,0.03"


def vitkit(*args: str) -> dict:
    """Run `vitkit ARGS` from the repository root; the JSON object on its last output line."""
    print("$ vitkit " + " ".join(args), file=sys.stderr, flush=True)
    done = subprocess.run([sys.executable, "-m", "vitkit", *args], capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        sys.exit(f"vitkit {args[0]} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="runs", help="folder for the run directories (default runs)")
    parser.add_argument(
        "--results",
        action="store_true",
        help="write the rows transfer-{finetune-top1,fewshot-1shot,linear-probe,knn}-SLUG of benchmarks/results/transfer.csv",
    )
    args = parser.parse_args()
    r = args.runs
    commands = []

    def run(*a: str) -> dict:
        commands.append("vitkit " + " ".join(a))
        return vitkit(*a)

    pre = f"{r}/pretrain28"
    train_args = (
        "train",
        "--config",
        "configs/fashion_mnist_small.yaml",
        "--out",
        pre,
        "train.steps=1200",
        "train.eval_every=400",
        "train.checkpoint_every=400",
        "--no-progress",
    )
    if (ROOT / pre / "final").is_dir():
        commands.append("vitkit " + " ".join(train_args) + "   # reused: it existed")
    else:
        run(*train_args)
    before = run("eval", pre, "--split", "test", "--json")
    sweep = run(
        "finetune",
        "--from",
        pre,
        "--config",
        "configs/finetune_fashion_mnist.yaml",
        "--lr",
        SWEEP,
        "--out",
        f"{r}/ft40",
        "--no-progress",
    )
    after = run("eval", f"{r}/ft40", "--split", "test", "--json")
    lr = f"{sweep['best']['lr']:g}"
    longer = run(
        "finetune",
        "--from",
        pre,
        "--config",
        "configs/finetune_fashion_mnist.yaml",
        "--lr",
        lr,
        "--steps",
        "120",
        "--out",
        f"{r}/ft40_120",
        "--no-progress",
    )
    after_long = run("eval", f"{r}/ft40_120", "--split", "test", "--json")
    shots = {}
    for name, extra in (("pre-trained", ()), ("random init (seed 0)", ("--random-init", "0"))):
        out = f"{r}/fewshot_{'random' if extra else 'pretrained'}"
        shots[name] = run(
            "fewshot", pre, "--shots", "1,5,10,25", "--seeds", "3", "--threads", "1", "--out", out, *extra
        )
    probe = run("linear-probe", pre, "--threads", "1", "--out", f"{r}/linear_probe_pretrained")
    knn = run("knn", pre, "--k", "10,20", "--threads", "1", "--out", f"{r}/knn_pretrained")

    summary = json.loads((ROOT / pre / "summary.json").read_text())
    lines = [
        "## Transfer on Fashion-MNIST (`benchmarks/transfer_fashion_mnist.py`)",
        "",
        "A small ViT (vit_mini4_28: 6 layers, width 64, 4 heads, 4x4 patches, 206k parameters) pre-trained on the",
        "Fashion-MNIST training split at 28x28 (90% of it; 10% held out as val), then fine-tuned at 40x40 with the same",
        "patches: the 7x7 grid becomes 10x10, the position embeddings are 2D-interpolated, the images are resized,",
        "the head is replaced by a zero-initialised one. Fine-tuning recipe: SGD momentum 0.9, no weight decay, clip 1,",
        "logical batch 512 (4 x 128 accumulated), warmup then cosine decay, learning rate swept and picked on val.",
        "The test split is only scored. Commands, in order:",
        "",
        "```sh",
        *commands,
        "```",
        "",
        "| model | resolution | steps (batch) | test top-1 |",
        "|---|---|---|---|",
        f"| pre-trained (before) | 28x28 | {summary['steps']} (128) | {before['top1']:.4f} |",
        f"| fine-tuned, sweep pick (lr {lr}) | 40x40 | 30 (512) | {after['top1']:.4f} |",
        f"| fine-tuned, lr {lr}, longer | 40x40 | 120 (512) | {after_long['top1']:.4f} |",
        "",
        "Sweep (30 steps each; val = the 10% held out of train): "
        + ", ".join(f"lr {x['lr']:g}: {x['final_val_top1']:.4f}" for x in sweep["runs"])
        + f"; the longer run: val {longer['best']['final_val_top1']:.4f}.",
        "",
        "Few-shot linear accuracy on the test split (10,000 images), `vitkit fewshot` (the official least-squares",
        "evaluator, l2 2^10), mean ± sample std over 3 seeds, pre-logits (here: class-token) features:",
        "",
        "| features | " + " | ".join(f"{n}-shot" for n in shots["pre-trained"]["shots"]) + " |",
        "|---|" + "---|" * len(shots["pre-trained"]["shots"]),
    ]
    for name, res in shots.items():
        lines.append(
            f"| {name} | " + " | ".join(f"{v['mean']:.4f} ± {v['std']:.4f}" for v in res["shots"].values()) + " |"
        )
    lines += [
        "",
        f"Other frozen-feature evaluations of the pre-trained model: linear probe {probe['test_top1']:.4f} "
        f"(l2 {probe['best_l2']:g} picked on val), cosine k-NN "
        + ", ".join(f"k={k}: {v:.4f}" for k, v in knn["top1"].items())
        + " (test top-1).",
        "",
        f"Machine: {cpu_name()}, {torch.get_num_threads()} threads available, shared with other jobs; torch {torch.__version__}; "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.results:
        from rows import write_rows

        common = {
            "benchmark": "Transfer on Fashion-MNIST (28 -> 40 px)",
            "model": "vit_mini4_28 (width 64, depth 6, 206k params)",
        }
        pre_shots, random_shots = (next(iter(res["shots"].items())) for res in shots.values())
        write_rows(
            "transfer",
            [
                {
                    **common,
                    "id": "transfer-finetune-top1",
                    "claim": f"test top-1 fine-tuned at 40x40, lr {lr}, 120 steps",
                    "figure": f"{after_long['top1']:.4f}",
                    "unit": "top-1",
                    "against": f"{before['top1']:.4f} pre-trained at 28x28",
                    "setting": "batch 512 (4 x 128)",
                },
                {
                    **common,
                    "id": f"transfer-fewshot-{pre_shots[0]}shot",
                    "claim": f"{pre_shots[0]}-shot linear accuracy on frozen features",
                    "figure": f"{pre_shots[1]['mean']:.4f} ± {pre_shots[1]['std']:.4f}",
                    "unit": "top-1",
                    "against": f"{random_shots[1]['mean']:.4f} ± {random_shots[1]['std']:.4f} random init",
                    "setting": "3 seeds",
                },
                {
                    **common,
                    "id": "transfer-linear-probe",
                    "claim": f"linear probe test top-1 (l2 {probe['best_l2']:g} picked on val)",
                    "figure": f"{probe['test_top1']:.4f}",
                    "unit": "top-1",
                    "setting": "frozen features",
                },
                {
                    **common,
                    "id": "transfer-knn",
                    "claim": "cosine k-NN test top-1, " + " / ".join(f"k={k}" for k in knn["top1"]),
                    "figure": " / ".join(f"{v:.4f}" for v in knn["top1"].values()),
                    "unit": "top-1",
                    "setting": "frozen features",
                },
            ],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
