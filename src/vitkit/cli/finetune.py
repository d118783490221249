"""`vitkit finetune`: fine-tune any checkpoint on new data with the paper's recipe, sweeping the learning rate."""

from __future__ import annotations

import argparse

from ._frozen import DATA_HELP, numbers

EPILOG = """\
The recipe (paper App. B), the default under any --config: SGD momentum 0.9, no weight decay, global-norm
clipping at 1, 500 warmup steps (a twentieth of a run shorter than 10k) then cosine decay, logical batch 512 (set --micro-batch to accumulate),
Inception crop + flip, validation on a held-out 10% of train. The model: the checkpoint at --image-size
(position embeddings 2D-interpolated, same patch size, longer sequence), a zero-initialised head for the
data's classes, the pre-logits layer dropped (official rule) unless --keep-pre-logits.

--lr with several values runs one fine-tune per value (DIR/lr_<value>/) and picks the best final
validation top-1; DIR/final points at the picked model, DIR/sweep.json and sweep.md list every run.
Running the same command again continues an interrupted sweep; a sweep stopped by Ctrl-C or SIGTERM picks
nothing (no DIR/final) until every learning rate has finished.

examples:
  vitkit finetune --from ViT-B_16.npz --data ~/cifar10 --image-size 384 --out runs/c10 --config configs/finetune_cifar10.yaml
  vitkit finetune --from runs/demo --config configs/finetune_fashion_mnist.yaml --image-size 42 --lr 0.003,0.01,0.03 --out runs/ft42
  vitkit finetune --from hf-vit/ --data ~/pets --lr 0.001,0.003,0.01,0.03 --steps 500 --micro-batch 64 --out runs/pets
  vitkit eval runs/ft42 --split test                   the picked model
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "finetune",
        help="fine-tune a checkpoint (any format) at a new resolution with the paper's recipe and a learning-rate sweep",
        description="Fine-tune a pre-trained ViT (paper §3.2): new zero-initialised head, position embeddings "
        "resampled to the new resolution, SGD-momentum recipe, optional learning-rate sweep.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="dotted overrides on the recipe, e.g. train.steps=500 augment.crop=pad",
    )
    p.add_argument(
        "--from",
        dest="checkpoint",
        required=True,
        metavar="CKPT",
        help="checkpoint to start from: vitkit checkpoint or run directory, .npz, timm file, HF directory",
    )
    p.add_argument("--data", metavar="PATH", help=DATA_HELP + "; for a recipe file naming none")
    p.add_argument(
        "--out", required=True, metavar="DIR", help="output directory (one run directory per learning rate inside)"
    )
    p.add_argument(
        "--config", metavar="YAML", help="recipe file (configs/finetune_*.yaml) applied over the paper's recipe"
    )
    p.add_argument(
        "--image-size",
        type=int,
        nargs="+",
        metavar="PX",
        help="fine-tuning resolution H [W] (default: the recipe's, else the checkpoint's)",
    )
    p.add_argument(
        "--lr",
        type=numbers(float),
        metavar="LR[,LR...]",
        help="learning rate(s); several run a sweep (paper: 0.001,0.003,0.01,0.03)",
    )
    p.add_argument("--steps", type=int, help="optimizer steps per run (= train.steps)")
    p.add_argument("--batch-size", type=int, help="logical batch (= train.batch_size, recipe: 512)")
    p.add_argument(
        "--micro-batch", type=int, help="images per forward pass; the logical batch accumulates (= train.micro_batch)"
    )
    p.add_argument(
        "--keep-pre-logits",
        action="store_true",
        help="keep the checkpoint's pre-logits layer (default: dropped, as officially)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import json

    from vitkit.files import writable_folder
    from vitkit.train.finetune import finetune, finetune_recipe, sweep_markdown

    writable_folder(args.out, "the fine-tuning runs", "choose another --out")  # before the data line, not after
    overrides = list(args.overrides)
    if (
        args.data is None
        and not any(o.startswith(("data.path=", "data.name=")) for o in overrides)
        and not _names_data(args.config)
    ):
        # the data the checkpoint was trained on, as for every other command, cut as it was: another held-out cut would
        # score the lr sweep on images the checkpoint trained on
        args.data, cut = _checkpoint_data(args.checkpoint, overrides)
        overrides += [
            (key, value) for key, value in cut.items() if not any(str(o).startswith(f"{key}=") for o in overrides)
        ]
    for flag, key in (
        ("data", "data.path"),
        ("steps", "train.steps"),
        ("batch_size", "train.batch_size"),
        ("micro_batch", "train.micro_batch"),
    ):
        if getattr(args, flag) is not None:
            overrides.append((key, getattr(args, flag)))  # already typed by argparse: never parsed again
    if args.no_progress:
        overrides.append("train.progress=false")
    size = (
        None if args.image_size is None else tuple(args.image_size) if len(args.image_size) == 2 else args.image_size[0]
    )
    recipe = finetune_recipe(args.config, overrides)
    result = finetune(
        recipe, args.checkpoint, args.out, lrs=args.lr, image_size=size, keep_pre_logits=args.keep_pre_logits
    )
    if "stopped" in result:  # SIGTERM/SIGINT: a checkpoint was saved at the step boundary, nothing picked
        s = result["stopped"]
        print(
            f"stopped at step {s['step']} of {s['steps']} of lr {s['lr']:g} ({s['runs_finished']} of {s['runs']} learning rates "
            f"finished), checkpoint saved; nothing picked yet: run the same command again to continue the sweep"
        )
        print(json.dumps(result))
        return 0
    print(sweep_markdown(result))
    print(f"{'picked' if len(result['runs']) > 1 else 'final'}: {args.out}/final -> {result['best']['run']}/final")
    print(json.dumps(result))
    return 0


def _names_data(config: str | None) -> bool:
    """Whether a recipe file sets data.path or data.name itself."""
    import yaml

    from vitkit.errors import ConfigError

    if config is None:
        return False
    try:
        data = (yaml.safe_load(open(config)) or {}).get("data") or {}
    except (OSError, yaml.YAMLError, AttributeError) as err:
        raise ConfigError(f"{config}: cannot read the recipe ({err})") from None
    return "path" in data or "name" in data


CUT_KEYS = (
    "train_split",
    "val_split",
    "val_fraction",
    "split_seed",
)  # how a checkpoint's data was split into train and val


def _checkpoint_data(checkpoint: str, overrides: list) -> tuple[str | None, dict]:
    """The absolute data path a checkpoint records (announced; None: the recipe's default, Fashion-MNIST) and the
    data.* overrides of its held-out cut ({} where it records none). `overrides` that cut it otherwise are warned of:
    that val holds images the checkpoint trained on."""
    from vitkit.checkpoint import read_metadata
    from vitkit.errors import DataError

    meta = read_metadata(checkpoint)
    record = meta.get("data") if isinstance(meta.get("data"), dict) else {}
    path = record.get("path")
    if path and meta.get("class_names") == [
        "unlabeled"
    ]:  # pre-trained on images without labels: nothing to fine-tune on
        raise DataError(
            f"{checkpoint}: pre-trained on {path}, images without the labels fine-tuning needs; give labelled "
            "data with --data PATH"
        )
    cut = (
        {f"data.{key}": record[key] for key in CUT_KEYS if record.get(key) is not None}
        if record.get("name", "auto") == "auto"
        else {}
    )
    cutting = (
        "data.val_fraction",
        "data.split_seed",
    )  # another split of train/ into train and val (not another split named)
    given = dict(
        str(o).split("=", 1) for o in overrides if str(o).split("=", 1)[0] in cutting and str(o).split("=", 1)[0] in cut
    )
    other = {key: value for key, value in given.items() if not _same_value(value, cut[key])}
    if _same_value(given.get("data.val_fraction", "1"), 0):  # nothing held out: no val to overlap
        other = {}
    if path or cut:
        split = (
            f", held out as it was: val_fraction {cut['data.val_fraction']:g}, split_seed {cut['data.split_seed']}"
            if {"data.val_fraction", "data.split_seed"} <= set(cut) and not other
            else ""
        )
        print(
            f"vitkit finetune: data {path or 'Fashion-MNIST'} (what {checkpoint} was trained on{split}; --data to change)",
            flush=True,
        )
    if other:
        was = ", ".join(f"{key}={cut[key]}" for key in other)
        print(
            f"warning    {', '.join(f'{k}={v}' for k, v in other.items())} cuts the data anew ({checkpoint} was trained with {was}): "
            "its val split holds images the checkpoint trained on, and the learning rate is picked on them",
            flush=True,
        )
    return path, cut


def _same_value(given: str, recorded) -> bool:
    try:
        return float(given) == float(recorded)
    except (TypeError, ValueError):
        return given.strip() == str(recorded)
