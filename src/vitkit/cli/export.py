"""`vitkit export`: ONNX / TorchScript / ExportedProgram with a dynamic batch, checked against PyTorch."""

from __future__ import annotations

import argparse
from pathlib import Path

from vitkit.errors import VitkitError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="export a checkpoint to ONNX, OpenVINO IR, TorchScript or a torch.export program",
        description="Export a checkpoint with a dynamic batch, checked against PyTorch. Class names and "
        "preprocessing travel with it: ONNX metadata_props, else FILE.json beside the file.",
    )
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
    p.add_argument("--atol", type=float, default=1e-4, help="largest allowed difference from PyTorch (default 1e-4)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: torch's choice)")
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
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from vitkit.checkpoint import load_with_metadata, refuse_untrained_head
    from vitkit.errors import ConfigError
    from vitkit.files import writable
    from vitkit.inference.export import (
        FORMATS,
        companions,
        export,
        format_of,
        openvino_default,
        refuse_folder,
        refuse_replacing,
        staged,
        verify,
    )

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.out is not None:
        refuse_folder(args.out, args.format or "onnx")
        args.format = format_of(args.out, args.format)
        if args.out.resolve() == args.checkpoint.resolve():
            raise ConfigError(f"--out {args.out}: is the checkpoint being exported; write the export to another file")
    args.format = args.format or "onnx"
    if not 0 <= args.min_agreement <= 1:
        raise ConfigError(f"--min-agreement: expected a fraction from 0 to 1 (0.99 = 99%), got {args.min_agreement}")
    model, metadata = load_with_metadata(args.checkpoint)
    if (
        model.config.num_classes
    ):  # a head that never trained would export as uniform probabilities; a backbone exports features
        refuse_untrained_head(metadata, args.checkpoint, model)
    precision = ".int8" if args.precision == "int8" else ""  # an int8 export never takes its fp32 export's default name
    out = args.out or args.checkpoint.with_name(args.checkpoint.name.rstrip("/") + precision + FORMATS[args.format])
    refuse_folder(Path(out), args.format)
    writable(out, "the export", "choose another --out")  # before the work, not at its end
    refuse_replacing(Path(out), args.format)
    if args.precision == "int8":
        return _export_int8(args, model, metadata, out)
    with staged(out) as path:  # checked before it replaces an earlier export
        export(model, path, format=args.format, metadata=metadata)
        diff = verify(model, path, args.format)
        if not diff <= args.atol:
            raise VitkitError(
                f"{out}: not written: the export differs from PyTorch by {diff:.2e} on a batch of 3, over --atol "
                f"{args.atol}; what --out held is unchanged (a larger --atol accepts it)"
            )
    also = "".join(f" + {p.name}" for p in companions(out))
    named = len(metadata.get("class_names") or [])
    outputs = (
        f"{named} class name{'s' * (named != 1)}"
        if model.config.num_classes
        else 'no classification head: its output "features" are the image features'
    )
    print(
        f"wrote {out}{also} ({args.format}, dynamic batch, {outputs}); "
        f"max |export - pytorch| on a batch of 3 = {diff:.2e}"
    )
    if args.format == "openvino" and (default := openvino_default(model, out)) is not None:
        print(
            f"note: OpenVINO runs this IR in {default[0]} on this CPU unless compiled with INFERENCE_PRECISION_HINT=f32 "
            f"(the check above): max |export - pytorch| = {default[1]:.2e} then"
        )
    return 0


ONE_BY_ONE = 32  # int8 check images also run one at a time


def _export_int8(args: argparse.Namespace, model, metadata: dict, out: Path) -> int:
    """Calibrate on training images, export quantized, then check top-1 against PyTorch fp32 on held-out images."""
    import torch

    from vitkit.data import DataSpec
    from vitkit.data.split import MissingSplit
    from vitkit.errors import ConfigError
    from vitkit.inference.export import INT8_PRESETS, companions, export, runtime_session, staged
    from vitkit.inference.predict import calibration_images

    if args.format not in ("onnx", "openvino"):
        raise ConfigError(
            f"--precision int8: exports ONNX or OpenVINO IR (quantized by NNCF); not --format {args.format}"
        )
    if args.calibration <= 0 or args.check_images <= 0:
        raise ConfigError("--calibration and --check-images: expected positive image counts")
    c = model.config
    crop_pct = metadata.get("preprocess", {}).get("crop_pct", 1.0)
    spec = DataSpec.from_checkpoint(metadata, args.checkpoint, data=args.data)
    train = spec.open("train", channels=c.in_chans, image_size=c.image_size[0])
    try:
        check, split = spec.open("val", channels=c.in_chans, image_size=c.image_size[0]), "val"
    except MissingSplit:
        check, split = spec.open("test", channels=c.in_chans, image_size=c.image_size[0]), "test"
    calibration = calibration_images(train, model, n=args.calibration, crop_pct=crop_pct)
    checks = calibration_images(check, model, n=args.check_images, crop_pct=crop_pct, seed=1)
    with torch.inference_mode():
        expected = [model(x).argmax(-1) for x in checks]
    tried = []
    total, singles = sum(len(x) for x in checks), min(len(checks[0]), ONE_BY_ONE)
    with staged(out) as path:  # built and checked beside --out: a rejected export never replaces what --out holds
        for preset in INT8_PRESETS:  # NNCF's transformer preset first; its plain flow where that one fails the check
            export(model, path, format=args.format, metadata=metadata, calibration=calibration, preset=preset)
            run = runtime_session("onnxruntime" if args.format == "onnx" else "openvino", path, precision="int8")
            with (
                torch.inference_mode()
            ):  # in the check's batches, and one image at a time (runtimes pick kernels by batch)
                batched = sum(int((run(x).argmax(-1) == y).sum()) for x, y in zip(checks, expected)) / total
                alone = (
                    sum(int(run(checks[0][i : i + 1]).argmax(-1) == expected[0][i]) for i in range(singles)) / singles
                )
            agreement = min(batched, alone)
            tried.append(f"{preset} preset {agreement:.2%}")
            if agreement >= args.min_agreement:
                break
        if agreement < args.min_agreement:
            raise VitkitError(
                f"{out}: not written: int8 top-1 agrees with PyTorch fp32 on too few of {total} {split} images of "
                f"{spec.where} ({'; '.join(tried)}), under --min-agreement {args.min_agreement:.2%}; calibrate on more "
                "images (--calibration) or export fp32"
            )
    also, batches = (
        "".join(f" + {p.name}" for p in companions(out)),
        " and ".join(sorted({str(len(x)) for x in checks}, key=int)),
    )
    n_cal, n_names = sum(len(b) for b in calibration), len(metadata.get("class_names") or [])
    print(
        f"wrote {out}{also} ({args.format} int8 by NNCF, {preset} preset, {n_cal} calibration images of {spec.where} (train), "
        f"dynamic batch, {n_names} class name{'s' * (n_names != 1)}); top-1 agreement with PyTorch fp32 on {total} "
        f"{split} images of {spec.where}: {agreement:.2%} (the lower of batches of {batches} and of {singles} of them one "
        f"at a time; other batch sizes not checked)" + (f" (tried: {'; '.join(tried)})" if len(tried) > 1 else "")
    )
    return 0
