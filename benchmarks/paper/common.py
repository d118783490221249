"""What the paper's experiments share: the data, nested training subsets, one training run, its evaluation, FLOP
counts, reports.

Every run is an ordinary `vitkit train` run (vitkit.train.train with a run config) in OUT/runs/<name>, on any data
vitkit reads (IDX files, an image folder, a CSV/JSONL list, tar shards, Parquet; default Fashion-MNIST); a data-size
run trains on `data.train_images` of it. Validation is the data's val split (a val/ folder, else 5% of the training
split held out before any subset is cut); the scoring split (`--test-split`, default test) is only read after
training. Training FLOPs are counted on the meta device (forward + backward of one image, times the images seen),
never timed.
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
from vitkit.data import DataSpec
from vitkit.data.loader import eval_batches
from vitkit.data.scan import scan
from vitkit.data.sources.idx import default_dir
from vitkit.data.spec import absolute
from vitkit.data.split import described
from vitkit.errors import VitkitError
from vitkit.evaluate.metrics import evaluate, fewshot_eval, markdown_table
from vitkit.models.summary import count_flops
from vitkit.train import step_checkpoints, train
from vitkit.train.config import changed_settings, from_dict, load_run_config
from vitkit.train.fit import fitted_size

# The demo's recipe (configs/fashion_mnist.yaml) for every family: AdamW, warmup + cosine, 1-pixel shifts, flips,
# label smoothing; only the model and the length change.
RECIPE = {
    "augment": {"crop": "pad", "pad": 1, "hflip": 0.5, "label_smoothing": 0.1},
    "train": {
        "optimizer": "adamw",
        "lr": 3e-3,
        "weight_decay": 0.05,
        "decay": "cosine",
        "clip_norm": 1.0,
        "progress": False,
    },
    "data": {"val_fraction": 0.05},
}


def families(size: int = 28, channels: int = 1) -> dict[str, dict]:
    """Three families at about the same cost per image on 28x28 Fashion-MNIST (forward MFLOPs, `vitkit models`),
    as model sections for `size` px and `channels`: the demo ViT (a 4x4 grid of patches: 7 px at 28, 16 tokens), a
    BiT ResNet-v2 (the release's 7x7/2 stem and max-pool, three stages), and a hybrid (the ViT release's ResNet
    stem, stride 4, under patches of the feature map: 1x1 at 28, 49 tokens; about a 7x7 grid at other sizes)."""
    if size % 4:
        fail(f"--image-size: {size} px does not split into a 4x4 grid of patches; give a multiple of 4")
    stem = size // 4  # the hybrid's feature map, after the stride-4 stem
    patch = max(p for p in range(1, max(size // 28, 1) + 1) if stem % p == 0)
    shape = {"image_size": size, "in_chans": channels}
    return {
        "ViT": {
            "name": "vit_mini4_28",
            **shape,
            "patch_size": size // 4,
            "width": 96,
            "mlp_dim": 192,
            "num_heads": 4,
            "depth": 6,
            "classifier": "gap",
        },
        "BiT": {"name": "bit_r11_28", **shape, "stem": "bit", "layers": [1, 1, 1], "width": 32},
        "hybrid": {
            "name": "vit_mini4_28",
            **shape,
            "backbone": {"layers": [], "width": 32},
            "patch_size": patch,
            "width": 96,
            "mlp_dim": 192,
            "num_heads": 4,
            "depth": 2,
            "classifier": "gap",
        },
    }


FAMILIES = families()  # at Fashion-MNIST's 28x28 grayscale


def fail(message: str) -> None:
    """A user's mistake: one line on stderr, exit code 2 (as vitkit's commands)."""
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def chosen(text: str, known) -> list[str]:
    """The comma-separated names of `text`, each one of `known` (else the script exits naming it)."""
    names = text.split(",")
    for name in names:
        if name not in known:
            fail(f"{name!r}: expected one of {', '.join(known)}")
    return names


def parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--data",
        default=None,
        help="the dataset, as for vitkit train --data: IDX folder, image folder, CSV/JSONL list, "
        "tar shards or Parquet (default: Fashion-MNIST from $VITKIT_DATA or /usr/share/datasets/fashion-mnist)",
    )
    p.add_argument(
        "--test-split",
        default="test",
        choices=("test", "val"),
        help="the split every model is scored on (default test; val for data that has none)",
    )
    p.add_argument(
        "--image-size",
        type=int,
        default=None,
        help="px (default: IDX data's own size; for image files, their median "
        "shorter side to a multiple of 8 in 16-64, as vitkit train --data fits)",
    )
    p.add_argument("--out", required=True, help="output directory: runs/, NAME.json, NAME.md, NAME.png")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per run")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--test-images", type=int, default=None, help="score on the first N test images (default: all)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (GPU-sized runs: raise --steps and the sizes)")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch CPU threads (0: torch's default; 1 on a machine shared with other jobs)",
    )
    p.add_argument("--ci", action="store_true", help="a tiny end-to-end run (tests): few images, few steps")
    p.add_argument(
        "--results",
        action="store_true",
        help="also write this experiment's rows (paper-...-SLUG) to benchmarks/results/paper.csv; "
        "off by default so a quick run doesn't overwrite published figures (never with --ci)",
    )
    return p


BENCHMARK = "The paper's experiments in miniature (Fig. 3-5, App. D.4)"


def write_results(args, rows: list[dict]) -> None:
    """With --results, upsert `rows` (each with id, claim, figure, unit, ...) into benchmarks/results/paper.csv
    through benchmarks/rows.py, the benchmark and setting filled in; a --ci run's figures are never written."""
    if not getattr(args, "results", False):
        return
    if args.ci:
        print("--results: not written for a --ci run", file=sys.stderr)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from rows import write_rows

    setting = f"{args.steps} steps x {args.batch_size}"
    if args.data != default_dir():
        setting += f", data {args.data}"
    write_rows("paper", [{"benchmark": BENCHMARK, "setting": setting, **row} for row in rows])


def write_idx(path: Path, array: np.ndarray) -> None:
    """An uncompressed IDX file (uint8 images or labels)."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def fewshot_pool(args, channels: int, size: int):
    """The images few-shot evaluation draws its shots from: the data's whole training split (no subset)."""
    return DataSpec(path=str(args.data)).open("train", channels=channels, image_size=size)


def spec(args, train_images: int | None = None) -> DataSpec:
    """The data of every run: `args.data` cut as RECIPE says, only `train_images` of its training split where given."""
    return DataSpec(path=str(args.data), val_fraction=RECIPE["data"]["val_fraction"], train_images=train_images)


def run_one(
    name: str, model: dict, args, *, seed: int = 0, train_images: int | None = None, fewshot: tuple[int, ...] = ()
) -> dict:
    """Train `model` (a run config's model section) or reuse its finished run, then score it on the test split."""
    run_dir = args.out / "runs" / name
    steps = args.steps
    config = from_dict({
        "model": model,
        "data": {**RECIPE["data"], "path": str(args.data), "train_images": train_images},
        "augment": RECIPE["augment"],
        "train": {**RECIPE["train"], "steps": steps, "batch_size": args.batch_size, "warmup_steps": max(steps // 20, 1),
                  "eval_every": steps, "checkpoint_every": steps, "log_every": max(steps // 10, 1), "seed": seed,
                  "device": args.device, "threads": args.threads, "keep_checkpoints": 1},
    })  # fmt: skip
    started = time.perf_counter()
    if (
        run_dir / "run.yaml"
    ).is_file():  # a run of an earlier command: reused (or continued) only with the same settings
        changed = changed_settings(load_run_config(run_dir / "run.yaml"), config)
        if changed:
            fail(
                f"{run_dir}: trained with other settings ({', '.join(changed)} differ from this command's); give another "
                f"--out, or remove {run_dir} to train it again"
            )
    if not (run_dir / "summary.json").is_file():
        resume = bool(step_checkpoints(run_dir))  # stopped part way by an earlier command: continued where it stopped
        print(
            f"[{name}] {'continuing' if resume else 'training'} {args.steps} steps of {args.batch_size} on {args.data}"
            + (f" ({train_images:,} training images)" if train_images else ""),
            file=sys.stderr,
            flush=True,
        )
        try:
            result = train(config, run_dir, resume=resume)
        except VitkitError as err:
            fail(str(err))
        if "stopped_at" in result:  # SIGINT / SIGTERM: a checkpoint, and nothing reported from a half-trained model
            print(
                f"{Path(sys.argv[0]).name}: stopped at step {result['stopped_at']} of {result['steps']} of {run_dir}, checkpoint "
                "saved; nothing reported yet: run the same command again to continue",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(0)
    summary = json.loads((run_dir / "summary.json").read_text())
    model, extra = load_native(run_dir / "final")
    c = model.config
    device = torch.device(
        "cuda"
        if args.device == "auto" and torch.cuda.is_available()
        else "cpu"
        if args.device == "auto"
        else args.device
    )
    test = spec(args).open(args.test_split, channels=c.in_chans, image_size=c.image_size[0])
    if args.test_images:
        test = test.subset(np.arange(min(args.test_images, len(test))))
    model.to(device)
    result = evaluate(model, eval_batches(test, 500, device, channels=c.in_chans, size=c.image_size[0], crop_pct=1.0))
    trained_on = extra["data"]["splits"]["train"]  # exactly which images the run trained on, as its checkpoint records
    row = {
        "name": name, "train_images": trained_on["n"], "train_selection": trained_on["selection"], "steps": args.steps,
        "batch_size": args.batch_size, "params": summary["params"], "train_flops": count_flops(c, backward=True) * args.steps * args.batch_size,
        "test_top1": result["top1"], "test_images": result["n"], "test_split": args.test_split, "val_top1": summary["final_val_top1"],
        "train_wall_s": summary["wall_time_s"], "seconds": time.perf_counter() - started,
    }  # fmt: skip
    if fewshot:
        full = fewshot_pool(args, c.in_chans, c.image_size[0])
        fs = fewshot_eval(
            model, full, test, shots=fewshot, seeds=2, device=device
        )  # the official least-squares evaluator
        row.update({f"fewshot{k}": v["mean"] for k, v in fs["shots"].items()})
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def defaults(args, *, full: dict, ci: dict) -> None:
    """Fill unset arguments from the CPU-sized `full` preset, or the tiny `ci` one; read the data's image size and
    channels (`args.image_size`, `args.channels`), checking that it has a training split and the scoring split."""
    for key, value in (ci if args.ci else full).items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    args.data = Path(absolute(args.data)) if args.data else default_dir()
    try:
        train_split = spec(args).open(
            "train", channels=1, image_size=args.image_size or 32
        )  # arrays as stored (IDX: gray)
        args.test_count = len(
            spec(args).open(args.test_split, channels=3, image_size=args.image_size or 32, flag="--test-split")
        )
    except VitkitError as err:
        hint = (
            " (Fashion-MNIST: apt-get install dataset-fashion-mnist, or --data PATH)"
            if args.data == default_dir()
            else ""
        )
        fail(f"{err}{hint}")
    args.train_count, args.train_described = len(train_split), described(train_split.describe())
    if train_split.images is not None:  # IDX arrays: their own size and channels
        args.channels, native = train_split.images.shape[1], train_split.images.shape[-1]
        args.image_size = args.image_size or native
    else:
        found = scan(train_split)
        args.channels, args.image_size = found.channels, args.image_size or fitted_size(found)
    args.out = Path(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.threads:
        torch.set_num_threads(args.threads)  # evaluation too (train() sets and restores its own)


def header(args, command: str) -> dict:
    return {
        "command": command, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
        "torch": torch.__version__, "threads": torch.get_num_threads(), "data": str(args.data), "test_split": args.test_split,
        "image_size": args.image_size, "channels": args.channels, "test_images": (f"the first {args.test_images:,} of {args.test_count:,}" if args.test_images and args.test_images < args.test_count
                        else f"all {args.test_count:,}"), "steps": args.steps,
        "batch_size": args.batch_size,
    }  # fmt: skip


def machine() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                threads = torch.get_num_threads()
                return f"{line.split(':', 1)[1].strip()}, {threads} thread{'s' * (threads != 1)}"
    except OSError:
        pass
    return platform.machine()


def report(out: Path, name: str, result: dict, table: tuple[list[str], list[list]], notes: str) -> None:
    """NAME.json, NAME.md (the table with its command, data and machine) and print the Markdown."""
    (out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    h = result["header"]
    text = (
        f"`{h['command']}`\n\n{h['date']}, {h['machine']}, torch {h['torch']}; data {h['data']} at {h['image_size']} px, "
        f"{h['channels']} channel(s), scored on its {h['test_split']} split ({h['test_split']} images: {h['test_images']}); "
        f"{h['steps']} steps of {h['batch_size']} per run.\n\n"
        + markdown_table(*table)
        + ("\n\n" + notes if notes else "")
        + "\n"
    )
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
    fig.suptitle(
        f"{h['data']} at {h['image_size']} px: {h['steps']} steps x {h['batch_size']} {runs}; scored on {h['test_split']}, "
        f"{h['test_split']} images: {h['test_images']}",
        fontsize=8,
    )
    fig.savefig(path, dpi=110, bbox_inches="tight")
    pyplot().close(fig)
