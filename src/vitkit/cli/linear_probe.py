"""`vitkit linear-probe`: multinomial logistic regression on a checkpoint's frozen features."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from ._frozen import add_common, numbers
from ._request import as_tuple, image_hw, request_of

if TYPE_CHECKING:
    from vitkit.evaluate.requests import LinearProbeRequest

EPILOG = """\
Features are the pre-logits features, standardised with the training mean and std. One probe per --l2 is
fitted on the training split (full-batch L-BFGS, a convex problem); the one with the best accuracy on the
validation split is scored on --test-split. With --test-split val, l2 is picked on a held-out --val-fraction
of the training split instead, never on the images it is scored on.

examples:
  vitkit linear-probe runs/demo
  vitkit linear-probe ViT-B_16.npz --data ~/pets --l2 1e-4,1e-2 --device cuda --out runs/pets-probe
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "linear-probe",
        help="linear probe: logistic regression on a checkpoint's frozen features",
        description="Linear probe: multinomial logistic regression on frozen pre-logits features, l2 picked on "
        "validation data that is never the scored split. Writes linear_probe.json and linear_probe.md.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_common(p, "linear_probe")
    p.add_argument(
        "--l2",
        type=numbers(float),
        default=[1e-6, 1e-4, 1e-2, 1.0],
        help="L2 penalties to try, comma-separated (default 1e-6,1e-4,1e-2,1)",
    )
    p.add_argument("--max-iter", type=int, default=500, help="L-BFGS iterations per probe (default 500)")
    p.add_argument("--test-split", default="test", choices=("val", "test"), help="split scored (default test)")
    p.set_defaults(run=run)


def request(args: argparse.Namespace) -> LinearProbeRequest:
    """The typed request of `vitkit linear-probe`'s flags."""
    from vitkit.evaluate.requests import LinearProbeRequest

    return request_of(LinearProbeRequest, args, image_size=image_hw(args.image_size), l2=as_tuple(args.l2))


def run(args: argparse.Namespace) -> int:
    from vitkit.evaluate.frozen import linear_probe

    report = linear_probe(request(args))
    print(report.markdown)
    print(f"wrote {report.paths[0]} and {report.paths[1]}")
    print(json.dumps(report.result))
    return 0
