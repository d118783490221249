"""`vitkit train`: train a ViT from a run config (YAML + dotted overrides); resume an interrupted run."""

from __future__ import annotations

import argparse
import json

EPILOG = """\
examples:
  vitkit train --config configs/fashion_mnist.yaml --out runs/demo
  vitkit train --config configs/fashion_mnist.yaml --out runs/x train.lr=1e-3 train.steps=200
  vitkit train --out runs/toy data.name=synthetic model.name=vit_test train.steps=50
  vitkit train --data ~/pictures/pets --out runs/pets model.name=vit_s16 model.image_size=224
  vitkit train --resume runs/demo                  continue exactly where it stopped
  vitkit train --resume runs/demo train.steps=6000  extend a run (the lr schedule is recomputed for 6000 steps)

Without --data or data.path the data is Fashion-MNIST from $VITKIT_DATA or /usr/share/datasets/fashion-mnist
(sudo apt-get install dataset-fashion-mnist). Keys: model.name, model.init and any model field (width, depth,
patch_size, image_size, drop_path, ...); data.*, augment.*, train.*: see configs/*.yaml. An unknown key or a
bad value is an error before any work starts.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a ViT (default data: Fashion-MNIST) with checkpoints, exact resume, metrics and plots",
        description="Train a ViT end to end. The run directory gets checkpoints, metrics.jsonl, summary.json and PNG plots.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. train.lr=1e-3 model.name=vit_s16")
    p.add_argument("--config", metavar="YAML", help="run config file (default: built-in defaults, vit_mini4_28 on Fashion-MNIST)")
    p.add_argument("--out", metavar="DIR", help="run directory to create (required unless --resume)")
    p.add_argument("--data", metavar="PATH", help="dataset: IDX folder, image folder (root/<class>/...), or .csv/.jsonl list (= data.path)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest checkpoint")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (= train.progress=false)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from vitkit.errors import ConfigError
    from vitkit.run_config import load_run_config
    from vitkit.train import resume_config, train

    overrides = list(args.overrides)
    if args.data:
        overrides.append(f"data.path={args.data}")
    if args.no_progress:
        overrides.append("train.progress=false")
    if args.resume:
        if args.config:
            raise ConfigError("--config: a resumed run keeps its own run.yaml; pass changes as KEY=VALUE overrides")
        if args.out and args.out != args.resume:
            raise ConfigError("--out: a resumed run writes into its own directory; drop --out")
        config = resume_config(args.resume, overrides)
        summary = train(config, args.resume, resume=True)
        out = args.resume
    else:
        if not args.out:
            raise ConfigError("--out: required; name the run directory to create, e.g. --out runs/demo")
        config = load_run_config(args.config, overrides)
        summary = train(config, args.out)
        out = args.out
    print(f"run directory: {out}")
    print(json.dumps(summary))
    return 0
