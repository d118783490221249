"""`vitkit info CKPT`: what a checkpoint holds: its format, the model config inferred from it, its size."""

from __future__ import annotations

import argparse
import json

from vitkit.checkpoint import FORMATS, read_checkpoint, read_metadata
from vitkit.errors import ConfigError
from vitkit.models.summary import config_parameters

from . import image_size_arg


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "info",
        help="show a checkpoint's format, inferred model config, parameter count, class names and training data",
        description="Read CKPT (any format vitkit loads) without building the model and print its format, the "
        "complete model config vitkit infers from it, the number of parameters, and what it records: class names, "
        "preprocessing and the images of each split it was trained and validated on. vitkit checkpoints are checked "
        "against their checksums.json; a truncated, corrupt or foreign file is one line naming it, exit code 2.",
    )
    p.add_argument(
        "ckpt",
        metavar="CKPT",
        help="checkpoint file or directory, or a hub name (hf-hub:ORG/NAME[@REV], timm's MODEL.TAG)",
    )
    p.add_argument("--from", dest="src_format", choices=list(FORMATS), default=None, help="format (default: detected)")
    p.add_argument(
        "--image-size", type=int, nargs="+", metavar="PX", default=None, help="grid H [W] of a non-square checkpoint"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    asked = image_size_arg(args.image_size)
    config, _, format = read_checkpoint(args.ckpt, format=args.src_format, image_size=asked)
    if asked is not None and tuple(config.image_size) != ((asked, asked) if isinstance(asked, int) else tuple(asked)):
        shown = "x".join(map(str, config.image_size))
        raise ConfigError(
            f"--image-size: {args.ckpt} is a {shown} model (its position embeddings say so); --image-size only names "
            f"the grid of a non-square one; to run it at another size, convert it with --image-size"
        )
    meta = read_metadata(args.ckpt, format=format)
    params = config_parameters(config)  # learnable, as train and convert say: not BatchNorm's running statistics
    if args.json:
        print(
            json.dumps(
                {
                    "path": args.ckpt,
                    "format": format,
                    "parameters": params,
                    "config": config.to_dict(),
                    "metadata": meta,
                }
            )
        )
        return 0
    rows = {"path": args.ckpt, "format": format, "parameters": f"{params:,}", **config.to_dict(), **_held(meta)}
    for key, value in rows.items():
        print(f"{key:<20} {value}")
    return 0


def _held(meta: dict) -> dict[str, str]:
    """What the checkpoint holds beyond its config, in rows: class names, preprocessing, the data it was trained on."""
    from vitkit.data.split import described

    rows = {}
    if names := meta.get("class_names"):
        rows["class_names"] = f"{len(names)}: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}"
    preprocess = meta.get("preprocess") or {}
    if "crop_pct" in preprocess:
        rows["crop_pct"] = f"{preprocess['crop_pct']:g}"
    if "crop_mode" in preprocess or "interpolation" in preprocess:  # how images reach size / crop_pct
        rows["resize"] = f"{preprocess.get('crop_mode', 'center')}, {preprocess.get('interpolation', 'bilinear')}"
    if meta.get("objective"):
        rows["objective"] = meta["objective"]
    if meta.get("problem_type"):  # multi_label_classification: a sigmoid per class
        rows["problem_type"] = meta["problem_type"]
    data = meta.get("data") or {}
    for split, record in (data.get("splits") or {}).items():
        if isinstance(record, dict) and {"source", "selection", "n"} <= record.keys():
            unread = record.get("unreadable")
            rows[f"{split} images"] = described(record) + (
                f"; {unread:,} unreadable, left out ({record['n'] - unread:,} "
                f"{'trained on' if split == data.get('train_split', 'train') else 'scored'})"
                if isinstance(unread, int) and unread
                else ""
            )
    if not data.get("splits") and data:
        rows["data"] = str(data.get("path") or data.get("folder") or data.get("name"))
    return rows
