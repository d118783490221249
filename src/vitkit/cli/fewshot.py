"""`vitkit fewshot`: few-shot linear accuracy of frozen features (paper §4.1, the official evaluator)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from ._frozen import add_common, add_splits, numbers
from ._request import as_tuple, image_hw, request_of

if TYPE_CHECKING:
    from vitkit.evaluate.requests import FewshotRequest

EPILOG = """\
The evaluator: pre-logits features of `shots` training images per class (drawn per seed), standardised with
their mean and population std + 1e-5, a constant bias feature of 100 appended, targets 2*onehot-1, ridge
regression (lambda --l2) solved in closed form (primal when N >= D, else dual), prediction = argmax.
Features are extracted once, batched, in inference mode, only for the training images a draw uses.

examples:
  vitkit fewshot runs/demo --shots 1,5,10,25 --seeds 3
  vitkit fewshot runs/demo --random-init 0             the same architecture untrained: the baseline
  vitkit fewshot ViT-B_16.npz --data ~/pets --image-size 224 --out runs/pets-fewshot --device cuda
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fewshot",
        help="few-shot linear accuracy (1/5/10/25 shots) of a checkpoint's frozen features",
        description="Few-shot linear evaluation (paper §4.1): closed-form regularised least squares on frozen "
        "pre-logits features; mean and std over seeds for each shot count. Writes fewshot.json and fewshot.md.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common(p, "fewshot")
    p.add_argument(
        "--shots",
        type=numbers(int),
        default=None,
        help="training images per class, comma-separated (default 1,5,10,25: those the smallest class has images for)",
    )
    p.add_argument("--seeds", type=int, default=3, help="draws per shot count, seeds 0..N-1 (default 3)")
    p.add_argument("--l2", type=float, default=2.0**10, help="ridge regularisation lambda (default 2^10 = 1024)")
    add_splits(p, "split the shots come from")
    p.set_defaults(run=run)


def request(args: argparse.Namespace) -> FewshotRequest:
    """The typed request of `vitkit fewshot`'s flags."""
    from vitkit.evaluate.requests import FewshotRequest

    return request_of(FewshotRequest, args, image_size=image_hw(args.image_size), shots=as_tuple(args.shots))


def run(args: argparse.Namespace) -> int:
    from vitkit.evaluate.frozen import fewshot

    report = fewshot(request(args))
    print(report.markdown)
    print(f"wrote {report.paths[0]} and {report.paths[1]}")
    print(json.dumps(report.result))
    return 0
