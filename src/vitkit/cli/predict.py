"""`vitkit predict`: the top-5 classes of each image, with probabilities; for a multi-label model every class over
--threshold."""

from __future__ import annotations

import argparse
import glob
import json
import sys

from ._precision import add_precision, check_threshold

CKPT_HELP = (
    "run directory, its final/, a step checkpoint, a checkpoint file of any format, or a hub name "
    "(hf-hub:ORG/NAME[@REV], timm's MODEL.TAG; its preprocessing is the source's)"
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        help="top-5 labels with probabilities for image files",
        description="Classify image files with a checkpoint; class names and preprocessing come from the checkpoint.",
        epilog="example: vitkit predict runs/demo shirt.png boot.jpg\n\n"
        "An image that cannot be read (missing, empty, truncated, not an image, over the pixel limit) is one\n"
        "line on stderr naming it; the other images still print, and the exit code is 2.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("checkpoint", metavar="CKPT", help=CKPT_HELP)
    p.add_argument(
        "images",
        nargs="+",
        metavar="IMAGE",
        help="image files, folders (searched recursively, sorted) or quoted patterns ('photos/**/*.jpg'); any mode: "
        "grayscale, RGB(A), palette, 16-bit",
    )
    _add_answer_flags(p)
    output = p.add_mutually_exclusive_group()
    output.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per image (image, top, precision) instead of text, which ends with how many images and what ran",
    )
    output.add_argument(
        "--csv",
        metavar="FILE",
        help="write each image's answer to FILE (image,label,prob,label_2,prob_2 ...; multi-label: image,labels,probs) "
        "instead of printing it; a list vitkit reads back as data",
    )
    _add_how_it_runs(p)
    p.set_defaults(run=run)


def _add_how_it_runs(p: argparse.ArgumentParser) -> None:
    """Threads, batch size, device, image size, precision."""
    p.add_argument(
        "--threads", type=int, default=0, help="CPU threads (default: torch's choice; 1 is faster on a busy machine)"
    )
    p.add_argument("--batch-size", type=int, default=32, help="images per forward pass (default 32)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    add_keep_aspect(p)
    add_precision(p)
    p.add_argument(
        "--calibration-data",
        metavar="PATH",
        help="int8: data whose training images calibrate it, any data vitkit reads "
        "(default: the data the checkpoint was trained on)",
    )


def add_keep_aspect(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--keep-aspect",
        action="store_true",
        help="a model with model.dynamic_img_size: read each image at its own aspect ratio (about the model's number "
        "of pixels, sides rounded to the patch size) instead of a centre crop",
    )


def _add_answer_flags(p: argparse.ArgumentParser) -> None:
    """How many classes each image gets."""
    p.add_argument("--top", type=int, default=5, help="how many classes per image (default 5)")
    p.add_argument(
        "--threshold",
        type=float,
        default=0.5,
        help="a multi-label model (trained with train.objective=multi_label): print every class whose probability is "
        "at least this, instead of the top classes (default 0.5)",
    )


def run(args: argparse.Namespace) -> int:
    from vitkit.errors import DataError

    check_threshold(args.threshold)

    classifier = _load(args)
    paths, empty = _image_paths(args.images)
    for line in empty:  # a folder without images: said, and the other images still get their answer
        print(f"vitkit predict: error: {line}", file=sys.stderr, flush=True)
    failed, batch, read, answers = 0, [], [], []
    for path in paths:
        try:
            batch.append((path, classifier.pixels(path)))
            read.append(path)
        except DataError as err:  # one line naming the file; the other images still get their answer
            print(f"vitkit predict: error: {err}", file=sys.stderr, flush=True)
            failed += 1
        if len(batch) == args.batch_size:
            answers += _answer(classifier, batch, args)
            batch = []
    if batch:
        answers += _answer(classifier, batch, args)
    _finish(classifier, answers, args)
    _say_blank(read, classifier.model.config)
    return 2 if failed or empty else 0


def _finish(classifier, answers: list, args: argparse.Namespace) -> None:
    """--csv: the answers written to its file; text: what ran, once the first batch has built it."""
    from vitkit.files import write_text
    from vitkit.inference.predict import answers_csv

    n = f"{len(answers)} image{'s' * (len(answers) != 1)}"
    if args.csv and answers:
        write_text(args.csv, answers_csv(answers, args.top, classifier.multi_label))
        print(
            f"wrote {args.csv}: {n}, {'labels' if classifier.multi_label else 'top classes'} and probabilities ({classifier.runner.description})"
        )
    elif not args.json and answers:
        print(f"({n}; {classifier.runner.description})")


def _say_blank(paths: list[str], config) -> None:
    """A note on stderr where partly transparent images read (`paths`) are one flat colour on the model's background:
    the answers above are of blank images. At most 64 files are looked at (`blank_among`)."""
    from vitkit.data.scan import blank_among, blank_words

    blank, clear = blank_among(paths, config.background, config.in_chans)
    if blank:
        said = blank_words(len(blank), clear, config.background, "images")
        print(f"vitkit predict: note: {said} (e.g. {blank[0]})", file=sys.stderr, flush=True)


def _load(args: argparse.Namespace):
    """The Classifier of the checkpoint at --precision, after --calibration-data is checked."""
    import torch

    from vitkit.errors import ConfigError
    from vitkit.inference.classifier import Classifier

    if args.calibration_data is not None and args.precision != "int8":
        raise ConfigError(
            f"--calibration-data: only --precision int8 calibrates (this is --precision {args.precision}); "
            "leave it out, or add --precision int8"
        )
    if args.threads:
        torch.set_num_threads(args.threads)
    return Classifier.load(
        args.checkpoint,
        precision=args.precision,
        device=args.device,
        calibration=args.calibration,
        calibration_data=args.calibration_data,
        data_flag="--calibration-data PATH",
        keep_aspect=args.keep_aspect,
    )


def _image_paths(images: list[str]) -> tuple[list[str], list[str]]:
    """The files given, the files a pattern given matches (`*`, `?`, `[...]`, `**`: quoted, the shell left it), and the
    images of the folders given (searched recursively, sorted); and the one-line errors of the folders that hold none
    (whatever their names: a folder named dir.png is a folder)."""
    from vitkit.data.images import find_images
    from vitkit.errors import DataError
    from vitkit.paths import local_path

    paths, empty = [], []
    for arg in images:
        path = local_path(arg, DataError)
        # a quoted pattern the shell left as it was: expanded here
        if not path.exists() and any(c in arg for c in "*?["):
            found = sorted(glob.glob(str(path), recursive=True))
            # none: the pattern itself, said as a file not found
            paths += found or [arg]
            continue
        if not path.is_dir():
            paths.append(arg)
            continue
        try:
            paths += [str(p) for p in find_images([arg])]
        except DataError as err:
            empty.append(str(err))
    return paths, empty


def _answer(classifier, batch: list[tuple[str, object]], args: argparse.Namespace) -> list:
    """Print the top --top classes of each image of `batch` (a multi-label model: every class of at least --threshold),
    as text or one JSON object per image (with --csv, nothing); each image's (path, [(class, probability) ...])."""
    pixels, multi = [pixels for _, pixels in batch], classifier.multi_label
    answers = classifier.labels(pixels, args.threshold) if multi else classifier.top(pixels, k=args.top)
    for (path, _), top in zip(batch, answers):
        if args.csv:
            continue
        if args.json:
            entry = {
                "image": path,
                "labels" if multi else "top": [{"label": n, "prob": prob} for n, prob in top],
                **({"threshold": args.threshold} if multi else {}),
                "precision": classifier.runner.description,
            }
            print(json.dumps(entry))
            continue
        print(path)
        for name, prob in top:
            print(f"  {prob:7.2%}  {name}")
        if multi and not top:
            print(f"  (no class at {args.threshold:.0%} or more)")
    sys.stdout.flush()
    return [(path, top) for (path, _), top in zip(batch, answers)]
