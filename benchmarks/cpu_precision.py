"""Accuracy cost of every CPU inference path on real data: vitkit fp32 / bf16 / int8 / int8-dynamic and the deployment
runtimes (ONNX Runtime fp32, OpenVINO fp32 and bf16, fed vitkit's ONNX export; both in int8 as NNCF quantizes that
export) on a checkpoint and a dataset split.

    python benchmarks/cpu_precision.py runs/demo --split test [--threads 2] [--paths "vitkit bf16,openvino bf16"] [--results --label demo]

Every candidate sees the same images; its top-1 and its agreement with vitkit fp32 (same predicted class) are
printed as a Markdown table and one JSON line. The speed side is `vitkit benchmark --compare ...` (RESULTS.md).

--results also writes the rows cpu-PRECISION-agreement-LABEL-SLUG (bf16, int8, int8-dynamic; LABEL from --label,
SLUG the machine kind, e.g. xeon) of benchmarks/results/cpu_deployment.csv through benchmarks/rows.py; off by
default so a quick run doesn't overwrite published figures. Then run `python benchmarks/render.py`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from vitkit.checkpoint.native import load_native
from vitkit.data import eval_batches, open_dataset
from vitkit.data.augment import eval_transform
from vitkit.inference.export import export, runtime_session
from vitkit.inference.precision import native_bf16, prepare
from vitkit.inference.predict import calibration_images
from vitkit.train import find_checkpoint

PATHS = (
    "vitkit fp32",
    "vitkit bf16",
    "vitkit int8",
    "vitkit int8-dynamic",
    "onnxruntime fp32",
    "openvino fp32",
    "openvino bf16",
    "onnxruntime int8 (NNCF)",
    "openvino int8 (NNCF)",
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--data", default=None, help="default: the data the checkpoint was trained on")
    p.add_argument("--split", default="test")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--calibration", type=int, default=256, help="int8: training images its observers see")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument(
        "--no-nncf", action="store_true", help="leave out the int8 exports NNCF quantizes for ONNX Runtime and OpenVINO"
    )
    p.add_argument(
        "--paths",
        help="comma-separated: only these paths (names as in the table; vitkit fp32, the reference, always runs)",
    )
    p.add_argument(
        "--results",
        action="store_true",
        help="write the rows cpu-PRECISION-agreement-LABEL-SLUG of benchmarks/results/cpu_deployment.csv",
    )
    p.add_argument(
        "--label",
        help="the rows' model part of the id, e.g. demo or vit-s16 (default: the checkpoint folder's name)",
    )
    args = p.parse_args()
    only = None if args.paths is None else {"vitkit fp32", *(name.strip() for name in args.paths.split(","))}
    if only is not None and only - set(PATHS):
        p.error(f"--paths: no such path: {', '.join(sorted(only - set(PATHS)))} (paths: {', '.join(PATHS)})")

    def wanted(name: str) -> bool:
        return only is None or name in only

    if args.threads:
        torch.set_num_threads(args.threads)
    folder = find_checkpoint(args.checkpoint)
    model, extra = load_native(folder)
    c = model.config
    trained = extra.get("data", {})
    crop = extra.get("preprocess", {}).get("crop_pct", 1.0)

    def split(name):
        return open_dataset(
            "auto",
            args.data or trained.get("path"),
            name,
            channels=c.in_chans,
            image_size=c.image_size[0],
            val_fraction=trained.get("val_fraction", 0.1),
            seed=trained.get("split_seed", 0),
        )

    test = split(args.split)
    n_batches = -(-len(test) // args.batch_size)
    candidates = {"vitkit fp32": prepare(model, "fp32", batches=n_batches)}
    if native_bf16() and wanted("vitkit bf16"):
        candidates["vitkit bf16"] = prepare(model, "bf16", batches=n_batches)
    calibration = calibration_images(split("train"), model, n=args.calibration, crop_pct=crop)
    if wanted("vitkit int8"):
        candidates["vitkit int8"] = prepare(model, "int8", calibration=calibration)
    if wanted("vitkit int8-dynamic"):
        candidates["vitkit int8-dynamic"] = prepare(model, "int8-dynamic")
    scratch = tempfile.TemporaryDirectory(prefix="vitkit-acc-")
    onnx = export(model, Path(scratch.name) / "model.onnx", format="onnx")
    threads = torch.get_num_threads()
    for runtime, precision in (("onnxruntime", "fp32"), ("openvino", "fp32"), ("openvino", "bf16")):
        if wanted(f"{runtime} {precision}") and (precision == "fp32" or native_bf16()):
            candidates[f"{runtime} {precision}"] = runtime_session(runtime, onnx, precision=precision, threads=threads)
    if not args.no_nncf:  # the same calibration images as vitkit int8
        for runtime, fmt, name in (("onnxruntime", "onnx", "int8.onnx"), ("openvino", "openvino", "int8.xml")):
            if wanted(f"{runtime} int8 (NNCF)"):
                quantized = export(model, Path(scratch.name) / name, format=fmt, calibration=calibration)
                candidates[f"{runtime} int8 (NNCF)"] = runtime_session(
                    runtime, quantized, precision="int8", threads=threads
                )
    if only is not None and set(candidates) != only:
        p.error(
            f"--paths: not available here: {', '.join(sorted(only - set(candidates)))} (no native bf16, or --no-nncf)"
        )
    preds = {name: [] for name in candidates}
    seconds = dict.fromkeys(candidates, 0.0)
    labels = []
    for images, y in eval_batches(
        test, args.batch_size, torch.device("cpu"), channels=c.in_chans, size=c.image_size[0], crop_pct=crop
    ):
        x = eval_transform(images, c.image_size, crop, c.mean, c.std)
        labels.append(y)
        for name, run in candidates.items():
            start = time.perf_counter()
            with torch.inference_mode():
                preds[name].append(run(x).argmax(-1))
            seconds[name] += time.perf_counter() - start
    labels = torch.cat(labels)
    ref = torch.cat(preds["vitkit fp32"])
    rows = {}
    for name in candidates:
        p_ = torch.cat(preds[name])
        rows[name] = {
            "top1": float((p_ == labels).double().mean()),
            "agreement_with_vitkit_fp32": float((p_ == ref).double().mean()),
            "seconds": seconds[name],
        }
    base = rows["vitkit fp32"]["top1"]
    print(f"{folder} on {args.split} ({len(labels)} images), {threads} threads")
    for name, run in candidates.items():  # what each of vitkit's runners ran (kernels, GEMMs, compiled or not)
        if name.startswith("vitkit"):
            print(f"- {name}: {run.description}")
    print(
        "| path | top-1 | difference vs vitkit fp32 (points) | agreement with vitkit fp32 | seconds (incl. first-batch build) |"
    )
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['top1']:.4f} | {100 * (r['top1'] - base):+.2f} | {100 * r['agreement_with_vitkit_fp32']:.2f}% | {r['seconds']:.1f} |"
        )
    print(
        json.dumps(
            {"checkpoint": str(folder), "split": args.split, "n": len(labels), "threads": threads, "results": rows}
        )
    )
    if args.results:
        write_results(rows, args.label or folder.name, f"{folder.name} ({100 * base:.2f}% {args.split})", len(labels))


def write_results(rows: dict[str, dict], label: str, model: str, n: int) -> None:
    """cpu_deployment.csv: each reduced-precision vitkit path's top-1 agreement with vitkit fp32."""
    import re

    from rows import write_rows

    label = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    others = [
        f"{name.replace('openvino', 'OpenVINO').replace('onnxruntime', 'ONNX Runtime')} "
        f"{100 * r['agreement_with_vitkit_fp32']:.2f}%"
        for name, r in rows.items()
        if not name.startswith("vitkit")
    ]
    out = []
    for name, r in rows.items():
        if not name.startswith("vitkit ") or name == "vitkit fp32":
            continue
        precision = name.split(" ", 1)[1]
        out.append(
            {
                "id": f"cpu-{precision}-agreement-{label}",
                "benchmark": "CPU deployment: reduced precision, OpenVINO, ONNX Runtime",
                "claim": f"{precision} top-1 agreement with fp32 ({n:,} {'test ' if n == 10000 else ''}images)",
                "figure": f"{100 * r['agreement_with_vitkit_fp32']:.2f}",
                "unit": "%",
                "against": "fp32; " + ", ".join(others) if others else "fp32",
                "model": model,
                "setting": f"{precision}, top-1 {100 * r['top1']:.2f}%",
            }
        )
    write_rows("cpu_deployment", out)


if __name__ == "__main__":
    main()
