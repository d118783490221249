"""`vitkit export`: ONNX / TorchScript / ExportedProgram with a dynamic batch, checked against PyTorch."""

from __future__ import annotations

import argparse
from pathlib import Path

from vitkit.errors import VitkitError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export a checkpoint to ONNX, OpenVINO IR, TorchScript or a torch.export program")
    p.add_argument("checkpoint", type=Path, help="a checkpoint vitkit reads")
    p.add_argument("--format", choices=["onnx", "openvino", "torchscript", "exported-program"],
                   help="onnx (ONNX Runtime), openvino (IR .xml + .bin, from the ONNX export; needs the openvino extra), "
                   "torchscript or exported-program (default onnx)", default="onnx")
    p.add_argument("--out", type=Path, default=None, help="output file (default: beside the checkpoint)")
    p.add_argument("--atol", type=float, default=1e-4, help="largest allowed difference from PyTorch (default 1e-4)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from vitkit.checkpoint import load_pretrained
    from vitkit.export import FORMATS, export, verify

    model = load_pretrained(args.checkpoint)
    out = args.out or args.checkpoint.with_name(args.checkpoint.name.rstrip("/") + FORMATS[args.format])
    export(model, out, format=args.format)
    diff = verify(model, out, args.format)
    print(f"wrote {out} ({args.format}, dynamic batch); max |export - pytorch| on a batch of 3 = {diff:.2e}")
    if not diff <= args.atol:
        raise VitkitError(f"{out}: the export differs from PyTorch by {diff:.2e} > --atol {args.atol}")
    return 0
