"""`vitkit convert SRC DST`: rewrite a checkpoint in another format (vitkit, Google .npz, timm, Hugging Face)."""

from __future__ import annotations

import argparse
from pathlib import Path

from vitkit.checkpoint import FORMATS, convert_checkpoint
from vitkit.errors import ConfigError
from vitkit.models.summary import count_parameters

from . import image_size_arg


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "convert",
        help="convert a checkpoint between formats: vitkit, npz (Google Flax), timm, hf (Hugging Face)",
        description="Read SRC in any supported format and write it to DST. The source format is detected from the "
        "content; the target format follows DST's suffix (.npz -> npz, .safetensors/.pth -> timm, "
        "otherwise a vitkit directory) unless --to says otherwise (hf writes a directory; timm, to a name that is no "
        "file's, timm's Hub folder). HF and timm folders get a model card (README.md). Class names and preprocessing "
        "travel with the weights: vitkit and HF config.json, safetensors metadata, else FILE.json beside the file; "
        "no local path does (the training data is named by its folder).",
    )
    _add_path_flags(p)
    _add_format_flags(p)
    p.set_defaults(run=run)


def _add_path_flags(p: argparse.ArgumentParser) -> None:
    """What is read and where it is written."""
    p.add_argument(
        "src",
        metavar="SRC",
        help="checkpoint file or directory to read (a run directory: its final/ model), or a hub name "
        "(hf-hub:ORG/NAME[@REV], timm's MODEL.TAG)",
    )
    p.add_argument(
        "dst",
        metavar="DST",
        nargs="?",
        help="file or directory to write, not SRC (an existing checkpoint there is replaced as a whole: a kill or a full disk leaves the "
        "old or the new; a directory holding anything else is refused)",
    )
    p.add_argument("--out", metavar="DST", default=None, help="DST given as an option, as `vitkit export` takes it")


def _add_format_flags(p: argparse.ArgumentParser) -> None:
    """The formats read and written, and what changes on the way: resolution, head."""
    p.add_argument(
        "--from", dest="src_format", choices=list(FORMATS), default=None, help="source format (default: detected)"
    )
    p.add_argument(
        "--to", dest="dst_format", choices=list(FORMATS), default=None, help="target format (default: from DST)"
    )
    p.add_argument(
        "--image-size",
        type=int,
        nargs="+",
        metavar="PX",
        default=None,
        help="resolution H [W]: resample the position embeddings to it, or name the grid of a non-square .npz",
    )
    p.add_argument(
        "--num-classes",
        type=int,
        default=None,
        help="replace the head by a zero-initialised one with this many classes, where the checkpoint's has another count "
        "(drops pre-logits; its class names go with it)",
    )


def run(args: argparse.Namespace) -> int:
    if args.dst is not None and args.out is not None and args.dst != args.out:
        raise ConfigError(f"DST: given twice ({args.dst} and --out {args.out}); give one")
    dst = args.dst or args.out
    if dst is None:
        raise ConfigError("DST: where to write is missing; e.g. vitkit convert SRC model.npz (or --out model.npz)")
    written = convert_checkpoint(
        args.src,
        dst,
        src_format=args.src_format,
        format=args.dst_format,
        image_size=image_size_arg(args.image_size),
        num_classes=args.num_classes,
    )
    names = written.metadata.get("class_names")
    labels = f", class names {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}" if names else ", no class names"
    print(f"wrote {dst} ({written.format}, {count_parameters(written.model):,} parameters{labels})")
    if written.format == "hf":  # no image processor composites on a background: the user must, before the pipeline
        from vitkit.checkpoint.hf import PREPROCESSOR_NAME, transparency_advice

        code = f"vitkit_transparency_python in {Path(dst) / PREPROCESSOR_NAME}"
        print(f"note: {transparency_advice(written.model.config, code)}")
    return 0
