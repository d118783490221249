"""`vitkit knn`: cosine k-nearest-neighbour accuracy of a checkpoint's frozen features."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from ._frozen import add_common, add_splits, numbers
from ._request import as_tuple, image_hw, request_of

if TYPE_CHECKING:
    from vitkit.evaluate.requests import KnnRequest

EPILOG = """\
Every test image's pre-logits feature is compared (cosine similarity) with the features of the whole
training split; its k nearest neighbours vote, each with weight exp(similarity / --temperature)
(--temperature 0: one vote each, ties to the lower class index).

examples:
  vitkit knn runs/demo --k 10,20,50
  vitkit knn ViT-B_16.npz --data ~/pets --image-size 224 --device cuda --out runs/pets-knn
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "knn",
        help="cosine k-NN accuracy of a checkpoint's frozen features",
        description="k-NN evaluation: cosine similarity of frozen pre-logits features to the training split. "
        "Writes knn.json and knn.md.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common(p, "knn")
    p.add_argument("--k", type=numbers(int), default=[10, 20], help="neighbours, comma-separated (default 10,20)")
    p.add_argument(
        "--temperature", type=float, default=0.07, help="vote weight exp(sim / T) (default 0.07; 0: uniform votes)"
    )
    add_splits(p, "split of the neighbours")
    p.set_defaults(run=run)


def request(args: argparse.Namespace) -> KnnRequest:
    """The typed request of `vitkit knn`'s flags."""
    from vitkit.evaluate.requests import KnnRequest

    return request_of(KnnRequest, args, image_size=image_hw(args.image_size), k=as_tuple(args.k))


def run(args: argparse.Namespace) -> int:
    from vitkit.evaluate.frozen import knn

    report = knn(request(args))
    print(report.markdown)
    print(f"wrote {report.paths[0]} and {report.paths[1]}")
    print(json.dumps(report.result))
    return 0
