"""What the paper's experiments share: nested training subsets, one training run, its evaluation, FLOP counts, reports.

Every run is an ordinary `vitkit train` run (vitkit.train.train with a run config) in OUT/runs/<name>; the test
split is only read after training. Training FLOPs are counted on the meta device (forward + backward of one
image, times the images seen), never timed.
"""

from __future__ import annotations

import argparse
import json
import platform
import struct
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from vitkit.checkpoint.native import load_native
from vitkit.data import open_dataset
from vitkit.data.idx import default_dir, find_idx, load_idx_split
from vitkit.data.loader import eval_batches
from vitkit.evaluation import evaluate, fewshot_eval, markdown_table
from vitkit.models.summary import count_flops
from vitkit.run_config import from_dict
from vitkit.train import train

# The demo's recipe (configs/fashion_mnist.yaml) for every family: AdamW, warmup + cosine, 1-pixel shifts, flips,
# label smoothing; only the model and the length change.
RECIPE = {
    "augment": {"crop": "pad", "pad": 1, "hflip": 0.5, "label_smoothing": 0.1},
    "train": {"optimizer": "adamw", "lr": 3e-3, "weight_decay": 0.05, "decay": "cosine", "clip_norm": 1.0, "progress": False},
    "data": {"val_fraction": 0.05},
}

# Three families at about the same cost per image on 28x28 Fashion-MNIST (forward MFLOPs, `vitkit models`):
# the demo ViT (7x7 patches, 16 tokens), a BiT ResNet-v2 (the release's 7x7/2 stem and max-pool, three stages),
# and a hybrid (the ViT release's ResNet stem, stride 4, under 1x1 patches: 49 tokens).
FAMILIES = {
    "ViT": {"name": "vit_mini4_28", "patch_size": 7, "width": 96, "mlp_dim": 192, "num_heads": 4, "depth": 6, "classifier": "gap"},
    "BiT": {"name": "bit_r11_28", "stem": "bit", "layers": [1, 1, 1], "width": 32},
    "hybrid": {"name": "vit_mini4_28", "backbone": {"layers": [], "width": 32}, "patch_size": 1, "width": 96, "mlp_dim": 192,
               "num_heads": 4, "depth": 2, "classifier": "gap"},
}


def parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=None, help="IDX directory (default: Fashion-MNIST from $VITKIT_DATA or /usr/share/datasets/fashion-mnist)")
    p.add_argument("--out", required=True, help="output directory: runs/, NAME.json, NAME.md, NAME.png")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per run")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--test-images", type=int, default=None, help="score on the first N test images (default: all)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (GPU-sized runs: raise --steps and the sizes)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default; 1 on a machine shared with other jobs)")
    p.add_argument("--ci", action="store_true", help="a tiny end-to-end run (tests): few images, few steps")
    return p


def write_idx(path: Path, array: np.ndarray) -> None:
    """An uncompressed IDX file (uint8 images or labels)."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def nested_subsets(data: Path, sizes: list[int], out: Path, seed: int = 0) -> dict[int, Path]:
    """IDX directories holding the first n images of one seeded permutation of the training split (so each
    subset contains the smaller ones) and the whole test split."""
    images, labels = load_idx_split(data, "train")
    order = np.random.default_rng(seed).permutation(len(labels))
    dirs = {}
    for n in sizes:
        if n > len(labels):
            sys.exit(f"--sizes: {n} is more than the {len(labels)} training images in {data}")
        d = out / "data" / f"train{n}"
        d.mkdir(parents=True, exist_ok=True)
        pick = np.sort(order[:n])
        write_idx(d / "train-images-idx3-ubyte", images[pick])
        write_idx(d / "train-labels-idx1-ubyte", labels[pick])
        for kind in ("images", "labels"):
            link = d / find_idx(data, "test", kind).name
            if not link.exists():
                link.symlink_to(find_idx(data, "test", kind).resolve())
        dirs[n] = d
    return dirs


def run_one(name: str, model: dict, data: Path, out: Path, args, *, seed: int = 0, fewshot: tuple[int, ...] = ()) -> dict:
    """Train `model` (a run config's model section) or reuse its finished run, then score it on the test split."""
    run_dir = out / "runs" / name
    steps = args.steps
    config = from_dict({
        "model": model,
        "data": {**RECIPE["data"], "path": str(data)},
        "augment": RECIPE["augment"],
        "train": {**RECIPE["train"], "steps": steps, "batch_size": args.batch_size, "warmup_steps": max(steps // 20, 1),
                  "eval_every": steps, "checkpoint_every": steps, "log_every": max(steps // 10, 1), "seed": seed,
                  "device": args.device, "threads": args.threads, "keep_checkpoints": 1},
    })  # fmt: skip
    started = time.perf_counter()
    if not (run_dir / "summary.json").is_file():
        print(f"[{name}] training {args.steps} steps of {args.batch_size} on {data}", file=sys.stderr, flush=True)
        train(config, run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    model, _ = load_native(run_dir / "final")
    c = model.config
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else "cpu" if args.device == "auto" else args.device)
    test = open_dataset("auto", data, "test", channels=c.in_chans, image_size=c.image_size[0])
    if args.test_images:
        test = test.subset(np.arange(min(args.test_images, len(test))))
    model.to(device)
    result = evaluate(model, eval_batches(test, 500, device, channels=c.in_chans, size=c.image_size[0], crop_pct=1.0))
    train_split = open_dataset("auto", data, "train", channels=c.in_chans, image_size=c.image_size[0], val_fraction=RECIPE["data"]["val_fraction"])
    row = {
        "name": name, "train_images": len(train_split), "steps": args.steps, "batch_size": args.batch_size,
        "params": summary["params"], "train_flops": count_flops(c, backward=True) * args.steps * args.batch_size,
        "test_top1": result["top1"], "test_images": result["n"], "val_top1": summary["final_val_top1"],
        "train_wall_s": summary["wall_time_s"], "seconds": time.perf_counter() - started,
    }  # fmt: skip
    if fewshot:
        full = open_dataset("auto", args.data, "train", channels=c.in_chans, image_size=c.image_size[0])  # the whole split
        fs = fewshot_eval(model, full, test, shots=fewshot, seeds=2, device=device)  # the official least-squares evaluator
        row.update({f"fewshot{k}": v["mean"] for k, v in fs["shots"].items()})
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def defaults(args, *, full: dict, ci: dict) -> None:
    """Fill unset arguments from the CPU-sized `full` preset, or the tiny `ci` one."""
    for key, value in (ci if args.ci else full).items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    args.data = Path(args.data) if args.data else default_dir()
    if find_idx(args.data, "train", "images") is None:
        sys.exit(f"{args.data}: no IDX training images (Fashion-MNIST: apt-get install dataset-fashion-mnist, or --data DIR)")
    args.out = Path(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.threads:
        torch.set_num_threads(args.threads)  # evaluation too (train() sets and restores its own)


def header(args, command: str) -> dict:
    return {
        "command": command, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
        "torch": torch.__version__, "threads": torch.get_num_threads(), "data": str(args.data),
        "test_images": args.test_images or "all", "steps": args.steps, "batch_size": args.batch_size,
    }  # fmt: skip


def machine() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {torch.get_num_threads()} threads"
    except OSError:
        pass
    return platform.machine()


def report(out: Path, name: str, result: dict, table: tuple[list[str], list[list]], notes: str) -> None:
    """NAME.json, NAME.md (the table with its command, data and machine) and print the Markdown."""
    (out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    h = result["header"]
    text = (f"`{h['command']}`\n\n{h['date']}, {h['machine']}, torch {h['torch']}; data {h['data']} "
            f"(test images: {h['test_images']}); {h['steps']} steps of {h['batch_size']} per run.\n\n"
            + markdown_table(*table) + ("\n\n" + notes if notes else "") + "\n")
    (out / f"{name}.md").write_text(text)
    print(text)


def pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def lines(ax, series: dict[str, tuple[list, list]], **labels) -> None:
    """One line per family ({label: (x, y)}), log x, a grid and a legend."""
    for (label, (x, y)), marker in zip(series.items(), "os^Dv"):
        ax.plot(x, y, marker=marker, label=label)
    ax.set(xscale="log", **labels)
    ax.grid(alpha=0.3)
    ax.legend()


def save_figure(fig, path: Path, h: dict, runs: str = "per run") -> None:
    """The PNG, titled with the data, the length of every run and how many test images scored it."""
    fig.suptitle(f"{h['data']}: {h['steps']} steps x {h['batch_size']} {runs}; test images: {h['test_images']}", fontsize=8)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    pyplot().close(fig)
