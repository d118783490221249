"""`vitkit train`: train a ViT from a run config (YAML + dotted overrides); resume an interrupted run."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

EPILOG = """\
examples:
  vitkit train --config configs/fashion_mnist.yaml --out runs/demo
  vitkit train --config configs/fashion_mnist.yaml --out runs/x train.lr=1e-3 train.steps=200
  vitkit train --out runs/toy data.name=synthetic model.name=vit_test train.steps=50
  vitkit train --data ~/pictures/pets --out runs/pets model.name=vit_s16 model.image_size=224
  vitkit train --resume runs/demo                  continue exactly where it stopped
  vitkit train --resume runs/demo train.steps=6000  extend a run (the lr schedule is recomputed for 6000 steps)
  vitkit train --data ~/photos --out runs/p train.epochs=10   the length in passes over the training images instead
  torchrun --nproc_per_node=8 -m vitkit train --config configs/imagenet_vit_b16.yaml --out runs/b16
                                                   data-parallel (DDP); add train.strategy=fsdp to shard
  vitkit train --config configs/pretrain_masked_patch.yaml --out runs/mpp    self-supervised, labels unused
  vitkit train --data ~/unlabeled --out runs/mpp train.objective=masked_patch   a folder of images, no class folders
  vitkit train --data tags/ --out runs/tags      several labels per image (a "labels" list): multi-label unasked

Without --data or data.path the data is Fashion-MNIST from $VITKIT_DATA or /usr/share/datasets/fashion-mnist
(sudo apt-get install dataset-fashion-mnist). Keys: model.name, model.init and any model field (width, depth,
patch_size, image_size, drop_path, ...); data.*, augment.*, train.*: see configs/*.yaml. An unknown key or a
bad value is an error before any work starts. Data without a val split holds val out class by class (data.val_fraction,
data.split_seed), listed in RUN/splits/val.txt: files below the data folder, or for images in memory (IDX)
row numbers of the training file, counted from 0.
With --data and no model named, a pixel baseline (softmax regression on 16x16 pixels, fitted in seconds on the
training split) is scored on the val split beside the model, with a warning where the model does not beat it
(summary.json: "baseline"); train.baseline=false skips it, train.baseline=true adds it to a named model's run.
train.objective=masked_patch pre-trains by masked patch prediction (paper §4.6): half the patch embeddings
corrupted, their 3-bit mean colour predicted; val_top1 is then the colour accuracy, and the saved model is a
plain ViT to fine-tune with model.init=RUN_DIR. model.init also takes any checkpoint and hub names
(hf-hub:ORG/NAME[@REV], timm's MODEL.TAG), read through huggingface_hub's cache. Without model.name the run
takes the checkpoint's architecture (model.* keys change it); with --data, a batch and length fitted to the data.

Faults: SIGTERM or Ctrl-C saves a checkpoint at the next step boundary and exits 0 with the resume command
(a second signal stops at once); after a crash or kill -9, --resume continues from the newest complete
checkpoint (its checksums are verified). Unreadable images are skipped and listed in RUN/bad_files.json
(data.on_error=fail stops instead); a non-finite loss or gradient skips the step, and
train.max_nonfinite_steps of them in a row stop the run.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a ViT (default data: Fashion-MNIST) with checkpoints, exact resume, metrics and plots",
        description="Train a ViT end to end. The run directory gets checkpoints, metrics.jsonl, summary.json and PNG plots.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. train.lr=1e-3 model.name=vit_s16"
    )
    p.add_argument(
        "--config",
        metavar="YAML",
        help="run config file (default: built-in defaults, vit_mini4_28 on Fashion-MNIST; "
        "with --data and no model.name or model.init key, a small ViT fitted to the data's size and channels, "
        "which other model.* keys change; with model.init=CKPT and no model.name, the checkpoint's architecture)",
    )
    p.add_argument("--out", metavar="DIR", help="run directory to create (required unless --resume)")
    p.add_argument(
        "--data",
        metavar="PATH",
        help="dataset: IDX folder, image folder (root/<class>/...), .csv/.jsonl list or a folder of them by "
        "split (train.csv, val.csv ...; Kaggle's and Roboflow's layouts too), tar shards or Parquet (= data.path)",
    )
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest checkpoint")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (= train.progress=false)")
    p.set_defaults(run=run)


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # the CLI says "interrupted" and exits 130


def _exit_interrupted(signum, frame):
    """SIGTERM once the command has returned, while the interpreter shuts down (DataLoader workers, threads): every file
    is written and every line printed by then; exit 130 as any second signal does, not 143."""
    sys.stdout.flush()
    print("vitkit train: interrupted", file=sys.stderr, flush=True)
    os._exit(130)


def run(args: argparse.Namespace) -> int:
    import signal

    # outside the loop's own handling (a second SIGTERM as it ends): 130
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _run(args)
    finally:  # in vitkit's own process, to the end of it; a caller of main() gets its handler back
        signal.signal(signal.SIGTERM, _exit_interrupted if getattr(args, "whole_process", False) else previous)


def _run(args: argparse.Namespace) -> int:
    from vitkit.train import distributed, train
    from vitkit.train.fit import run_config
    from vitkit.train.requests import TrainRequest

    request = TrainRequest(
        tuple(args.overrides), args.config, args.out, args.data, args.resume, progress=not args.no_progress
    )
    summary = train(run_config(request), request.run_dir, resume=bool(request.resume))
    # under torchrun, rank 0 reports
    if not distributed.is_main():
        return 0
    _report(request.run_dir, summary)
    # Ctrl-C stopped it at a step boundary, checkpoint saved: not done, as a shell's `&&` (and make) must see; a
    # scheduler's SIGTERM is a preemption the run is resumed from, exit 0
    return 130 if summary.get("signal") == "SIGINT" else 0


def _report(out: str, summary: dict) -> None:
    from vitkit.train import distributed

    print(f"run directory: {out}")
    if "stopped_at" in summary:  # SIGTERM/SIGINT: a checkpoint was saved at the step boundary
        launch = (
            f"torchrun --nproc_per_node={distributed.local_world_size()} -m vitkit train"
            if distributed.under_torchrun()
            else "vitkit train"
        )
        print(
            f"stopped at step {summary['stopped_at']} of {summary['steps']}, checkpoint saved; "
            f"continue with: {launch} --resume {shlex.quote(str(out))}"
        )
    print(json.dumps(summary))
