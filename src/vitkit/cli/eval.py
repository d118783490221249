"""`vitkit eval`: top-1, top-5, per-class accuracy and a confusion-matrix PNG of a checkpoint on a dataset split."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

from vitkit.evaluate.provenance import scored_against_training

from ._precision import add_precision, calibration


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate a checkpoint: top-1/top-5, per-class accuracy, confusion matrix",
        description="Evaluate a checkpoint (a run directory: its final/ model; a step checkpoint; any checkpoint file) on one split of the data it was trained on (or --data).",
        epilog="example: vitkit eval runs/demo --data /usr/share/datasets/fashion-mnist --split test --json",
    )
    p.add_argument(
        "checkpoint",
        metavar="CKPT",
        help="run directory, its final/, a step checkpoint, or a checkpoint file of any format",
    )
    p.add_argument(
        "--data",
        metavar="PATH",
        help="any data vitkit reads: IDX folder, image folder, .csv/.jsonl list, shards ... "
        "(default: the data the checkpoint was trained on)",
    )
    p.add_argument(
        "--split",
        default=None,
        choices=("train", "val", "test", "all"),
        help="split to evaluate (default: test; only data kept apart from training is ever 'test'); 'all': every "
        "image of a --data folder or list without splits of its own, its default",
    )
    p.add_argument(
        "--val-fraction",
        type=float,
        default=None,
        help="held-out share for 'val' when the data has no val split (default: as in training, else 0.1)",
    )
    p.add_argument("--batch-size", type=int, default=256, help="images per forward pass (default 256)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    p.add_argument(
        "--threads", type=int, default=0, help="CPU threads (default: torch's choice; 1 is faster on a busy machine)"
    )
    p.add_argument(
        "--confusion",
        metavar="PNG",
        help="where to write the confusion-matrix PNG (default: RUN/eval/confusion_<split>.png "
        "beside the model, confusion_<split>_<precision>.png at another precision than fp32)",
    )
    p.add_argument("--json", action="store_true", help="print the metrics as one JSON object on the last line")
    p.add_argument(
        "--labels-by-index",
        action="store_true",
        help="score label i as the model's class i even where the data names its classes otherwise (default: by name)",
    )
    add_precision(p)
    p.add_argument(
        "--compare-fp32",
        action="store_true",
        help="also run the model in fp32 on the same images: report the top-1 difference and agreement",
    )
    p.add_argument(
        "--skip-unreadable",
        action="store_true",
        help="score without image files that cannot be read (damaged, over the pixel limit), naming them and saying "
        "how many images were scored; without it the first such file stops the evaluation",
    )
    p.set_defaults(run=run)


def _confusion_name(which: str, spec, meta: dict, step: str | None, precision: str) -> str:
    """confusion_SPLIT.png for the data the checkpoint trained on; for other data (--data) the folder's name and a
    digest of its path come too, for a step checkpoint its step_N, and for another precision than fp32 its name, so
    that the run's own figure of its final model in fp32 is not replaced by one of other images, another model or
    other arithmetic."""
    from vitkit.checkpoint.runs import data_tag

    return (
        f"confusion_{which}{data_tag(spec.path, meta)}"
        + (f"_{step}" if step else "")
        + (f"_{precision}" if precision != "fp32" else "")
        + ".png"
    )


def run(args: argparse.Namespace) -> int:
    import torch

    from vitkit.checkpoint import load_with_metadata, refuse_untrained_head
    from vitkit.checkpoint.runs import describe, report_dir, step_of
    from vitkit.data import BadFiles, DataSpec, eval_batches
    from vitkit.data.sources import is_flat
    from vitkit.devices import pick_device
    from vitkit.errors import CheckpointError, DataError, first_line
    from vitkit.evaluate.metrics import evaluate
    from vitkit.files import WriteError, writable
    from vitkit.inference.precision import prepare
    from vitkit.plots import plot_confusion
    from vitkit.train.finetune import picked_on

    if args.threads:
        torch.set_num_threads(args.threads)
    model, meta = load_with_metadata(args.checkpoint)
    refuse_untrained_head(meta, args.checkpoint, model)
    c = model.config
    device = pick_device(args.device)
    spec = DataSpec.from_checkpoint(meta, args.checkpoint, data=args.data, val_fraction=args.val_fraction)
    flat = args.data is not None and is_flat(spec.path)
    which = args.split or ("all" if flat else "test")
    if which == "all" and not flat:
        raise DataError(
            f"--split all: takes every image of a --data folder or list without splits of its own; {spec.where} "
            "has splits: choose one with --split"
        )
    if which == "all":  # the folder, list or shards as one set
        split = dataclasses.replace(spec, val_fraction=0.0, train_images=None).open(
            "train", channels=c.in_chans, image_size=c.image_size[0]
        )
    else:
        split = spec.open(which, channels=c.in_chans, image_size=c.image_size[0])
    split = _model_labels(split, meta.get("class_names"), args)  # by name where the checkpoint names its classes
    if len(split) and int(split.labels.max()) >= c.num_classes:  # by position: more classes than the model has
        raise DataError(
            f"{split.source}: labels go up to {int(split.labels.max())} but {args.checkpoint} has {c.num_classes} classes; "
            "evaluate it on the dataset it was trained for"
        )
    class_names = meta.get("class_names") or split.class_names
    crop_pct = meta.get("preprocess", {}).get("crop_pct", 1.0)
    bad = BadFiles("skip" if args.skip_unreadable else "fail", hint="; --skip-unreadable scores without such files")
    batches = eval_batches(
        split, args.batch_size, device, channels=c.in_chans, size=c.image_size, crop_pct=crop_pct, bad=bad
    )
    count = math.ceil(len(split) / args.batch_size)

    # int8's calibration images: training images, never the ones scored (for "all", those the checkpoint records)
    def training_images():  # read only where int8 calibrates: the recorded data may be gone where --data names other data
        trained = DataSpec.from_checkpoint(meta, args.checkpoint) if which == "all" else spec
        return split if which == "train" else trained.open("train", channels=c.in_chans, image_size=c.image_size[0])

    images = calibration(args, model, training_images, crop_pct=crop_pct)
    runner = prepare(model, args.precision, device=device, batches=count, calibration=images)
    reference = prepare(model, "fp32", device=device, batches=count) if args.compare_fp32 else None
    step = step_of(args.checkpoint)
    png = (
        Path(args.confusion)
        if args.confusion
        else report_dir(args.checkpoint, "eval") / _confusion_name(which, spec, meta, step, args.precision)
    )
    writable(png, "the confusion matrix", "pass --confusion PATH to write it elsewhere")  # before the images are scored
    metrics = evaluate(model.to(device), batches, crop_pct=crop_pct, runner=runner, reference=reference)
    skipped = f", {len(bad)} unreadable skipped" if len(bad) else ""
    try:  # a full disk now: the scores are still printed, then the error
        plot_confusion(
            metrics["confusion"],
            class_names,
            png,
            data=f"{which} of {spec.where}: {metrics['n']} images{skipped}; {runner.description}",
        )
        unwritten = None
    except (WriteError, OSError) as err:
        unwritten = err.reason if isinstance(err, WriteError) else (err.strerror or first_line(err))
    result = {
        "checkpoint": str(args.checkpoint),
        **({"step_checkpoint": step} if step else {}),
        "data": spec.where,
        "split": which,
        "images": split.describe(),
        "n": metrics["n"],
        "top1": metrics["top1"],
        "top5": metrics["top5"],
        "loss": metrics["loss"],
        "per_class": dict(zip(class_names, metrics["per_class"])),
        "per_class_n": (counts := dict(zip(class_names, [sum(row) for row in metrics["confusion"]]))),
        "confusion_png": None if unwritten else str(png),
        "precision": runner.description,
        **({"unreadable": [{"path": p, "error": e} for p, e in bad.files.items()]} if len(bad) else {}),
    }
    if reference is not None:
        result.update({k: metrics[k] for k in ("reference_top1", "top1_delta", "agreement")})
    warning = picked_on(args.checkpoint, which, split, meta)
    result["picked_on_this_split"] = warning is not None
    against = scored_against_training(meta, args.checkpoint, which, split, c)
    against.record(result)
    width = max(len(n) for n in class_names)
    print(
        f"{describe(args.checkpoint, step)} on {which} of {spec.where} ({metrics['n']} images: {split.source}, {split.selection}{skipped}; "
        f"{runner.description}): top-1 {metrics['top1']:.4f}"
        + (f"  top-5 {metrics['top5']:.4f}" if len(class_names) > 5 else "")
    )
    if reference is not None:
        print(
            f"against fp32 on the same {metrics['n']} {which} images: fp32 top-1 {metrics['reference_top1']:.4f}, "
            f"difference {100 * metrics['top1_delta']:+.2f} points, same prediction on {100 * metrics['agreement']:.2f}%"
        )
    for name, acc in result["per_class"].items():
        images = f"{counts[name]:,} image" + "s" * (counts[name] != 1)
        print(f"  {name:<{width}}  {'-       (no images)' if acc is None else f'{acc:.4f}  ({images})'}")
    print(f"confusion matrix: {png}" if not unwritten else f"confusion matrix: not written ({png}: {unwritten})")
    if warning:
        print(warning)
    for note in against.notes(which):
        print(note)
    if args.json:
        print(json.dumps(result))
    if unwritten:
        raise CheckpointError(
            f"{png}: the confusion matrix cannot be written ({unwritten}; is the disk full?); the scores above "
            "are complete; free some space or pass --confusion PATH to write it elsewhere"
        )
    return 0


def _model_labels(split, names: list[str] | None, args: argparse.Namespace):
    """`split` with labels numbered as the model's classes `names`, matched by name (a val/ or --data folder that
    lacks some classes, or orders them otherwise, is still scored right); DataError where a class of the data is
    not the model's. A checkpoint without class names, or --labels-by-index, takes labels as they are."""
    from vitkit.data.split import class_name, on_classes
    from vitkit.errors import DataError

    if not names or args.labels_by_index or list(split.class_names) == list(names):
        return split
    names = [class_name(n) for n in names]  # a checkpoint of an older vitkit may hold a folder's NFD names
    unknown = [n for n in split.class_names if n not in names]
    if unknown:
        shown = ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")
        raise DataError(
            f"{split.source}: class {unknown[0]!r}{f' (and {len(unknown) - 1} more)' if len(unknown) > 1 else ''} is not one of "
            f"{args.checkpoint}'s classes ({shown}); evaluate it on data of its classes, or pass --labels-by-index if the "
            "data names the same classes otherwise, in the same order"
        )
    return on_classes(split, names)
