"""`vitkit eval`: top-1, top-5, per-class accuracy and a confusion-matrix PNG of a checkpoint on a dataset split."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from ._precision import add_precision
from ._request import request_of
from .predict import add_keep_aspect

if TYPE_CHECKING:
    from vitkit.evaluate.requests import EvalRequest


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate a checkpoint: top-1/top-5, per-class accuracy, confusion matrix",
        description="Evaluate a checkpoint (a run directory: its final/ model; a step checkpoint; any checkpoint file) on one split of the data it was trained on (or --data).",
        epilog="example: vitkit eval runs/demo --data /usr/share/datasets/fashion-mnist --split test --json",
    )
    _add_data_flags(p)
    _add_run_flags(p)
    _add_output_flags(p)
    p.set_defaults(run=run)


def _add_data_flags(p: argparse.ArgumentParser) -> None:
    """What is scored: the checkpoint, the data, the split."""
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


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    """How the model runs over the images."""
    p.add_argument("--batch-size", type=int, default=256, help="images per forward pass (default 256)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    add_keep_aspect(p)
    p.add_argument(
        "--threads", type=int, default=0, help="CPU threads (default: torch's choice; 1 is faster on a busy machine)"
    )


def _add_output_flags(p: argparse.ArgumentParser) -> None:
    """What is written and printed, and how labels and precision are read."""
    p.add_argument(
        "--confusion",
        metavar="PNG",
        help="where to write the confusion-matrix PNG (default: RUN/eval/confusion_<split>.png "
        "beside the model, confusion_<split>_<precision>.png at another precision than fp32)",
    )
    p.add_argument("--json", action="store_true", help="print the metrics as one JSON object on the last line")
    p.add_argument(
        "--threshold",
        type=float,
        default=0.5,
        help="a multi-label model: the probability from which a class counts as predicted, for precision, recall "
        "and F1 (default 0.5; mAP needs none)",
    )
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


def request(args: argparse.Namespace) -> EvalRequest:
    """The typed request of `vitkit eval`'s flags."""
    from vitkit.evaluate.requests import EvalRequest

    return request_of(EvalRequest, args)


def run(args: argparse.Namespace) -> int:
    from vitkit.evaluate.scoring import score_checkpoint

    scored = score_checkpoint(request(args))
    for line in scored.lines:
        print(line)
    if args.json:
        print(json.dumps(scored.result))
    if scored.error is not None:
        raise scored.error
    return 0
