"""What `vitkit eval` computes and writes: top-1, top-5, per-class accuracy and the confusion-matrix PNG of a
checkpoint on one split of its data, set against its training data; the lines that report them."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vitkit.evaluate.baseline import compared_lines
from vitkit.evaluate.metrics import balance_lines, class_balance
from vitkit.evaluate.provenance import picked_on, scored_against_training
from vitkit.evaluate.requests import EvalRequest


@dataclass
class Scored:
    """What `score_checkpoint` found: the JSON result, the lines that say it, and the error of a confusion matrix that
    could not be written (raised once the scores are shown, None where it was written)."""

    result: dict
    lines: list[str]
    error: Exception | None = None


def score_checkpoint(request: EvalRequest) -> Scored:
    """Score `request.checkpoint` on a split of its data, as `vitkit eval` asks; it warns where the scored images
    picked the model in a fine-tuning sweep."""
    import torch

    from vitkit.checkpoint import load_with_metadata, refuse_untrained_head
    from vitkit.checkpoint.native import is_multi_label
    from vitkit.checkpoint.runs import step_of
    from vitkit.data import BadFiles
    from vitkit.data.images import crop_of
    from vitkit.devices import pick_device
    from vitkit.evaluate.metrics import evaluate
    from vitkit.files import writable

    if request.threads:
        torch.set_num_threads(request.threads)
    model, meta = load_with_metadata(request.checkpoint)
    refuse_untrained_head(meta, request.checkpoint, model)
    device = pick_device(request.device)
    if is_multi_label(meta):  # a sigmoid per class: ranked (AP) and thresholded (F1), no confusion matrix
        return score_multilabel(request, model, meta, device)
    spec, which, split = open_scored_split(request, meta, model.config)
    crop_pct = crop_of(meta)  # the checkpoint's resize, filter and crop
    bad = BadFiles("skip" if request.skip_unreadable else "fail", hint="; --skip-unreadable scores without such files")
    batches, runner, reference = _runners(request, model, meta, spec, which, split, device, crop_pct, bad)
    step = step_of(request.checkpoint)
    png = confusion_path(request, which, spec, meta, step)
    writable(png, "the confusion matrix", "pass --confusion PATH to write it elsewhere")  # before the images are scored
    metrics = evaluate(
        model.to(device), batches, crop_pct=crop_pct, runner=runner, reference=reference, keep_size=request.keep_aspect
    )
    class_names = meta.get("class_names") or split.class_names
    skipped = f", {len(bad)} unreadable skipped" if len(bad) else ""
    data = f"{which} of {spec.where}: {metrics['n']} images{skipped}; {runner.description}"
    unwritten = _write_confusion(metrics["confusion"], class_names, png, data)
    result = _result(request, step, spec, which, split, metrics, class_names, png, unwritten, runner, bad, reference)
    warning = picked_on(request.checkpoint, which, split, meta)
    result["picked_on_this_split"] = warning is not None
    against = scored_against_training(meta, request.checkpoint, which, split, model.config)
    against.record(result)
    head = f"{which} of {spec.where} ({metrics['n']} images: {split.source}, {split.selection}{skipped}; "
    lines = _lines(request, step, head, which, metrics, result, class_names, reference, runner)
    lines.append(f"confusion matrix: {png}" if not unwritten else f"confusion matrix: not written ({png}: {unwritten})")
    baseline = pixel_baseline(request, meta, model.config, split, which, crop_pct, bad, metrics["top1"])
    if baseline is not None:  # a run of train.baseline: its pixel baseline on these images
        result["baseline"] = baseline
        lines += compared_lines(baseline)
    lines += ([warning] if warning else []) + against.notes(which) + _blank_notes(split, model.config, which, result)
    return Scored(result, lines, _unwritten_error(png, unwritten))


def _blank_notes(split, config, which: str, result: dict) -> list[str]:
    """A note where partly transparent scored images are one flat colour on the model's background (`blank_on`), also
    in the JSON; none otherwise."""
    from vitkit.data.scan import blank_on, blank_words, other_background

    blank, clear = blank_on(split, config.background, config.in_chans)
    if not blank:
        return []
    result["blank_on_background"] = {"images": blank, "transparent": clear}
    said = blank_words(blank, clear, config.background, f"{which} images")
    return [f"note: {said}; a model trained with model.background={other_background(config.background)} sees them"]


def pixel_baseline(request: EvalRequest, meta: dict, config, split, which: str, crop_pct: float, bad, top1: float):
    """The pixel baseline of a run that fitted one (train.baseline: its checkpoint records it), fitted again as the run
    fitted it, on the checkpoint's training split, and scored on the images of `split` that the model was scored on,
    beside the model's `top1`; None for a checkpoint that records none. Where the training data cannot be read, the
    record says so."""
    recorded = meta.get("baseline")
    if not isinstance(recorded, dict) or "kind" not in recorded:
        return None
    import torch

    from vitkit.data import BadFiles, DataSpec, eval_batches
    from vitkit.data.spec import without_advice
    from vitkit.errors import DataError
    from vitkit.evaluate.baseline import compared, fit_and_score, stem_advice

    def read(part):  # the scored split as the model read it; unreadable training files left out, as training did
        quiet = bad if part is split else BadFiles("skip")
        return eval_batches(
            part, request.batch_size, torch.device("cpu"), channels=config.in_chans, size=config.image_size,
            crop_pct=crop_pct, bad=quiet, background=config.background,
        )  # fmt: skip

    try:
        trained = DataSpec.from_checkpoint(meta, request.checkpoint)
        train = trained.open(trained.train_split, channels=config.in_chans, image_size=config.image_size)
        train = model_labels(train, meta.get("class_names"), request.checkpoint)
    except DataError as err:
        return {"skipped": f"not fitted: its training data cannot be read ({without_advice(err)})"}
    seed = recorded.get("seed", 0)
    record = fit_and_score(train, split, read, config.num_classes, names=(trained.train_split, which), seed=seed)
    return compared(record, top1, advice=stem_advice(config))


def open_scored_split(request: EvalRequest, meta: dict, config):
    """(the data spec, the split's name, the split with labels numbered as the model's classes) that `request` names,
    its images at the model's (H, W) where they are made at a size (synthetic data)."""
    from vitkit.data import DataSpec
    from vitkit.data.sources import is_flat
    from vitkit.errors import DataError

    spec = DataSpec.from_checkpoint(meta, request.checkpoint, data=request.data, val_fraction=request.val_fraction)
    flat = request.data is not None and is_flat(spec.path)
    which = request.split or ("all" if flat else "test")
    if which == "all" and not flat:
        raise DataError(
            f"--split all: takes every image of a --data folder or list without splits of its own; {spec.where} "
            "has splits: choose one with --split"
        )
    size = config.image_size
    if which == "all":  # the folder, list or shards as one set
        whole = dataclasses.replace(spec, val_fraction=0.0, train_images=None)
        split = whole.open("train", channels=config.in_chans, image_size=size)
    else:
        split = spec.open(which, channels=config.in_chans, image_size=size)
    # by name where the checkpoint names its classes
    split = model_labels(split, meta.get("class_names"), request.checkpoint, request.labels_by_index)
    # by position: more classes than the model has
    if len(split) and not split.multi_label and int(split.labels.max()) >= config.num_classes:
        raise DataError(
            f"{split.source}: labels go up to {int(split.labels.max())} but {request.checkpoint} has "
            f"{config.num_classes} classes; evaluate it on the dataset it was trained for"
        )
    return spec, which, split


def score_multilabel(request: EvalRequest, model, meta: dict, device) -> Scored:
    """`vitkit eval` of a multi-label checkpoint: mAP, per-class AP, and precision, recall and F1 at --threshold."""
    from vitkit.checkpoint.runs import describe, step_of
    from vitkit.data import BadFiles
    from vitkit.data.images import crop_of
    from vitkit.evaluate.metrics import evaluate_multilabel

    spec, which, split = open_scored_split(request, meta, model.config)
    crop_pct = crop_of(meta)  # the checkpoint's resize, filter and crop
    bad = BadFiles("skip" if request.skip_unreadable else "fail", hint="; --skip-unreadable scores without such files")
    batches, runner, _ = _runners(request, model, meta, spec, which, split, device, crop_pct, bad)
    threshold = request.threshold
    # keep_aspect: each image at its own aspect ratio, on the patch grid
    m = evaluate_multilabel(
        model.to(device), batches, crop_pct=crop_pct, runner=runner, threshold=threshold, keep_size=request.keep_aspect
    )
    names, step = meta.get("class_names") or split.class_names, step_of(request.checkpoint)
    skipped = f", {len(bad)} unreadable skipped" if len(bad) else ""
    result = {
        "checkpoint": str(request.checkpoint),
        **({"step_checkpoint": step} if step else {}),
        "data": spec.where,
        "split": which,
        "images": split.describe(),
        "problem_type": meta["problem_type"],
        **{k: m.get(k) for k in ("n", "map", "f1", "top1", "top5", "loss", "threshold")},
        "precision_at_threshold": m.get("precision"),
        "recall_at_threshold": m.get("recall"),
        "per_class_ap": dict(zip(names, m.get("per_class_ap", []))),
        "per_class_n": dict(zip(names, m.get("per_class_n", []))),
        "precision": runner.description,
    }
    head = f"{which} of {spec.where} ({m['n']} images: {split.source}, {split.selection}{skipped}; "
    lines = [
        f"{describe(request.checkpoint, step)} on {head}{runner.description}): mAP {m['map']:.4f}  F1 {m['f1']:.4f} "
        f"at {threshold:g} (precision {result['precision_at_threshold']:.4f}, recall "
        f"{result['recall_at_threshold']:.4f})  top-1 {m['top1']:.4f}"
    ]
    width = max(len(n) for n in names)
    for name, ap in result["per_class_ap"].items():
        count = result["per_class_n"][name]
        lines.append(
            f"  {name:<{width}}  " + ("-       (no images)" if ap is None else f"AP {ap:.4f}  ({count:,} images)")
        )
    warning = picked_on(request.checkpoint, which, split, meta)
    result["picked_on_this_split"] = warning is not None
    # copies of training images among the scored ones, and splits changed since it trained: as single-label eval says
    against = scored_against_training(meta, request.checkpoint, which, split, model.config)
    against.record(result)
    return Scored(result, lines + ([warning] if warning else []) + against.notes(which))


def _runners(request: EvalRequest, model, meta: dict, spec, which: str, split, device, crop_pct: float, bad):
    """(the batches of `split`, the runner at --precision, the fp32 runner of --compare-fp32 or None)."""
    from vitkit.data import DataSpec, eval_batches
    from vitkit.inference.precision import prepare
    from vitkit.inference.predict import FiniteOutputs

    c = model.config
    keep = request.keep_aspect
    if keep:  # each image at its aspect ratio: batches of consecutive images of one size
        batches = aspect_batches(split, request.batch_size, device, c, crop_pct, bad)
    else:
        batches = eval_batches(
            split,
            request.batch_size,
            device,
            channels=c.in_chans,
            size=c.image_size,
            crop_pct=crop_pct,
            bad=bad,
            background=c.background,
        )
    count = math.ceil(len(split) / request.batch_size)

    # int8's calibration images: training images, never the ones scored (for "all", those the checkpoint records)
    def training_images():  # read only where int8 calibrates: the recorded data may be gone where --data names other data
        trained = DataSpec.from_checkpoint(meta, request.checkpoint) if which == "all" else spec
        return split if which == "train" else trained.open("train", channels=c.in_chans, image_size=c.image_size)

    images = int8_calibration(request.precision, request.calibration, model, training_images, crop_pct=crop_pct)
    compile = False if keep else None  # a compiled graph would be rebuilt for every image size
    runner = prepare(model, request.precision, device=device, batches=count, calibration=images, compile=compile)
    reference = prepare(model, "fp32", device=device, batches=count, compile=compile) if request.compare_fp32 else None
    # scores of outputs that are not numbers would be printed as figures: such an output ends the command instead
    return batches, FiniteOutputs(runner), reference and FiniteOutputs(reference)


def aspect_batches(split, batch_size: int, device, c, crop_pct: float, bad):
    """(uint8 images, labels) of `split`'s files, each image at its aspect ratio on the patch grid of a model of config
    `c` (`dynamic_img_size`); a batch holds consecutive images of one size, at most `batch_size`. A file that cannot
    be read goes to `bad` (a BadFiles: it stops the evaluation or is skipped)."""
    import torch

    from vitkit.errors import ConfigError, DataError
    from vitkit.inference.classifier import aspect_pixels, refuse_fixed_size

    refuse_fixed_size(c)
    if split.paths is None:
        raise ConfigError(
            f"--keep-aspect: {split.source or 'the data'} is held in memory at one size (IDX, synthetic), so its "
            "images have no aspect ratio of their own; leave --keep-aspect out for it"
        )
    run: list[tuple[torch.Tensor, int]] = []
    for i, (path, label) in enumerate(zip(split.paths, split.labels.tolist())):
        try:
            pixels = aspect_pixels(path, c, crop_pct)
        except DataError as err:
            bad.report([(i, str(path), str(err))])
            continue
        if run and (pixels.shape != run[0][0].shape or len(run) == batch_size):
            yield torch.stack([p for p, _ in run]).to(device), torch.tensor([y for _, y in run], device=device)
            run = []
        run.append((pixels, label))
    if run:
        yield torch.stack([p for p, _ in run]).to(device), torch.tensor([y for _, y in run], device=device)


def int8_calibration(precision: str, n: int, model, training_split: Callable, *, crop_pct: float):
    """int8's calibration images: `n` images of `training_split()` (called only for int8); None for the other
    precisions."""
    if precision != "int8":
        return None
    from vitkit.inference.predict import calibration_images

    return calibration_images(training_split(), model, n=n, crop_pct=crop_pct)


def confusion_path(request: EvalRequest, which: str, spec, meta: dict, step: str | None) -> Path:
    """--confusion, else RUN/eval/<confusion_name> beside the model."""
    from vitkit.checkpoint.runs import report_dir

    if request.confusion:
        return Path(request.confusion)
    return report_dir(request.checkpoint, "eval") / confusion_name(which, spec, meta, step, request.precision)


def confusion_name(which: str, spec, meta: dict, step: str | None, precision: str) -> str:
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


def _write_confusion(confusion, class_names: list[str], png: Path, data: str) -> str | None:
    """Draw the confusion matrix into `png`; why it could not be written (a full disk, no matplotlib), else None."""
    from vitkit.errors import first_line
    from vitkit.files import WriteError
    from vitkit.plots import missing, plot_confusion

    if why := missing():
        return why
    try:  # a full disk now: the scores are still printed, then the error
        plot_confusion(confusion, class_names, png, data=data)
    except (WriteError, OSError) as err:
        return err.reason if isinstance(err, WriteError) else (err.strerror or first_line(err))
    return None


def _unwritten_error(png: Path, unwritten: str | None):
    from vitkit.errors import CheckpointError
    from vitkit.plots import NO_MATPLOTLIB

    if not unwritten or unwritten == NO_MATPLOTLIB:  # a figure left out by choice of extras: no failure
        return None
    return CheckpointError(
        f"{png}: the confusion matrix cannot be written ({unwritten}; is the disk full?); the scores above "
        "are complete; free some space or pass --confusion PATH to write it elsewhere"
    )


def _result(
    request: EvalRequest, step, spec, which, split, metrics, class_names, png, unwritten, runner, bad, reference
) -> dict:
    """The JSON object of `vitkit eval --json`."""
    result = {
        "checkpoint": str(request.checkpoint),
        **({"step_checkpoint": step} if step else {}),
        "data": spec.where,
        "split": which,
        "images": split.describe(),
        "n": metrics["n"],
        "top1": metrics["top1"],
        "top5": metrics["top5"],
        "loss": metrics["loss"],
        "per_class": dict(zip(class_names, metrics["per_class"])),
        "per_class_n": dict(zip(class_names, [sum(row) for row in metrics["confusion"]])),
        # classes of unlike sizes: the balanced top-1 and what the most common class alone scores
        "balance": class_balance(metrics["confusion"], class_names),
        "confusion_png": None if unwritten else str(png),
        "precision": runner.description,
        **({"unreadable": [{"path": p, "error": e} for p, e in bad.files.items()]} if len(bad) else {}),
    }
    if reference is not None:
        result.update({k: metrics[k] for k in ("reference_top1", "top1_delta", "agreement")})
    return result


def _lines(
    request: EvalRequest, step, head: str, which: str, metrics, result: dict, class_names, reference, runner
) -> list[str]:
    """The scores in words: the model and its images, the fp32 comparison, one line per class."""
    from vitkit.checkpoint.runs import describe

    lines = [
        f"{describe(request.checkpoint, step)} on {head}{runner.description}): top-1 {metrics['top1']:.4f}"
        + (f"  top-5 {metrics['top5']:.4f}" if len(class_names) > 5 else "")
    ]
    if reference is not None:
        lines.append(
            f"against fp32 on the same {metrics['n']} {which} images: fp32 top-1 {metrics['reference_top1']:.4f}, "
            f"difference {100 * metrics['top1_delta']:+.2f} points, same prediction on {100 * metrics['agreement']:.2f}%"
        )
    lines += balance_lines(result["balance"], metrics["top1"])
    width = max(len(n) for n in class_names)
    counts = result["per_class_n"]
    for name, acc in result["per_class"].items():
        images = f"{counts[name]:,} image" + "s" * (counts[name] != 1)
        lines.append(f"  {name:<{width}}  {'-       (no images)' if acc is None else f'{acc:.4f}  ({images})'}")
    return lines


def model_labels(split, names: list[str] | None, checkpoint, by_index: bool = False):
    """`split` with labels numbered as the model's classes `names`, matched by name (a val/ or --data folder that
    lacks some classes, or orders them otherwise, is still scored right); DataError where a class of the data is
    not the model's. A checkpoint without class names, or `by_index` (--labels-by-index), takes labels as they are."""
    from vitkit.data.split import class_name, on_classes
    from vitkit.errors import DataError

    if not names or by_index or list(split.class_names) == list(names):
        return split
    names = [class_name(n) for n in names]  # a checkpoint of an older vitkit may hold a folder's NFD names
    unknown = [n for n in split.class_names if n not in names]
    if unknown:
        shown = ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")
        raise DataError(
            f"{split.source}: class {unknown[0]!r}{f' (and {len(unknown) - 1} more)' if len(unknown) > 1 else ''} is not one of "
            f"{checkpoint}'s classes ({shown}); evaluate it on data of its classes, or pass --labels-by-index if the "
            "data names the same classes otherwise, in the same order"
        )
    return on_classes(split, names)
