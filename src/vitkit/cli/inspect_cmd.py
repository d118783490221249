"""`vitkit inspect CKPT --images PATH --out DIR`: the paper's Fig. 7 and attention maps for a checkpoint."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ._request import as_tuple, image_hw, request_of

if TYPE_CHECKING:
    from vitkit.evaluate.requests import InspectRequest

DESCRIPTION = """\
Look inside a trained ViT (paper §4.5, App. D.7-D.8). Writes to DIR:
  patch_embedding_filters.png  first principal components of the patch embedding (Fig. 7 left)
  pos_embed_similarity.png     cosine similarity of each position embedding to all others (Fig. 7 centre)
  mean_attention_distance.png  attention distance in pixels per head against depth (Fig. 7 right)
  attention_rollout.png        attention rollout from the output token over --show images spread over the class
                               folders, each with its true (folder) and predicted label, "trained on" where
                               it is one of the model's training images, and a colour bar
  last_layer_attention.png     the last layer's raw attention per head over the same images
  inspection.npz, inspection.json  the numbers behind every figure
Without --images, the images are a split of the data the checkpoint records (test where it has one, else val; any
format vitkit reads, also IDX files and shards), taken in turn from each class and read as `vitkit eval` reads
them. Images are resized to the model's resolution (or --image-size) and normalised with its mean and std. The figures,
the printed line and inspection.json say which images, how many, and how many of them the model trained on.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "inspect",
        help="draw the paper's Fig. 7 (filters, position embeddings, attention distance) and attention maps",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_images(p)
    _add_figures(p)
    _add_running(p)
    p.set_defaults(run=run)


def _add_images(p: argparse.ArgumentParser) -> None:
    """The checkpoint and the images looked through."""
    p.add_argument(
        "checkpoint",
        metavar="CKPT",
        help="run directory, its final/, a step checkpoint, or a checkpoint file of any format",
    )
    p.add_argument(
        "--images",
        nargs="+",
        metavar="PATH",
        help="image files and/or folders (searched recursively, sorted); default: "
        "a split of the data the checkpoint records (--split)",
    )
    p.add_argument(
        "--split",
        choices=("train", "val", "test"),
        default=None,
        help="without --images: the split of the checkpoint's data (default test where the data has one, else val)",
    )
    p.add_argument(
        "--data", metavar="PATH", help="without --images: this data instead of the data the checkpoint records"
    )


def _add_figures(p: argparse.ArgumentParser) -> None:
    """Where the figures go and what they show."""
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="folder for the figures and numbers (created; files in it are replaced)",
    )
    p.add_argument(
        "--num-images",
        type=int,
        default=128,
        metavar="N",
        help="images averaged for the attention distance (default 128, as in the paper)",
    )
    p.add_argument(
        "--show", type=int, default=8, metavar="N", help="images drawn with their attention maps (default 8)"
    )
    p.add_argument(
        "--components",
        type=int,
        default=28,
        metavar="K",
        help="principal components of the filters to draw (default 28)",
    )
    p.add_argument(
        "--image-size",
        type=int,
        nargs="+",
        default=None,
        metavar="PX",
        help="inspect at this resolution (H [W]); position embeddings are interpolated (paper §3.2)",
    )


def _add_running(p: argparse.ArgumentParser) -> None:
    """How the model runs over the images."""
    p.add_argument(
        "--batch-size", type=int, default=32, help="images per forward pass; lower it to bound memory (default 32)"
    )
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default cpu)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: torch's choice)")
    p.add_argument(
        "--skip-unreadable",
        action="store_true",
        help="leave out image files that cannot be read (named in inspection.json, counted in the captions) instead of "
        "stopping at the first",
    )


def request(args: argparse.Namespace) -> InspectRequest:
    """The typed request of `vitkit inspect`'s flags."""
    from vitkit.evaluate.requests import InspectRequest

    return request_of(InspectRequest, args, image_size=image_hw(args.image_size), images=as_tuple(args.images))


def run(args: argparse.Namespace) -> int:
    from vitkit.evaluate.inspect_report import inspect_checkpoint

    for line in inspect_checkpoint(request(args)):
        print(line)
    return 0
