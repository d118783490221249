"""The options `vitkit fewshot`, `vitkit linear-probe` and `vitkit knn` share (and `vitkit finetune` some of)."""

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
    """The checkpoint, the data and where the reports go; how the features are read."""
    _add_inputs(p, name)
    _add_reading(p)


def _add_inputs(p: argparse.ArgumentParser, name: str) -> None:
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


def _add_reading(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--batch-size", type=int, default=256, help="images per forward pass when extracting features (default 256)"
    )
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    add_precision(p)
    p.add_argument(
        "--pool",
        choices=("head", "cls", "mean", "cls_mean"),
        default=None,
        help="the frozen feature: head (what the head reads: CLIP's and SigLIP's pooled output), cls, mean (of the "
        "patch tokens) or cls_mean (both concatenated: DINOv2's linear protocol); default: the model's (feature_pool)",
    )
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
