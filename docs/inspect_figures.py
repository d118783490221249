"""Make the README's inspection figures (docs/inspect/) with `vitkit inspect`.

Run from the repository root:

    PYTHONPATH=src python docs/inspect_figures.py                     # train a small ViT briefly, then inspect it
    PYTHONPATH=src python docs/inspect_figures.py --checkpoint CKPT   # inspect a trained checkpoint instead

Both export the first 128 Fashion-MNIST test images as PNGs to <work>/images and then run

    vitkit inspect CKPT --images <work>/images --out docs/inspect

Without --checkpoint a small ViT (6 layers, width 64, 4 heads, 4x4 patches on 28x28 images) is trained
for --steps steps of AdamW on the Fashion-MNIST training set (400 steps: 3.4 CPU-minutes, 5.4 min wall on two shared cores) and
saved to <work>/checkpoint. The data are read from the IDX files in --data (nothing is downloaded).
"""

from __future__ import annotations

import argparse
import gzip
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

import vitkit
from vitkit.cli import main as vitkit_main


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (.gz) of unsigned bytes as an array: the 4-byte magic gives the number of dimensions."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def train(data: Path, steps: int, batch_size: int, seed: int) -> vitkit.VisionTransformer:
    """Adam with warmup and cosine decay on Fashion-MNIST; prints the loss and the test accuracy."""
    torch.manual_seed(seed)
    model = vitkit.create_model("vit_mini4_28", width=64, mlp_dim=128, num_heads=4)
    x = torch.from_numpy(read_idx(data / "train-images-idx3-ubyte.gz").copy()).float()[:, None] / 255.0
    y = torch.from_numpy(read_idx(data / "train-labels-idx1-ubyte.gz").astype(np.int64))
    x = (x - 0.5) / 0.5
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)
    warmup = max(steps // 10, 1)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warmup, 0.5 * (1 + math.cos(math.pi * min(s / steps, 1.0))))
    )
    g = torch.Generator().manual_seed(seed)
    start = time.time()
    model.train()
    for step in range(steps):
        idx = torch.randint(len(x), (batch_size,), generator=g)
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step:4d}  loss {loss.item():.3f}  {time.time() - start:.0f}s", flush=True)
    model.eval()
    xt = torch.from_numpy(read_idx(data / "t10k-images-idx3-ubyte.gz")[:2000].copy()).float()[:, None] / 255.0
    yt = torch.from_numpy(read_idx(data / "t10k-labels-idx1-ubyte.gz")[:2000].astype(np.int64))
    with torch.inference_mode():
        accuracy = (model((xt - 0.5) / 0.5).argmax(-1) == yt).float().mean().item()
    print(f"test accuracy on 2000 images: {accuracy:.3f}")
    return model


def export_images(data: Path, folder: Path, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, image in enumerate(read_idx(data / "t10k-images-idx3-ubyte.gz")[:count]):
        Image.fromarray(image).save(folder / f"test_{i:04d}.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, help="inspect this vitkit checkpoint instead of training one")
    parser.add_argument(
        "--data",
        type=Path,
        default=Path("/usr/share/datasets/fashion-mnist"),
        help="folder of the Fashion-MNIST .gz IDX files",
    )
    parser.add_argument(
        "--work", type=Path, default=Path("build/inspect-demo"), help="where the images and the trained checkpoint go"
    )
    parser.add_argument("--out", type=Path, default=Path("docs/inspect"), help="where the figures go")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    checkpoint = args.checkpoint
    if checkpoint is None:
        checkpoint = vitkit.save_pretrained(
            train(args.data, args.steps, args.batch_size, args.seed), args.work / "checkpoint"
        )
    export_images(args.data, args.work / "images", 128)
    code = vitkit_main(
        ["inspect", str(checkpoint), "--images", str(args.work / "images"), "--out", str(args.out), "--show", "8"]
    )
    raise SystemExit(code)


if __name__ == "__main__":
    main()
