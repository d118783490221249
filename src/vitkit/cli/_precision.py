"""--precision and --calibration: the same for every command that runs a model over images."""

from __future__ import annotations

import argparse


def add_precision(p: argparse.ArgumentParser) -> None:
    p.add_argument("--precision", choices=["fp32", "bf16", "int8"], default="fp32",
                   help="fp32 (default), bf16 (CPUs with AVX512_BF16/AMX, and GPUs) or int8 (CPU, static PT2E quantization "
                   "calibrated on --calibration training images; needs the int8 extra)")
    p.add_argument("--calibration", type=int, default=256, metavar="N",
                   help="int8: training images the quantization observers see (default 256)")

