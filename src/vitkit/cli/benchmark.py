"""`vitkit benchmark`: throughput, latency, memory, FLOPs and MFU, side by side with transformers/timm, ONNX Runtime, OpenVINO."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vitkit.errors import ConfigError
from vitkit.files import writable, write_json
from vitkit.inference.precision import PRECISIONS
from vitkit.models import ViTConfig, get_config


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "benchmark",
        help="measure speed (img/s, latency, memory, MFU) beside Hugging Face transformers / timm",
        description="Every candidate and a large matmul (the measured peak) take turns for --rounds rounds; "
        "ratios and MFU are medians of per-round values, so a noisy shared machine still gives fair ratios.",
    )
    _add_model_flags(p)
    _add_compare_flags(p)
    p.set_defaults(run=run)


def _add_model_flags(p: argparse.ArgumentParser) -> None:
    """What is measured: the model, its batch, precision, device, mode, compilation and kernels."""
    p.add_argument("--model", default="vit_b16", help="model name (default vit_b16)")
    p.add_argument("--batch", type=int, default=8, help="batch size (default 8)")
    p.add_argument("--image-size", type=int, default=None, help="resolution (default: the model's)")
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument(
        "--precision",
        "--dtype",
        dest="dtype",
        choices=[*PRECISIONS, "fp16", "fp8"],
        default=None,
        help="vitkit's precision, as in eval and predict (default fp32 on CPU, bf16 on GPU); bf16 on the CPU "
        "needs AVX512_BF16/AMX, int8 the int8 extra (its observers calibrated on random images: speed only); fp8 "
        "(--mode train) trains as train.precision=fp8, references beside it in bf16",
    )
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    p.add_argument("--mode", choices=["inference", "train", "both"], default="inference")
    p.add_argument(
        "--compile",
        choices=["auto", "on", "off"],
        default="auto",
        help="torch.compile vitkit (CPU inference also freezes weights into packed GEMMs). auto: as a long eval runs it, "
        "compiled, and for inference back to eager where compiled ran slower on this machine (the precision line says so)",
    )
    p.add_argument(
        "--kernels",
        choices=["auto", "torch"],
        default="auto",
        help="auto: vitkit's C++ attention and bias+GELU kernels for fp32 and int8-dynamic CPU inference (built on first use), "
        "and in --mode train the written-out attention for short sequences; torch: always torch's "
        "scaled_dot_product_attention and GELU",
    )
    p.add_argument("--grad-checkpointing", action="store_true", help="train with activation checkpointing per block")


def _add_compare_flags(p: argparse.ArgumentParser) -> None:
    """What it is measured beside, how often, and where the report goes."""
    p.add_argument(
        "--compare",
        default="",
        help="comma-separated candidates, each optionally :fp32/:bf16/:int8/:int8-dynamic/:fp8 (default: --precision): references "
        "transformers,timm ('all': those installed), deployment runtimes onnxruntime,openvino (fed vitkit's "
        "ONNX export; same thread count, ONNX Runtime not spinning; :int8 quantizes that export with NNCF) and vitkit "
        "itself, e.g. vitkit:fp32,openvino:bf16,openvino:int8",
    )
    p.add_argument(
        "--process-memory",
        action="store_true",
        help="also build and run every candidate again in a fresh process and report its resident memory "
        "(RSS after warm-up and its high-water mark, above the bare process): the one memory figure that "
        "compares torch with ONNX Runtime and OpenVINO, whose arenas torch's allocator does not see",
    )
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores available)")
    p.add_argument("--json", type=Path, default=None, help="also write the report as JSON to this file")


def run(args: argparse.Namespace) -> int:
    import torch

    from vitkit.inference import benchmark

    benchmark.set_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    config = _model_config(args)
    if args.json:
        writable(args.json, "the JSON report", "choose another --json")  # before the benchmark runs, not after
    compare = benchmark.available_references() if args.compare == "all" else [c for c in args.compare.split(",") if c]
    modes = ["inference", "train"] if args.mode == "both" else [args.mode]
    reports = []
    for mode in modes:
        report = benchmark.run(_setup(args, config, device, mode), compare)
        report["model"] = args.model
        reports.append(report)
        print(benchmark.format_table(report), flush=True)
    if args.json:
        write_json(args.json, reports if len(reports) > 1 else reports[0])
    print(json.dumps(reports if len(reports) > 1 else reports[0]))
    return 0


def _model_config(args: argparse.Namespace) -> ViTConfig:
    overrides = {"num_classes": args.num_classes}
    if args.image_size:
        overrides["image_size"] = args.image_size
    config = get_config(args.model, **overrides)
    if not isinstance(config, ViTConfig):
        raise ConfigError(
            f"--model {args.model}: vitkit benchmark measures Vision Transformers (its kernels, MFU and references "
            "are ViT's); a BiT ResNet's size and GFLOPs are in `vitkit models`"
        )
    return config


def _setup(args: argparse.Namespace, config: ViTConfig, device: str, mode: str):
    from vitkit.inference import benchmark

    return benchmark.Setup(
        config=config,
        batch_size=args.batch,
        dtype=args.dtype or ("fp32" if device == "cpu" else "bf16"),
        device=device,
        mode=mode,
        compile={"auto": None, "on": True, "off": False}[args.compile],
        kernels=args.kernels,
        rounds=args.rounds,
        grad_checkpointing=args.grad_checkpointing,
        process_memory=args.process_memory,
    )
