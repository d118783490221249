"""What `vitkit fewshot`, `vitkit linear-probe` and `vitkit knn` share: options, the model and the splits."""

from __future__ import annotations

import argparse

from ._precision import add_precision

DATA_HELP = "IDX folder, image folder (root/<class>/... or with train/val/test folders) or .csv/.jsonl list (default: the data the checkpoint was trained on)"


def numbers(kind: type):
    """argparse type for a comma-separated list, e.g. '1,5,10,25'."""

    def parse(text: str) -> list:
        try:
            values = [kind(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {kind.__name__} values, got {text!r}") from None
        if not values or any(v <= 0 for v in values):
            raise argparse.ArgumentTypeError(f"expected positive values, got {text!r}")
        return values

    return parse


def add_common(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument(
        "checkpoint",
        metavar="CKPT",
        help="any checkpoint vitkit reads: run directory, its final/, a step checkpoint, .npz, timm file, HF directory",
    )
    p.add_argument("--data", metavar="PATH", help=DATA_HELP)
    p.add_argument(
        "--out",
        metavar="DIR",
        help=f"where {name}.json and {name}.md go (default: RUN/{name} for a run's model, else "
        f"beside the checkpoint; {name}_randomSEED with --random-init)",
    )
    p.add_argument(
        "--image-size",
        type=int,
        nargs="+",
        metavar="PX",
        help="evaluate at this resolution (H [W]); position embeddings are resampled",
    )
    p.add_argument(
        "--random-init",
        type=int,
        metavar="SEED",
        help="the same architecture with random weights (seeded): the baseline",
    )
    p.add_argument(
        "--batch-size", type=int, default=256, help="images per forward pass when extracting features (default 256)"
    )
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    add_precision(p)
    p.add_argument(
        "--val-fraction",
        type=float,
        default=None,
        help="share of train held out as 'val' where the data has no val split (default: as in training, else 0.1)",
    )
    p.add_argument(
        "--skip-unreadable",
        action="store_true",
        help="leave out image files that cannot be read (listed in the report) instead of stopping at the first",
    )


def add_splits(p: argparse.ArgumentParser, train_help: str) -> None:
    p.add_argument(
        "--train-split", default="train", choices=("train", "val", "test"), help=f"{train_help} (default train)"
    )
    p.add_argument("--test-split", default="test", choices=("train", "val", "test"), help="split scored (default test)")


def setup(args: argparse.Namespace):
    """(model, split_features options, open_split(name)) for the command's arguments."""
    import torch

    from vitkit.errors import ConfigError

    if getattr(args, "train_split", None) is not None and args.train_split == args.test_split:
        raise ConfigError(
            f"--train-split and --test-split are both {args.test_split}: the images the classifier is built from "
            "would be the images it is scored on, a figure that says nothing; choose two splits (e.g. --train-split "
            f"train --test-split {args.test_split if args.test_split != 'train' else 'val'})"
        )

    from vitkit.checkpoint import load_with_metadata
    from vitkit.data import BadFiles, DataSpec
    from vitkit.devices import pick_device
    from vitkit.models import build_model

    if args.out is not None:  # before the feature work, not after it (a file there: "File exists", minutes later)
        from vitkit.files import writable_folder

        writable_folder(args.out, "the reports", "choose another --out")
    if args.threads:
        torch.set_num_threads(args.threads)
    size = (
        None if args.image_size is None else tuple(args.image_size) if len(args.image_size) == 2 else args.image_size[0]
    )
    model, meta = load_with_metadata(args.checkpoint, image_size=size)
    if args.random_init is not None:
        torch.manual_seed(args.random_init)
        model = build_model(model.config).eval()
    c = args.model_config = model.config
    args.input_size = list(c.image_size)  # said in every report: --image-size reads the features at another resolution
    args.bad = BadFiles("skip" if args.skip_unreadable else "fail", hint="; --skip-unreadable leaves such files out")
    features = {
        "batch_size": args.batch_size,
        "device": pick_device(args.device),
        "crop_pct": meta.get("preprocess", {}).get("crop_pct", 1.0),
        "precision": args.precision,
        "calibration": args.calibration,
        "bad": args.bad,
    }
    args.meta = meta
    args.spec = DataSpec.from_checkpoint(meta, args.checkpoint, data=args.data, val_fraction=args.val_fraction)

    def open_split(split: str, flag: str = "--train-split"):
        return args.spec.open(split, channels=c.in_chans, image_size=c.image_size[0], flag=flag)

    return model, features, open_split


def finish(args: argparse.Namespace, name: str, result: dict, title: str, scored) -> None:
    """Write NAME.json and NAME.md, print the table and the result as JSON on the last line."""
    import json

    from vitkit.checkpoint.runs import data_tag, report_dir
    from vitkit.evaluate.metrics import report_markdown, write_report
    from vitkit.evaluate.provenance import Against, scored_against_training
    from vitkit.train.finetune import picked_on

    result = {
        "checkpoint": str(args.checkpoint),
        "random_init": args.random_init,
        "data": args.spec.where,
        "image_size": args.input_size,
        **result,
    }
    if len(args.bad):
        result["unreadable"] = [{"path": p, "error": e} for p, e in args.bad.files.items()]
    names = {str(p) for p in scored.paths} if scored.paths is not None else set()
    here = sum(path in names for path in args.bad.files)  # of the scored split; the others', of the images fitted on
    skipped = f"; {here:,} unreadable left out" if here else ""
    title += f" on {result['split']} of {args.spec.where} ({len(scored):,} image{'s' * (len(scored) != 1)}: {scored.source}, {scored.selection}{skipped})"
    if elsewhere := len(args.bad) - here:
        title += f"; {elsewhere:,} unreadable image{'s' * (elsewhere != 1)} of the other splits it read left out"
    if args.random_init is not None:
        title += f" (its architecture, randomly initialised with seed {args.random_init})"
    warning = picked_on(args.checkpoint, result["split"], scored, args.meta)
    warning = None if args.random_init is not None else warning  # random weights: nothing was picked
    result["picked_on_this_split"] = warning is not None
    h, w = args.input_size
    if "precision" in result:  # what read the features, at which resolution
        title += f"\n\nFeatures read at {result['precision']}, at {h}x{w} px."
    if warning:
        title += f"\n\n{warning[0].upper()}{warning[1:]}."
    against = (
        Against()
        if args.random_init is not None
        else scored_against_training(args.meta, args.checkpoint, result["split"], scored, args.model_config)
    )
    against.record(result)  # the features of images the backbone trained on, scored as held out; splits changed since
    for note in against.notes(result["split"]):
        note = note[len("note: ") :]
        title += f"\n\n{note[0].upper()}{note[1:]}."
    markdown = report_markdown(result, title)
    # never over the report of the run's own data, nor over a trained model's
    folder = (
        name + data_tag(args.spec.path, args.meta) + ("" if args.random_init is None else f"_random{args.random_init}")
    )
    if args.precision != "fp32":  # nor over its fp32 report
        folder += f"_{args.precision}"
    if args.image_size is not None:  # nor over the report at the model's own resolution
        folder += f"_{h}px" if h == w else f"_{h}x{w}px"
    paths = write_report(args.out or report_dir(args.checkpoint, folder), name, result, markdown)
    print(markdown)
    print(f"wrote {paths[0]} and {paths[1]}")
    print(json.dumps(result))
