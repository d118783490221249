"""int8 on the CPU: PyTorch's PT2E static flow (x86 inductor quantizer, what `--precision int8` runs) against torchao's
dynamic int8 (`quantize_` with Int8DynamicActivationInt8WeightConfig), both compiled, beside compiled fp32.

    python benchmarks/int8_flows.py runs/demo/final [--threads 1]

A grayscale 28x28 Fashion-MNIST checkpoint (the demo); top-1 and agreement with fp32 on the test split and the
median time per batch of 256, the candidates taking turns batch by batch.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from vitkit.checkpoint.native import load_native
from vitkit.data import eval_batches, open_dataset
from vitkit.data.augment import eval_transform
from vitkit.inference import precision
from vitkit.inference.predict import calibration_images


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model, _ = load_native(args.checkpoint)
    c = model.config
    test = open_dataset("auto", None, "test", channels=c.in_chans, image_size=c.image_size[0])
    train = open_dataset("auto", None, "train", channels=c.in_chans, image_size=c.image_size[0], val_fraction=0.1)
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
    for name in candidates:
        pred = torch.cat(preds[name])
        print(
            f"| {name} | {(pred == y).double().mean():.4f} | {100 * (pred == ref).double().mean():.2f}% "
            f"| {1e3 * statistics.median(times[name][1:]):.0f} |"
        )


if __name__ == "__main__":
    main()
