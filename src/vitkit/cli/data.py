"""`vitkit data PATH`: what a dataset holds, what the model will see of it in training, and tar shards from it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

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
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import dataclasses

    import numpy as np

    from vitkit.data import DataSpec
    from vitkit.data.summary import copies_warning, describe, sample_grid
    from vitkit.errors import ConfigError
    from vitkit.files import atomic_path
    from vitkit.train.config import load_run_config

    if args.samples < 0 or args.per_shard < 1:
        raise ConfigError("--samples and --per-shard: expected positive numbers")
    if args.samples and not args.out:
        raise ConfigError("--samples: say where to write samples.png and samples.npy with --out DIR")
    if args.to_shards:
        _refuse_shards_in(Path(args.to_shards))  # before reading anything
    if args.path and "=" in args.path and not Path(args.path).exists():  # no PATH given, a KEY=VALUE in its place
        args.overrides, args.path = [args.path, *args.overrides], None
    overrides = list(args.overrides) + ([f"data.path={args.path}"] if args.path else [])
    if args.samples:  # the pixels of the model `vitkit train --data PATH` would fit
        from .train import fitted_unless_named

        overrides = [*fitted_unless_named(args.path, bool(args.config), args.overrides, "data"), *overrides]
    config = load_run_config(args.config, overrides)
    d, shape = config.data, config.model_config()
    opened = _open_splits(DataSpec.from_config(d), shape)  # as training reads them (data.train_images too)
    split = args.split or "train"
    summary = describe(opened, split, d.path, d.name)
    _print(summary)
    if summary["copies_of_training_images"] is None and sum(not isinstance(v, str) for v in opened.values()) > 1:
        print(
            "copies   of training images in the other splits: not checked ("
            + (
                "Parquet rows: their bytes are not compared"
                if summary["format"].startswith("Parquet")
                else "over 200,000 training images"
            )
            + ")"
        )
    for name, copies in (
        summary["copies_of_training_images"] or {}
    ).items():  # kept apart by folder: a copy counts as unseen
        print(f"warning  {copies_warning(name, copies)}")

    if args.to_shards:
        sets = {args.split: opened[args.split]} if args.split else _whole_splits(config, shape)
        summary["shards"] = _to_shards(sets, Path(args.to_shards), args.per_shard, d.split_seed, d.on_error)

    if args.samples:
        from vitkit.train import first_batch_pixels

        preview = dataclasses.replace(config, data=dataclasses.replace(d, train_split=split))
        t, held = config.train, summary["splits"][split].get("images")
        smaller = ""
        if held is not None and held < (t.micro_batch or t.batch_size):  # a small (val) split: one batch of all of it
            preview = dataclasses.replace(preview, train=dataclasses.replace(t, batch_size=held, micro_batch=None))
            smaller = f", a batch of all {held} (the split holds fewer than train.batch_size={t.batch_size})"
        pixels, labels, names = first_batch_pixels(preview, args.samples)
        out = Path(args.out)
        with atomic_path(out / "samples.npy") as tmp:
            with open(tmp, "wb") as f:
                np.save(f, pixels.numpy())
        which = (
            f"the first {len(pixels)} images of the first training batch of {summary['splits'][split]['source']} "
            f"(seed {config.train.seed}{smaller}), as training augments them before normalisation"
        )
        with atomic_path(out / "samples.png") as tmp:
            sample_grid(pixels.numpy(), [names[int(y)] for y in labels], title=which[0].upper() + which[1:]).save(
                tmp, format="PNG"
            )
        summary["samples"] = {
            "png": str(out / "samples.png"),
            "npy": str(out / "samples.npy"),
            "images": len(pixels),
            "shape": list(pixels.shape),
            "seed": config.train.seed,
        }
        print(f"samples: {out / 'samples.png'} and {out / 'samples.npy'} {tuple(pixels.shape)} uint8: {which}")
    if args.json:
        print(json.dumps(summary))
    return 0


def _print(s: dict) -> None:
    print(f"data     {s['path'] or '(default: Fashion-MNIST)'}")
    print(f"format   {s['format']}")
    names = s["class_names"]
    print(f"classes  {s['classes']}: {', '.join(names[:12])}{' ...' if len(names) > 12 else ''}")
    for split, row in s["splits"].items():
        if "missing" in row:
            print(f"{split:<8} none ({row['missing']})")
            continue
        counts = list(row["per_class"].values())
        spread = (
            ""
            if not counts
            else f"{min(counts)} per class"
            if min(counts) == max(counts)
            else f"{min(counts)}-{max(counts)} per class"
        )
        part = "" if row.get("selection", "all") == "all" else f", {row['selection']}"
        print(f"{split:<8} {row['images']:,} image{'s' * (row['images'] != 1)}, {spread} ({row['source']}{part})")
    z = s["sizes"]
    looked = z["images"] + z.get("unreadable", 0)
    sample = f"all {looked:,} images" if looked == z["of"] else f"{looked:,} of {z['of']:,} images (a seeded sample)"
    if z.get("unreadable"):  # the figures are of the readable ones
        sample = f"the {z['images']:,} readable of {sample}"
    unread = (
        f"; {z['unreadable']:,} unreadable from their header (first {z['first_unreadable']}; a file damaged past its header "
        "is found when training reads it)"
        if z.get("unreadable")
        else ""
    )
    print(
        f"sizes    {s['sizes']['split']} split, {sample}: width {z['width'][0]}/{z['width'][1]:g}/{z['width'][2]}, "
        f"height {z['height'][0]}/{z['height'][1]:g}/{z['height'][2]} (min/median/max){unread}"
    )
    print(
        f"channels {', '.join(f'{mode} {n}' for mode, n in sorted(z['modes'].items(), key=lambda kv: -kv[1]))} (PIL modes of those images)"
    )


def _open_splits(spec, shape) -> dict:
    """Every split of `spec` by name, opened for a model of `shape`; a split the data lacks: the reason, a string."""
    from vitkit.data import SPLITS
    from vitkit.errors import DataError

    opened = {}
    for split in SPLITS:
        try:
            opened[split] = spec.open(split, channels=shape.in_chans, image_size=shape.image_size[0])
        except DataError as err:
            opened[split] = str(err)
    return opened


def _whole_splits(config, shape) -> dict:
    """The splits the data holds of its own, each whole (nothing held out of train), by name; data without splits of
    its own: all of its images, under None."""
    import dataclasses

    from vitkit.data import DataSpec
    from vitkit.data.sources import is_flat

    opened = _open_splits(DataSpec.from_config(dataclasses.replace(config.data, val_fraction=0.0)), shape)
    whole = {split: images for split, images in opened.items() if not isinstance(images, str)}
    return {None: whole["train"]} if config.data.path and is_flat(config.data.path) else whole


def _refuse_shards_in(out: Path) -> None:
    """A folder that already holds shards is refused: old and new shards would mix, and the source could be overwritten.
    Except shards this command left unfinished (the folder still marked): they are removed, and it starts afresh."""
    from vitkit.data.sources import clear_unfinished
    from vitkit.errors import DataError

    if out.exists() and not out.is_dir():
        raise DataError(f"--to-shards {out}: is a file; name a new or empty folder to write the shards into")
    clear_unfinished(out)
    if out.is_dir() and (held := sorted(p.name for p in out.iterdir() if p.suffix in (".tar", ".parquet"))):
        raise DataError(
            f"--to-shards {out}: the folder already holds shards ({', '.join(held[:3])}{', ...' * (len(held) > 3)}); "
            "write to an empty or new folder"
        )
    if (out / "classes.txt").exists():  # someone's own list of names, which the shards' would replace
        raise DataError(
            f"--to-shards {out}: the folder already holds classes.txt, which the shards' class names would "
            "replace; write to an empty or new folder"
        )


def _to_shards(sets: dict, out: Path, per_shard: int, seed: int, on_error: str = "skip") -> dict:
    """Write each set as tar shards into `out` (SPLIT-NNNNNN.tar; a set without a split: shard-NNNNNN.tar) + classes.txt,
    printing a line per set (`run` has refused a folder that already holds shards, before reading anything)."""
    from vitkit.data import BadFiles
    from vitkit.data.sources import finish_writing, write_tar_shards
    from vitkit.errors import DataError

    names = {tuple(images.class_names) for images in sets.values()}
    if len(names) > 1:
        raise DataError(
            f"--to-shards: the splits name different classes ({'; '.join(', '.join(n) for n in sorted(names))}); "
            "write one with --split"
        )
    written, bad = {}, BadFiles(on_error, hint="; remove or replace it, or skip such files (data.on_error=skip)")
    for split, images in sets.items():
        prefix = split or "shard"
        before = len(bad)
        files = write_tar_shards(images, out, per_shard=per_shard, seed=seed, prefix=prefix, finish=False, bad=bad)
        left_out = len(bad) - before
        written[prefix] = {
            "files": len(files),
            "images": len(images) - left_out,
            "source": images.source,
            "selection": images.selection,
            "unreadable_left_out": left_out,
        }
        what = f"of the {split} split ({images.source}, {images.selection})" if split else f"(all of {images.source})"
        unread = f" ({left_out} unreadable left out)" if left_out else ""
        print(
            f"wrote {len(images) - left_out:,} images {what}{unread} as {len(files)} tar shard(s): "
            f"{out}/{prefix}-{{000000..{len(files) - 1:06d}}}.tar"
        )
    finish_writing(out)  # every split is in place: the folder reads as data from now on
    print(f"wrote {out / 'classes.txt'}: {len(next(iter(names)))} class names")
    return {
        "dir": str(out),
        "files": sum(w["files"] for w in written.values()),
        "images": sum(w["images"] for w in written.values()),
        **({"unreadable": [{"path": p, "error": e} for p, e in bad.files.items()]} if len(bad) else {}),
        "sets": written,
    }
