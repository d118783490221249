"""`vitkit export`: ONNX / TorchScript / ExportedProgram with a dynamic batch, checked against PyTorch."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="export a checkpoint to ONNX, OpenVINO IR, TorchScript or a torch.export program",
        description="Export a checkpoint with a dynamic batch, checked against PyTorch. Class names and "
        "preprocessing travel with it: ONNX metadata_props, else FILE.json beside the file.",
    )
    _add_target_flags(p)
    _add_int8_flags(p)
    p.set_defaults(run=run)


def _add_target_flags(p: argparse.ArgumentParser) -> None:
    """What is exported, where to and in what format, and how closely it must match PyTorch."""
    p.add_argument(
        "checkpoint", type=Path, help="run directory, its final/, a step checkpoint, or a checkpoint file of any format"
    )
    p.add_argument(
        "--format",
        choices=["onnx", "openvino", "torchscript", "exported-program"],
        help="onnx (ONNX Runtime), openvino (IR .xml + .bin, from the ONNX export; needs the openvino extra), "
        "torchscript or exported-program (default: what --out's suffix names, else onnx)",
        default=None,
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output file (default: beside the checkpoint, CKPT.onnx, CKPT.int8.onnx, ...); it replaces only an "
        "earlier export, never a checkpoint or another file, and is never inside a checkpoint directory",
    )
    p.add_argument(
        "--preprocess",
        action="store_true",
        help="ONNX: the graph takes uint8 NHWC images of any size (RGB, or RGBA composited on the model's "
        "background) and resizes, centre-crops and normalises them as vitkit predict does",
    )
    p.add_argument(
        "--atol",
        type=float,
        default=None,
        help="largest allowed difference from PyTorch (default 1e-4); with --preprocess, from vitkit predict's "
        "probabilities on images of odd sizes (default 1e-2)",
    )
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: torch's choice)")


def _add_int8_flags(p: argparse.ArgumentParser) -> None:
    """--precision int8 and how it is calibrated and checked."""
    p.add_argument(
        "--precision",
        choices=["fp32", "int8"],
        default="fp32",
        help="int8: ONNX or OpenVINO IR quantized by NNCF (post-training, calibrated on --calibration training "
        "images; needs the nncf extra), then checked on --check-images held-out images (default fp32)",
    )
    p.add_argument(
        "--calibration",
        type=int,
        default=256,
        metavar="N",
        help="int8: training images NNCF calibrates on (default 256)",
    )
    p.add_argument(
        "--check-images",
        type=int,
        default=500,
        metavar="N",
        help="int8: validation images (else test) on which the export's top-1 must agree with PyTorch fp32 (default 500)",
    )
    p.add_argument(
        "--min-agreement",
        type=float,
        default=0.99,
        help="int8: the least top-1 agreement with PyTorch fp32 on --check-images images (default 0.99)",
    )
    p.add_argument(
        "--data",
        default=None,
        help="int8: the images to calibrate and check on (default: the data the checkpoint was trained on)",
    )


def run(args: argparse.Namespace) -> int:
    from vitkit.inference.export import export_checkpoint

    written = export_checkpoint(
        args.checkpoint,
        args.out,
        args.format,
        precision=args.precision,
        atol=args.atol,
        threads=args.threads,
        calibration=args.calibration,
        check_images=args.check_images,
        min_agreement=args.min_agreement,
        data=args.data,
        preprocess=args.preprocess,
    )
    print(_int8_line(written) if written["precision"] == "int8" else _fp32_line(written))
    if (default := written.get("openvino_default")) is not None:
        print(
            f"note: OpenVINO runs this IR in {default[0]} on this CPU unless compiled with INFERENCE_PRECISION_HINT=f32 "
            f"(the check above): max |export - pytorch| = {default[1]:.2e} then"
        )
    return 0


def _fp32_line(w: dict) -> str:
    also, named = "".join(f" + {name}" for name in w["companions"]), w["class_names"]
    outputs = (
        f"{named} class name{'s' * (named != 1)}"
        if w["head"]
        else 'no classification head: its output "features" are the image features'
    )
    if w["preprocess"]:
        return (
            f"wrote {w['out']}{also} ({w['format']}, uint8 NHWC images of any size in, RGB or RGBA; resize, crop and "
            f"normalisation in the graph; {outputs}); max |export - vitkit predict| in probabilities on 3 images of "
            f"odd sizes = {w['diff']:.2e}"
        )
    return (
        f"wrote {w['out']}{also} ({w['format']}, dynamic batch{', height and width' * w['dynamic_size']}, {outputs}); "
        f"max |export - pytorch| on a batch of 3{' at two image sizes' * w['dynamic_size']} = {w['diff']:.2e}"
    )


def _int8_line(w: dict) -> str:
    also, n_names, checked = "".join(f" + {name}" for name in w["companions"]), w["class_names"], w["checked"]
    batches, tried = " and ".join(str(n) for n in checked["batches"]), w["tried"]
    return (
        f"wrote {w['out']}{also} ({w['format']} int8 by NNCF, {w['preset']} preset, {w['calibration_images']} "
        f"calibration images of {w['data']} (train), dynamic batch, {n_names} class name{'s' * (n_names != 1)}); "
        f"top-1 agreement with PyTorch fp32 on {checked['images']} {checked['split']} images of {w['data']}: "
        f"{w['agreement']:.2%} (the lower of batches of {batches} and of {checked['one_by_one']} of them one "
        f"at a time; other batch sizes not checked)" + (f" (tried: {'; '.join(tried)})" if len(tried) > 1 else "")
    )
