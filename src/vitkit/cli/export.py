"""`vitkit export`: ONNX / TorchScript / ExportedProgram with a dynamic batch, checked against PyTorch."""

from __future__ import annotations

import argparse
from pathlib import Path

from vitkit.errors import VitkitError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export a checkpoint to ONNX, TorchScript or a torch.export program",
                       description="Export a checkpoint with a dynamic batch, checked against PyTorch. Class names and "
                                   "preprocessing travel with it: ONNX metadata_props, else FILE.json beside the file.")
    p.add_argument("checkpoint", type=Path, help="run directory, its final/, a step checkpoint, or a checkpoint file of any format")
    p.add_argument("--format", choices=["onnx", "torchscript", "exported-program"], default="onnx")
    p.add_argument("--out", type=Path, default=None, help="output file (default: beside the checkpoint)")
    p.add_argument("--atol", type=float, default=1e-4, help="largest allowed difference from PyTorch (default 1e-4)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: torch's choice)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from vitkit.checkpoint import load_with_metadata
    from vitkit.export import FORMATS, companions, export, verify

    if args.threads:
        torch.set_num_threads(args.threads)
    model, metadata = load_with_metadata(args.checkpoint)
    out = args.out or args.checkpoint.with_name(args.checkpoint.name.rstrip("/") + FORMATS[args.format])
    export(model, out, format=args.format, metadata=metadata)
    diff = verify(model, out, args.format)
    also = "".join(f" + {p.name}" for p in companions(out))
    print(f"wrote {out}{also} ({args.format}, dynamic batch, {len(metadata.get('class_names') or [])} class names); "
          f"max |export - pytorch| on a batch of 3 = {diff:.2e}")
    if not diff <= args.atol:
        raise VitkitError(f"{out}: the export differs from PyTorch by {diff:.2e} > --atol {args.atol}")
    return 0
