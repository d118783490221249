"""Input-pipeline throughput per CPU core: decoding ImageNet-like JPEGs and making 224-px training crops.

    PYTHONPATH=src python benchmarks/input_pipeline.py [--images 256] [--rounds 5] [--photo-size 500x375] [--json out.json] [--results]

Generates JPEGs like ImageNet's photos (sizes drawn around 500x375, both orientations, quality 90, a
1/f-like mix of smooth and fine texture) in a temporary folder, writes them once more as tar shards,
then measures in one process with one thread (img/s per core), the candidates in turns, round after
round, and reports medians of per-round ratios to the plain reference:

  decode only      Pillow (open + convert("RGB")), simplejpeg and vitkit's libjpeg helper, whole images from
                   bytes in memory; and libjpeg at 1/8 scale: the Huffman decoding every pipeline pays for
                   every row down to its crop's last, which bounds how far any decoder can go ahead of the reference
  reference        Pillow open/convert, random-resized crop + bilinear resize with Pillow, to a float
                   tensor (the textbook torchvision-style CPU pipeline)
  vitkit folder    vitkit's training loader (Batches, workers=0) over the image folder: the Inception
                   crop drawn on the whole image, only its box decoded (libjpeg, DCT-scaled where the
                   crop allows), uint8 batches
  vitkit shards    the same over the tar shards
  ... simplejpeg   the vitkit rows again with VITKIT_JPEG_DECODER=simplejpeg (whole-image decode)
  ... with Pillow  and with VITKIT_JPEG_DECODER=pillow
  torchvision      where it is installed (not a vitkit dependency): its transforms.v2 RandomResizedCrop(224,
                   antialias) + ToImage + ToDtype on Pillow images, and on tensors from torchvision.io.decode_jpeg;
                   with a CUDA device, torchvision.io.decode_jpeg on the GPU (nvJPEG) in batches of 32 with the
                   crop and resize on the GPU: img/s of one host thread and the GPU, not per core of work

Flips, RandAugment and normalisation run on the training device in vitkit and are not counted here.

--results writes the rows input-pipeline-folder-SLUG, -shards-SLUG and -torchvision-SLUG (where torchvision is
installed) of benchmarks/results/input_pipeline.csv through benchmarks/rows.py (SLUG: the machine kind, e.g. epyc);
off by default so a quick run doesn't overwrite published figures. Then run `python benchmarks/render.py`.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from vitkit.data import Batches
from vitkit.data.sources import open_sharded, open_split, write_tar_shards
from vitkit.kernels import jpeg_region

SIZE = 224
REFERENCE = "reference (Pillow RandomResizedCrop + ToTensor)"
ENTROPY = "decode only: libjpeg at 1/8 (entropy decoding alone)"


def photo(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    """A synthetic photo: smooth shapes plus finer texture and sensor noise (JPEGs of ImageNet-like size per pixel)."""
    image = np.zeros((height, width, 3))
    for cells, amplitude in ((4, 90), (16, 50), (64, 35), (256, 25)):
        small = rng.normal(0, 1, (max(2, height * cells // 500), max(2, width * cells // 500), 3))
        small = ((small - small.min()) / (np.ptp(small) + 1e-9) * 255).astype(np.uint8)
        image += (
            amplitude * np.asarray(Image.fromarray(small).resize((width, height), Image.BICUBIC), dtype=float) / 255
        )
    image += rng.normal(0, 10, image.shape)
    image = (image - image.min()) / (np.ptp(image) + 1e-9) * 255
    return Image.fromarray(image.astype(np.uint8))


def make_dataset(root: Path, count: int, classes: int = 10, size: tuple[int, int] = (500, 375)) -> None:
    rng = np.random.default_rng(0)
    for i in range(count):
        landscape = rng.random() < 0.7
        w, h = (int(rng.normal(size[0], size[0] * 0.08)), int(rng.normal(size[1], size[1] * 0.08)))
        w, h = (w, h) if landscape else (h, w)
        folder = root / f"class_{i % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        photo(rng, max(w, 64), max(h, 64)).save(folder / f"{i:05d}.jpg", quality=90)


# -- the plain reference pipeline ----------------------------------------------------------------
def reference_crop(
    image: Image.Image, rng: random.Random, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)
) -> tuple[int, int, int, int]:
    """torchvision-style RandomResizedCrop parameters (integer box, 10 tries, then the centre)."""
    width, height = image.size
    area = width * height
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
        w, h = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            left, top = rng.randint(0, width - w), rng.randint(0, height - h)
            return left, top, left + w, top + h
    side = min(width, height)
    return (width - side) // 2, (height - side) // 2, (width + side) // 2, (height + side) // 2


def reference(paths: list[Path], rng: random.Random) -> int:
    for path in paths:
        image = Image.open(path).convert("RGB")
        image = image.crop(reference_crop(image, rng)).resize((SIZE, SIZE), Image.BILINEAR)
        torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1).float().div(255)  # ToTensor
    return len(paths)


def vitkit_loader(split, decoder: str) -> int:
    os.environ["VITKIT_JPEG_DECODER"] = decoder
    batches = Batches(
        split,
        32,
        seed=0,
        device=torch.device("cpu"),
        channels=3,
        size=SIZE,
        workers=0,
        crop=((0.08, 1.0), (3 / 4, 4 / 3)),
    )
    stream = batches.iterate(0, 0)
    n = 0
    for _ in range(batches.per_epoch):
        n += len(next(stream)[0])
    stream.close()
    return n


def torchvision_rows(paths: list[Path]) -> dict:
    """The torchvision candidates (module docstring); {} where torchvision does not import."""
    try:
        import torchvision
        from torchvision.transforms import v2
    except ImportError:
        return {}
    crop = v2.RandomResizedCrop(SIZE, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), antialias=True)
    to_float = v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])

    def on_pillow() -> int:
        for path in paths:
            to_float(crop(Image.open(path).convert("RGB")))
        return len(paths)

    def on_tensors() -> int:
        for path in paths:
            to_float(
                crop(
                    torchvision.io.decode_jpeg(
                        torchvision.io.read_file(str(path)), mode=torchvision.io.ImageReadMode.RGB
                    )
                )
            )
        return len(paths)

    rows = {
        f"torchvision {torchvision.__version__}: Pillow decode + v2 RandomResizedCrop + ToDtype": on_pillow,
        "torchvision: io.decode_jpeg (CPU) + v2 RandomResizedCrop + ToDtype": on_tensors,
    }
    if torch.cuda.is_available():

        def on_gpu() -> int:
            for i in range(0, len(paths), 32):
                data = [torchvision.io.read_file(str(p)) for p in paths[i : i + 32]]
                images = torchvision.io.decode_jpeg(data, mode=torchvision.io.ImageReadMode.RGB, device="cuda")
                torch.stack([crop(image) for image in images]).float().div_(255)
            torch.cuda.synchronize()
            return len(paths)

        rows[
            f"torchvision: io.decode_jpeg on {torch.cuda.get_device_name()} (nvJPEG, batches of 32) + crop on the GPU, 1 host thread"
        ] = on_gpu
    return rows


def decode_pillow(blobs: list[bytes]) -> int:
    for data in blobs:
        np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    return len(blobs)


def decode_simplejpeg(blobs: list[bytes]) -> int:
    import simplejpeg

    for data in blobs:
        simplejpeg.decode_jpeg(data)
    return len(blobs)


def decode_libjpeg(blobs: list[bytes], scale: int = 1) -> int:
    """Whole images at 1/scale. At 1/8 libjpeg still reads every Huffman-coded coefficient but keeps only the DC
    term (no IDCT to speak of, 1/64 of the pixels): what is left is the entropy decoding any decoder of the file pays."""
    for data in blobs:
        width, height, _ = jpeg_region.info(data)
        w, h = jpeg_region.scaled(width, scale), jpeg_region.scaled(height, scale)
        jpeg_region.decode(data, (0, 0, w, h), width=w, scale=scale)
    return len(blobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--photo-size", default="500x375", help="typical generated photo, WxH (e.g. 2000x1500 for phone photos)"
    )
    parser.add_argument("--json", help="write the results here")
    parser.add_argument(
        "--results",
        action="store_true",
        help="write the rows input-pipeline-{folder,shards,torchvision}-SLUG of benchmarks/results/input_pipeline.csv",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="vitkit-input-") as tmp:
        root = Path(tmp)
        make_dataset(root / "folder" / "train", args.images, size=tuple(int(v) for v in args.photo_size.split("x")))
        folder = open_split(root / "folder", "train", channels=3, val_fraction=0.0)
        write_tar_shards(folder, root / "shards", per_shard=64)
        shards = open_sharded(root / "shards", "train", val_fraction=0.0)
        paths = sorted((root / "folder").rglob("*.jpg"))
        blobs = [p.read_bytes() for p in paths]
        sizes = [Image.open(p).size for p in paths]
        candidates = {
            "decode only: Pillow": lambda: decode_pillow(blobs),
            "decode only: simplejpeg": lambda: decode_simplejpeg(blobs),
            "decode only: libjpeg (vitkit's helper, whole image)": lambda: decode_libjpeg(blobs),
            ENTROPY: lambda: decode_libjpeg(blobs, scale=8),
            REFERENCE: lambda: reference(paths, random.Random(0)),
            "vitkit loader, folder": lambda: vitkit_loader(folder, "libjpeg"),
            "vitkit loader, tar shards": lambda: vitkit_loader(shards, "libjpeg"),
            "vitkit loader, folder, simplejpeg decoder": lambda: vitkit_loader(folder, "simplejpeg"),
            "vitkit loader, tar shards, simplejpeg decoder": lambda: vitkit_loader(shards, "simplejpeg"),
            "vitkit loader, folder, Pillow decoder": lambda: vitkit_loader(folder, "pillow"),
            "vitkit loader, tar shards, Pillow decoder": lambda: vitkit_loader(shards, "pillow"),
            **torchvision_rows(paths),
        }
        if not jpeg_region.load():
            sys.exit(
                f"vitkit's libjpeg helper cannot be built here ({jpeg_region.unavailable()}): its rows would measure a fallback"
            )
        rates: dict[str, list[float]] = {name: [] for name in candidates}
        counts: dict[str, int] = {}
        for _ in range(args.rounds):
            for name, run in candidates.items():
                start = time.perf_counter()
                counts[name] = run()
                rates[name].append(counts[name] / (time.perf_counter() - start))
    ref = rates[REFERENCE]
    rows = []
    for name, values in rates.items():
        ratio = float(np.median([v / r for v, r in zip(values, ref)]))
        rows.append(
            {
                "pipeline": name,
                "img_s_per_core": float(np.median(values)),
                "vs_reference": ratio,
                "images": counts[name],
            }
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    meta = {
        "images": args.images,
        "mean_kib": sum(map(len, blobs)) / len(blobs) / 1024,
        "median_size": [float(np.median([s[0] for s in sizes])), float(np.median([s[1] for s in sizes]))],
        "rounds": args.rounds,
        "output": SIZE,
        "cpu": platform.processor() or platform.machine(),
        "load_average_1min": load,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "pillow": Image.__version__,
        "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }
    print(
        f"{args.images} generated JPEGs (mean {meta['mean_kib']:.0f} KiB, median {meta['median_size'][0]:.0f}x{meta['median_size'][1]:.0f}), "
        f"{SIZE}-px crops, 1 process x 1 thread, medians of {args.rounds} rounds; 1-min load average {load:.1f}"
    )
    print("| pipeline | img/s per core | vs reference |\n|---|---|---|")
    for r in rows:
        print(f"| {r['pipeline']} | {r['img_s_per_core']:.0f} | {r['vs_reference']:.2f}x |")
    reference_ms, entropy_ms = (1e3 / float(np.median(rates[name])) for name in (REFERENCE, ENTROPY))
    print(
        f"Entropy decoding alone: {entropy_ms:.2f} ms per image, {entropy_ms / reference_ms:.0%} of the reference's {reference_ms:.2f} ms; "
        f"a pipeline 2x the reference has {reference_ms / 2 - entropy_ms:.2f} ms per image for everything else (less where the "
        "crop lets it stop above the last rows)."
    )
    meta.update(reference_ms=reference_ms, entropy_decoding_ms=entropy_ms)
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    if args.results:
        write_results(rows, meta)


def write_results(rows: list[dict], meta: dict) -> None:
    """input_pipeline.csv: vitkit's loader (folder, shards) over the reference, and over torchvision's fastest CPU row."""
    from rows import write_rows

    by_name = {r["pipeline"]: r for r in rows}
    model = f"{meta['images']} JPEGs, mean {meta['mean_kib']:.0f} KiB, {SIZE}-px Inception crops"
    setting = f"1 process, 1 thread, medians of {meta['rounds']} rounds; load {meta['load_average_1min']:.1f}"
    out = []
    for kind, name in (("folder", "vitkit loader, folder"), ("shards", "vitkit loader, tar shards")):
        r = by_name[name]
        out.append(
            {
                "id": f"input-pipeline-{kind}",
                "benchmark": "Input pipeline",
                "claim": f"vitkit loader ({'image folder' if kind == 'folder' else 'tar shards'}) speed over a plain "
                "Pillow pipeline, per core",
                "figure": f"{r['vs_reference']:.2f}",
                "unit": "x",
                "against": f"Pillow crop + resize + to tensor ({by_name[REFERENCE]['img_s_per_core']:,.0f} img/s)",
                "model": model,
                "setting": f"{setting}; {r['img_s_per_core']:,.0f} img/s",
            }
        )
    tv = [r for r in rows if r["pipeline"].startswith("torchvision") and "nvJPEG" not in r["pipeline"]]
    if tv:
        best = max(tv, key=lambda r: r["img_s_per_core"])
        ours = by_name["vitkit loader, folder"]["img_s_per_core"]
        out.append(
            {
                "id": "input-pipeline-torchvision",
                "benchmark": "Input pipeline",
                "claim": "vitkit loader speed over torchvision's fastest CPU pipeline, per core "
                f"({ours:,.0f} vs {best['img_s_per_core']:,.0f} img/s)",
                "figure": f"{ours / best['img_s_per_core']:.2f}",
                "unit": "x",
                "against": best["pipeline"],
                "model": model,
                "setting": setting,
            }
        )
    write_rows("input_pipeline", out)


if __name__ == "__main__":
    main()
