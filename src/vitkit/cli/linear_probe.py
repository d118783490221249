"""`vitkit linear-probe`: multinomial logistic regression on a checkpoint's frozen features."""

from __future__ import annotations

import argparse

from ._frozen import add_common, finish, numbers, setup

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


def run(args: argparse.Namespace) -> int:
    from vitkit.data.split import hold_out
    from vitkit.errors import DataError
    from vitkit.evaluate.metrics import linear_probe_eval

    model, features, open_split = setup(args)
    train, test = open_split("train"), open_split(args.test_split, "--test-split")
    if args.test_split == "val":  # l2 is never picked on the images it is scored on: a share of train picks it
        if args.val_fraction == 0:
            raise DataError(
                "--val-fraction 0: with --test-split val, l2 is picked on a share of the training images held out; "
                "give a share above 0 (default 0.1)"
            )
        train, val = hold_out(train, args.spec.val_fraction or 0.1, args.spec.split_seed)
    else:
        val = open_split("val", "--val-fraction")
    for part, what in ((train, "fit the probe on"), (val, "pick l2 on")):
        if not len(part):
            raise DataError(
                f"{part.source}: no images to {what} ({part.selection}); raise --val-fraction, or score more data"
            )
    result = linear_probe_eval(model, train, val, test, l2s=args.l2, max_iter=args.max_iter, **features)
    finish(
        args,
        "linear_probe",
        {"split": args.test_split, "n": len(test), "test_split": args.test_split, **result},
        f"Linear probe of {args.checkpoint}",
        test,
    )
    return 0
