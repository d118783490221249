"""--precision and --calibration: the same for every command that runs a model over images."""

from __future__ import annotations

import argparse

from vitkit.inference.precision import PRECISIONS


def add_precision(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="fp32",
        help="fp32 (default; compiled on long jobs; on CPUs not made by Intel through oneDNN's GEMMs, eager too, "
        "and compiled only on very long ones), bf16 (CPUs with AVX512_BF16/AMX, and GPUs), int8 (CPU, static PT2E quantization "
        "calibrated on --calibration training images; needs the int8 extra) or int8-dynamic (CPU, torchao's "
        "per-token dynamic int8: no calibration, closer to fp32 than int8, a little slower)",
    )
    p.add_argument(
        "--calibration",
        type=int,
        default=256,
        metavar="N",
        help="int8: training images the quantization observers see (default 256)",
    )


def check_threshold(threshold: float) -> None:
    """--threshold of a command without a typed request (predict), under the limit eval's request declares."""
    from vitkit.errors import ConfigError
    from vitkit.evaluate.metrics import THRESHOLD_LIMIT
    from vitkit.limits import limit_problem

    problem = limit_problem(threshold, THRESHOLD_LIMIT["limit"])
    if problem:
        raise ConfigError(f"--threshold: {problem}")
