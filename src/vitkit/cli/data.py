"""`vitkit data PATH`: what a dataset holds, what the model will see of it in training, and tar shards from it."""

from __future__ import annotations

import argparse
import json

EPILOG = """examples:
  vitkit data ~/photos                                          format, classes, images per class and split, sizes
  vitkit data ~/photos --config configs/finetune_cifar10.yaml --samples 16 --out preview/   the first training batch
  vitkit data 'shards/shard-{000000..000009}.tar' model.image_size=224 --samples 8 --out preview/
  vitkit data ~/photos --to-shards shards/ --per-shard 1000     every split as tar shards (train-NNNNNN.tar, val-..., test-...)
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "data",
        help="describe a dataset, preview the training batch the model sees, or write it as tar shards",
        description="Print a dataset's format, classes, images per class and split, image sizes (min/median/max) and "
        "channels. With --samples N, write DIR/samples.png (a labelled grid) and DIR/samples.npy ((N, C, H, W) uint8): "
        "the first N images of the run's first training batch exactly as training augments them, before normalisation.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_data_flags(p)
    _add_output_flags(p)
    p.set_defaults(run=run)


def _add_data_flags(p: argparse.ArgumentParser) -> None:
    """The data and the run config that reads it."""
    p.add_argument(
        "path", nargs="?", metavar="PATH", help="the dataset (= data.path): folder, list, IDX, tar shards or Parquet"
    )
    p.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="dotted run-config overrides, e.g. model.image_size=224"
    )
    p.add_argument(
        "--config", metavar="YAML", help="run config whose data/augment/model settings apply (as in vitkit train)"
    )
    p.add_argument(
        "--split",
        choices=("train", "val", "test"),
        help="split for sizes and samples (default train), and for --to-shards the one split to write",
    )


def _add_output_flags(p: argparse.ArgumentParser) -> None:
    """What the command writes: samples, shards, JSON."""
    p.add_argument(
        "--samples",
        type=int,
        default=0,
        metavar="N",
        help="write the first N images of the first training batch (with a PATH and no "
        "model.* key or --config: of the model `vitkit train --data PATH` fits to the images)",
    )
    p.add_argument("--out", metavar="DIR", help="where samples.png and samples.npy go (required with --samples)")
    p.add_argument(
        "--to-shards",
        metavar="DIR",
        help="write the images as tar shards + DIR/classes.txt into a folder holding none: "
        "each split the data has of its own, whole, as DIR/SPLIT-NNNNNN.tar (data without splits: all of it as "
        "DIR/shard-NNNNNN.tar), or only --split SPLIT as the run config cuts it",
    )
    p.add_argument("--per-shard", type=int, default=1000, metavar="N", help="images per shard (default 1000)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object on the last line")


def run(args: argparse.Namespace) -> int:
    from vitkit.train.fit import data_report
    from vitkit.train.requests import DataRequest

    request = DataRequest(
        args.path,
        args.config,
        tuple(args.overrides),
        split=args.split,
        samples=args.samples,
        out=args.out,
        to_shards=args.to_shards,
        per_shard=args.per_shard,
    )
    summary = data_report(request)
    if args.json:
        print(json.dumps(summary))
    return 0
