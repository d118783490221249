"""--precision and --calibration: the same for every command that runs a model over images."""

from __future__ import annotations

import argparse


def add_precision(p: argparse.ArgumentParser) -> None:
    p.add_argument("--precision", choices=["fp32", "bf16", "int8"], default="fp32",
                   help="fp32 (default), bf16 (CPUs with AVX512_BF16/AMX, and GPUs) or int8 (CPU, static PT2E quantization "
                   "calibrated on --calibration training images; needs the int8 extra)")
    p.add_argument("--calibration", type=int, default=256, metavar="N",
                   help="int8: training images the quantization observers see (default 256)")



def calibration(args: argparse.Namespace, model, trained_on: dict, *, crop_pct: float, data: str | None = None, split=None):
    """int8's calibration images: --calibration images of `split`, else of the training split of `data` (default: the
    data the checkpoint was trained on); None for the other precisions."""
    if args.precision != "int8":
        return None
    from vitkit.data import open_dataset
    from vitkit.evaluation import calibration_images

    c = model.config
    if split is None:
        split = open_dataset("auto", data or trained_on.get("path"), "train", channels=c.in_chans, image_size=c.image_size[0],
                             val_fraction=trained_on.get("val_fraction", 0.1), seed=trained_on.get("split_seed", 0))
    return calibration_images(split, model, n=args.calibration, crop_pct=crop_pct)
