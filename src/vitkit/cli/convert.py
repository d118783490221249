"""`vitkit convert SRC DST`: rewrite a checkpoint in another format (vitkit, Google .npz, timm, Hugging Face)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from vitkit.checkpoint import FORMATS, load_with_metadata, save_checkpoint
from vitkit.checkpoint.native import model_shapes
from vitkit.errors import CheckpointError, ConfigError
from vitkit.limits import check_room
from vitkit.models.summary import count_parameters

from . import image_size_arg

_BY_SUFFIX = {".npz": "npz", ".safetensors": "timm", ".pth": "timm", ".pt": "timm"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "convert",
        help="convert a checkpoint between formats: vitkit, npz (Google Flax), timm, hf (Hugging Face)",
        description="Read SRC in any supported format and write it to DST. The source format is detected from the "
        "content; the target format follows DST's suffix (.npz -> npz, .safetensors/.pth -> timm, "
        "otherwise a vitkit directory) unless --to says otherwise (hf writes a directory). Class names and preprocessing "
        "travel with the weights: vitkit and HF config.json, safetensors metadata, else FILE.json beside the file.",
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


_DEPLOYMENT = {".onnx": "onnx", ".xml": "openvino", ".pt2": "exported-program"}  # what `vitkit export` writes


def _target(dst: str, given: str | None) -> str:
    """The format DST is written in: --to, else its suffix (.npz, .safetensors / .pth / .pt), else a vitkit directory.
    A file-like name that is none of these is refused, rather than made a directory of that name."""
    suffix = Path(dst).suffix.lower()
    if suffix in _DEPLOYMENT:
        raise ConfigError(
            f"DST: {dst} names an {_DEPLOYMENT[suffix]} file, which vitkit export writes: vitkit export SRC "
            f"--format {_DEPLOYMENT[suffix]} --out {dst}"
        )
    if given == "timm" and suffix not in (".safetensors", ".pth", ".pt"):
        raise ConfigError(
            "DST: a timm checkpoint is a .safetensors or .pth file; name it "
            f"{Path(dst).with_suffix('.safetensors') if suffix in _BY_SUFFIX else f'{dst}.safetensors'}"
        )
    if given == "npz" and suffix != ".npz":  # an .npz named .safetensors is a zip no safetensors reader opens
        raise ConfigError(
            f"DST: an npz checkpoint is a .npz file; name it {Path(dst).with_suffix('.npz') if suffix in _BY_SUFFIX else f'{dst}.npz'}"
        )
    if (
        given in ("vitkit", "hf") and suffix in _BY_SUFFIX
    ):  # a directory named like a file would read as that file's format
        raise ConfigError(f"DST: a {given} checkpoint is a directory; give it a name without the {suffix} suffix")
    if given is None and suffix in (".bin", ".ckpt", ".h5", ".pkl", ".msgpack"):
        raise ConfigError(
            f"DST: {dst} reads as a file, and convert writes .npz, .safetensors, .pth or a directory (vitkit, or "
            "--to hf); give one of those"
        )
    return given or _BY_SUFFIX.get(suffix, "vitkit")


def _refuse_overlap(src: str, dst: str) -> None:
    """DST may not be SRC, nor hold it or lie inside it: writing replaces DST as a whole, so SRC would be lost."""
    a, b = (os.path.realpath(os.path.expanduser(p)) for p in (src, dst))
    if os.path.commonpath([a, b]) in (a, b):
        what = "is SRC" if a == b else ("lies inside SRC" if os.path.commonpath([a, b]) == a else "holds SRC")
        raise ConfigError(
            f"DST: {dst} {what}, and writing it would replace the checkpoint being read; write to another path"
        )


def _refuse_other_files(dst: str) -> None:
    """An existing file at DST is replaced only where it holds a checkpoint (a zip as .npz and torch write, a pickle,
    a safetensors header) or nothing: someone's notes.pth or a text file named .safetensors is not written over."""
    from vitkit.checkpoint.io import is_safetensors, is_torch_file

    path = Path(dst)
    if path.is_file() and path.stat().st_size and not (is_torch_file(path) or is_safetensors(path)):
        raise ConfigError(
            f"DST: {dst} is a file that holds no checkpoint (not a zip, pickle or safetensors file), and writing "
            "would replace it; write to another path, or remove it first (nothing was changed)"
        )


def run(args: argparse.Namespace) -> int:
    if args.dst is not None and args.out is not None and args.dst != args.out:
        raise ConfigError(f"DST: given twice ({args.dst} and --out {args.out}); give one")
    args.dst = args.dst or args.out
    if args.dst is None:
        raise ConfigError("DST: where to write is missing; e.g. vitkit convert SRC model.npz (or --out model.npz)")
    _refuse_overlap(args.src, args.dst)
    _refuse_other_files(args.dst)
    model, metadata = load_with_metadata(args.src, format=args.src_format, image_size=image_size_arg(args.image_size))
    if args.num_classes is not None and args.num_classes != model.config.num_classes:
        head = model.config.replace(num_classes=args.num_classes)
        nbytes = sum(t.numel() * 4 for t in model_shapes(head).values())  # fp32, counted on the meta device
        check_room(args.dst, nbytes, f"a model with {args.num_classes:,} classes", CheckpointError, memory=True)
        model.reset_head(args.num_classes)
        metadata = {k: v for k, v in metadata.items() if k != "class_names"}  # a new head has no names yet
    target = _target(args.dst, args.dst_format)
    save_checkpoint(model, args.dst, target, metadata=metadata)
    names = metadata.get("class_names")
    labels = f", class names {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}" if names else ", no class names"
    print(f"wrote {args.dst} ({target}, {count_parameters(model):,} parameters{labels})")
    return 0
