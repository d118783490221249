"""int8 on the CPU: PyTorch's PT2E static flow (x86 inductor quantizer, what `--precision int8` runs) against torchao's
dynamic int8 (`quantize_` with Int8DynamicActivationInt8WeightConfig), both compiled, beside compiled fp32.

    python benchmarks/int8_flows.py runs/demo1500/final --threads 1 --label "demo config, 1,500 steps" --results
    python benchmarks/int8_flows.py CHECKPOINT --data synthetic --results-dir /tmp/smoke   # a smoke run

A grayscale 28x28 Fashion-MNIST checkpoint (the demo); top-1 and agreement with fp32 on the test split and the
median time per batch of 256, the candidates taking turns batch by batch. --data synthetic (or a dataset's path)
replaces Fashion-MNIST, for a smoke run.

--results writes the rows int8-flows-pt2e-SLUG and int8-flows-torchao-dynamic-SLUG (SLUG: the machine kind; speed =
fp32's median time per batch over the flow's) of benchmarks/results/cpu_kernels.csv through benchmarks/rows.py, the
model named by --label; --results-dir DIR writes DIR/cpu_kernels.csv instead. Then run `python benchmarks/render.py`.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from rows import add_results_arguments, write_asked_rows

from vitkit.checkpoint.native import load_native
from vitkit.data import eval_batches, open_dataset
from vitkit.data.augment import eval_transform
from vitkit.inference import precision
from vitkit.inference.predict import calibration_images


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data", help='"synthetic" or a dataset\'s path (default: Fashion-MNIST)')
    p.add_argument("--label", help="the model column of the rows (default: the checkpoint's path)")
    add_results_arguments(p, "cpu_kernels")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model, _ = load_native(args.checkpoint)
    c = model.config
    kind, path = ("synthetic", None) if args.data == "synthetic" else ("auto", args.data)
    test = open_dataset(kind, path, "test", channels=c.in_chans, image_size=c.image_size[0])
    train = open_dataset(kind, path, "train", channels=c.in_chans, image_size=c.image_size[0], val_fraction=0.1)
    xs, ys = [], []
    for images, y in eval_batches(
        test, 256, torch.device("cpu"), channels=c.in_chans, size=c.image_size[0], crop_pct=1.0
    ):
        xs.append(eval_transform(images, c.image_size, 1.0, c.mean, c.std))
        ys.append(y)
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

    dynamic = copy.deepcopy(model).eval()
    quantize_(dynamic, Int8DynamicActivationInt8WeightConfig())
    candidates = {
        "fp32 compiled": precision.prepare(model, "fp32", compile=True),
        "int8 PT2E static": precision.prepare(model, "int8", calibration=calibration_images(train, model, n=256)),
        "int8 torchao dynamic": precision.prepare(dynamic, "fp32", compile=True),
    }
    preds = {k: [] for k in candidates}
    times = {k: [] for k in candidates}
    with torch.inference_mode():
        for x in xs:
            for name, run in candidates.items():
                start = time.perf_counter()
                preds[name].append(run(x).argmax(-1))
                times[name].append(time.perf_counter() - start)
    y = torch.cat(ys)
    ref = torch.cat(preds["fp32 compiled"])
    print(f"{args.checkpoint} on the test split ({len(y)} images), {args.threads} threads, batch 256")
    print("| int8 flow | top-1 | agreement with fp32 | ms / batch (median after the first) |")
    print("|---|---|---|---|")
    agreement, ms = {}, {}
    for name in candidates:
        pred = torch.cat(preds[name])
        agreement[name] = 100 * float((pred == ref).double().mean())
        # The first batch compiles; a split of one batch (a smoke run) keeps it.
        ms[name] = 1e3 * statistics.median(times[name][1:] or times[name])
        print(f"| {name} | {(pred == y).double().mean():.4f} | {agreement[name]:.2f}% | {ms[name]:.0f} |")
    # Per row: its id's ending, then the candidate it times and the claim's words for it.
    flows = {
        "pt2e": ("int8 PT2E static", "PT2E static int8"),
        "torchao-dynamic": ("int8 torchao dynamic", "torchao dynamic int8"),
    }
    rows = [
        {
            "id": f"int8-flows-{key}",
            "benchmark": "CPU kernels, compiling, int8 flows",
            "claim": f"{words} speed over fp32 compiled (agreement {agreement[name]:.2f}%)",
            "figure": f"{ms['fp32 compiled'] / ms[name]:.2f}",
            "unit": "x",
            "against": "fp32 compiled",
            "model": args.label or args.checkpoint,
            "setting": f"batch 256, {args.threads} thread{'s' if args.threads != 1 else ''}",
        }
        for key, (name, words) in flows.items()
    ]
    write_asked_rows(args, "cpu_kernels", rows)


if __name__ == "__main__":
    main()
