"""The GPU measurements of benchmarks/RESULTS.md ("GPU"), one part at a time, each in its own process.

    PYTHONPATH=src python benchmarks/gpu.py PART [PART ...] --out DIR [--fmnist DIR] [--seconds 270] [--results]

Parts:
  env      the device, driver, torch and timm versions
  fmnist   `vitkit train --config configs/fashion_mnist_gpu.yaml`: a short probe for img/s, then a run whose
           steps fill --seconds of training, then `vitkit eval` on the test split
  tests    pytest -m gpu
  train    `vitkit benchmark --mode train --compare timm` for ViT-S/16, B/16, L/16 at 224 (bf16, compiled, fused AdamW)
  infer    `vitkit benchmark --mode inference --compare timm`, batch 256, bf16, compiled
  memory   the largest trainable batch of ViT-L/16 and ViT-H/14 (plain, train.grad_checkpointing, FSDP2 on one GPU)
  profile  torch.profiler over ViT-B/16 training steps: where the GPU time goes, by kernel family
  loop     `vitkit train` of ViT-B/16 on synthetic images against the bare step: what the training loop costs
  jpeg     `vitkit train` of ViT-S/16 on a folder of 224-px-and-up JPEGs: img/s and GPU utilisation by workers
  fp8      train.precision=fp8 (torchao's float8 linears): `vitkit benchmark --mode train --precision fp8` of
           ViT-B/16 and ViT-L/16 beside timm and vitkit in bf16 (compiled), and the GPU demo's loss curve in fp8
           against bf16 over --fp8-steps steps

Every part writes DIR/PART.json (and logs); the last lines printed are a summary. --results also writes the rows
of the parts tests, train, infer, fmnist and memory (gpu-tests-SLUG, gpu-train-vit-b16-SLUG, gpu-infer-vit-b16-SLUG,
gpu-fashion-mnist-SLUG, gpu-memory-vit-l16-SLUG, ...; SLUG the GPU, e.g. h100) to benchmarks/results/gpu.csv through
benchmarks/rows.py; off by default so a quick run doesn't overwrite published figures. Then run
`python benchmarks/render.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VITKIT = [sys.executable, "-m", "vitkit"]


def sh(cmd: list[str], log: Path, timeout: float, env: dict | None = None) -> tuple[int, str]:
    """Run cmd, its output to `log` (and returned); rc 124 on timeout."""
    start = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
        rc, text = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as err:
        rc, text = 124, (err.stdout or b"").decode(errors="replace") + (err.stderr or b"").decode(errors="replace")
    text += f"\n[{' '.join(map(str, cmd))}: rc {rc}, {time.perf_counter() - start:.0f} s]\n"
    with open(log, "a") as f:
        f.write(text)
    return rc, text


class GpuSampler:
    """nvidia-smi's utilisation and memory every 0.2 s while a command runs (a background thread)."""

    def __init__(self):
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        cmd = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-lms", "200"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        for line in proc.stdout:
            if self._stop.is_set():
                break
            try:
                util, mem = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.perf_counter(), util, mem))
        proc.kill()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()

    def between(self, start: float, end: float) -> dict:
        inside = [(u, m) for t, u, m in self.samples if start <= t <= end]
        if not inside:
            return {"samples": 0}
        return {
            "samples": len(inside),
            "util_mean": statistics.mean(u for u, _ in inside),
            "util_median": statistics.median(u for u, _ in inside),
            "mem_max_mib": max(m for _, m in inside),
        }


def train_rows(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r["kind"] == "train"]


def steady_img_s(run: Path, skip: int = 2) -> float:
    rates = [r["img_s"] for r in train_rows(run)][skip:]
    return statistics.median(rates) if rates else float("nan")


# -- parts ------------------------------------------------------------------------------------
def part_env(out: Path, args) -> dict:
    import torch

    info = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0),
        "capability": torch.cuda.get_device_capability(0),
        "memory_gib": torch.cuda.get_device_properties(0).total_memory / 2**30,
    }
    for name in ("timm", "transformers", "triton", "simplejpeg"):
        try:
            info[name] = __import__(name).__version__
        except Exception as err:
            info[name] = f"missing ({type(err).__name__})"
    info["nvidia_smi"] = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,power.limit", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    info["cpu_cores"] = len(os.sched_getaffinity(0))
    return info


def part_fmnist(out: Path, args) -> dict:
    base = [
        *VITKIT,
        "train",
        "--config",
        str(ROOT / "configs" / "fashion_mnist_gpu.yaml"),
        "--data",
        args.fmnist,
        "--no-progress",
    ]
    probe_args = ["train.steps=300", "train.eval_every=300", "train.checkpoint_every=300"]
    before = {}
    for (
        batch,
        lr,
    ) in args.compare_batch:  # the same probe at another batch, e.g. the one an earlier version was measured at
        other = out / f"fmnist-probe-b{batch}"
        sh(
            [*base, "--out", str(other), *probe_args, f"train.batch_size={batch}", f"train.lr={lr}"],
            out / "fmnist.log",
            300,
        )
        before[f"batch {batch}"] = steady_img_s(other)
    probe = out / "fmnist-probe"
    sh([*base, "--out", str(probe), *probe_args], out / "fmnist.log", 300)
    rate = steady_img_s(probe)
    config = __import__("yaml").safe_load((ROOT / "configs" / "fashion_mnist_gpu.yaml").read_text())
    batch = config["train"]["batch_size"]
    steps = int(args.seconds * rate / batch) // 100 * 100
    run = out / "fmnist-run"
    with GpuSampler() as gpu:
        start = time.perf_counter()
        rc, _ = sh([*base, "--out", str(run), f"train.steps={steps}"], out / "fmnist.log", args.seconds * 2 + 120)
        end = time.perf_counter()
    rc_eval, text = sh([*VITKIT, "eval", str(run), "--split", "test", "--json"], out / "fmnist.log", 300)
    found = [line for line in text.splitlines() if line.startswith("{")]
    test = json.loads(found[-1]) if rc_eval == 0 and found else {"error": text[-2000:]}
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    return {
        "probe_img_s": rate,
        "other_batches_img_s": before,
        "steps": steps,
        "batch": batch,
        "rc": rc,
        "command_seconds": end - start,
        "summary": summary,
        "gpu": gpu.between(start, end),
        "test": test,
    }


def part_tests(out: Path, args) -> dict:
    rc, text = sh(
        [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rA", str(ROOT / "tests")],
        out / "tests.log",
        args.part_timeout,
    )
    return {"rc": rc, "tail": text[-1500:]}


def _bench(out: Path, name: str, mode: str, batch: int, timeout: float, extra=(), compare="timm") -> dict:
    tag = "".join(f"-{flag.lstrip('-')}" for flag in extra)  # e.g. -precision-fp8-compile-on
    path = out / f"{mode}-{name}-b{batch}{tag}.json"
    rc, text = sh(
        [
            *VITKIT,
            "benchmark",
            "--device",
            "cuda",
            "--model",
            name,
            "--batch",
            str(batch),
            "--mode",
            mode,
            "--compare",
            compare,
            "--rounds",
            "20",
            "--json",
            str(path),
            *extra,
        ],
        out / f"{mode}.log",
        timeout,
    )
    if rc != 0:
        return {"rc": rc, "tail": text[-1500:]}
    report = json.loads(path.read_text())
    r = report["results"]
    return {
        "batch": batch,
        "vitkit_img_s": r["vitkit"]["img_per_s"],
        "timm_img_s": r["timm"]["img_per_s"],
        "vitkit_mfu": r["vitkit"]["mfu"],
        "timm_mfu": r["timm"]["mfu"],
        "speedup": report["speedup"]["vitkit/timm"],
        "peak_tflops": report["peak_tflops"],
        "vitkit_mem_mb": r["vitkit"]["peak_memory_mb"],
        "timm_mem_mb": r["timm"]["peak_memory_mb"],
        "gflops_per_image": report["gflops_per_image"],
        "speedups": report["speedup"],
        "candidates": report.get("candidates", {}),
    }


def part_train(out: Path, args) -> dict:
    models = (("vit_s16", 256), ("vit_b16", 256), ("vit_l16", 128))
    return {
        name: _bench(out, name, "train", batch, 240) for name, batch in models if name in args.train_models.split(",")
    }


def part_fp8(out: Path, args) -> dict:
    """fp8 training's speed beside bf16's (timm's and vitkit's own, all compiled), and its loss curve beside bf16's."""
    speed = {
        name: _bench(out, name, "train", batch, 300, ["--precision", "fp8", "--compile", "on"], "timm,vitkit:bf16")
        for name, batch in (("vit_b16", 256), ("vit_l16", 128))
    }
    base = [*VITKIT, "train", "--config", str(ROOT / "configs" / "fashion_mnist_gpu.yaml"), "--data", args.fmnist]
    steps = [f"train.steps={args.fp8_steps}", "train.log_every=20", "train.eval_every=100000", "--no-progress"]
    curves = {}
    for precision in ("bf16", "fp8"):
        run = out / f"fp8-curve-{precision}"
        rc, text = sh([*base, "--out", str(run), *steps, f"train.precision={precision}"], out / "fp8.log", 600)
        curves[precision] = (
            {"loss": [r["loss"] for r in train_rows(run)], "img_s": steady_img_s(run)}
            if rc == 0
            else {"rc": rc, "tail": text[-1500:]}
        )
    pairs = zip(curves["bf16"].get("loss", []), curves["fp8"].get("loss", []))
    gaps = [abs(f - b) / b for b, f in pairs]
    return {"speed": speed, "curves": curves, "largest_loss_gap": max(gaps) if gaps else None}


def part_infer(out: Path, args) -> dict:
    return {name: _bench(out, name, "inference", 256, 150) for name in ("vit_b16",)}


def part_memory(out: Path, args) -> dict:
    results = {}
    for name in ("vit_l16", "vit_h14"):
        for variant in ("plain", "grad_checkpointing", "fsdp2"):
            rc, text = sh(
                [sys.executable, __file__, "_memory", name, variant, "--out", str(out)],
                out / "memory.log",
                120,
                env={
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": "29511",
                    "RANK": "0",
                    "WORLD_SIZE": "1",
                    "LOCAL_RANK": "0",
                },
            )
            lines = [line for line in text.splitlines() if line.startswith("{")]
            results[f"{name} {variant}"] = (
                json.loads(lines[-1]) if rc == 0 and lines else {"rc": rc, "tail": text[-800:]}
            )
    return results


def memory_probe(name: str, variant: str) -> dict:
    """The largest batch whose training step (bf16 autocast, fused AdamW, eager) fits: two batches' peaks give
    memory per image, the prediction is tried, and lowered by 5% until it fits."""
    import torch
    import torch.nn.functional as F

    from vitkit.models import VisionTransformer, get_config

    torch.backends.cuda.matmul.allow_tf32 = True
    config = get_config(name, num_classes=1000)
    with torch.device("cuda"):
        model = VisionTransformer(config)
    model.set_grad_checkpointing(variant == "grad_checkpointing")
    if variant == "fsdp2":
        import torch.distributed as dist
        from torch.distributed.fsdp import fully_shard

        dist.init_process_group("nccl")
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    total = torch.cuda.get_device_properties(0).total_memory

    def step(batch: int) -> float:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        x = torch.randn(batch, 3, *config.image_size, device="cuda")
        y = torch.randint(0, 1000, (batch,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()

    a, b = step(8), step(16)
    per_image = (b - a) / 8
    fixed = a - 8 * per_image
    batch = int((0.97 * total - fixed) / per_image)
    tried = []
    while batch > 16:
        try:
            peak = step(batch)
            tried.append(batch)
            break
        except torch.cuda.OutOfMemoryError:
            tried.append(-batch)
            batch = int(batch * 0.95)
    return {
        "largest_batch": batch,
        "tries": tried,
        "mib_per_image": per_image / 2**20,
        "fixed_gib": fixed / 2**30,
        "peak_gib": peak / 2**30 if tried and tried[-1] > 0 else None,
        "device_gib": total / 2**30,
    }


def part_profile(out: Path, args) -> dict:
    rc, text = sh([sys.executable, __file__, "_profile", "--out", str(out)], out / "profile.log", args.part_timeout)
    lines = [line for line in text.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if rc == 0 and lines else {"rc": rc, "tail": text[-1500:]}


FAMILIES = (
    ("gemm", ("gemm", "xmma", "cutlass", "nvjet", "sm90_", "cublas")),
    ("attention", ("flash", "fmha", "attention", "cudnn")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("triton (fused elementwise, norms)", ("triton",)),
    ("copies and casts", ("copy", "memcpy", "memset", "cast")),
)


def profile_step(batch: int = 256) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from vitkit.inference import benchmark
    from vitkit.models import get_config

    setup = benchmark.Setup(
        config=get_config("vit_b16", num_classes=1000),
        batch_size=batch,
        dtype="bf16",
        device="cuda",
        mode="train",
        compile=True,
    )
    step = benchmark._step(benchmark.build_vitkit(setup), setup, batch)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    n = 5
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(n):
            step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - start) / n
    kernels: dict[str, float] = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            kernels[e.name] = kernels.get(e.name, 0.0) + e.device_time / 1e3 / n  # ms per step
    busy = sum(kernels.values())
    families = {label: 0.0 for label, _ in FAMILIES}
    families["other"] = 0.0
    for name, ms in kernels.items():
        low = name.lower()
        label = next((label for label, keys in FAMILIES if any(k in low for k in keys)), "other")
        families[label] += ms
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:25]
    return {
        "batch": batch,
        "wall_ms_per_step": wall * 1e3,
        "gpu_busy_ms_per_step": busy,
        "families_ms": families,
        "top_kernels_ms": [[k[:120], v] for k, v in top],
    }


def part_loop(out: Path, args) -> dict:
    """The training loop's own cost: `vitkit train` against the bare compiled step of the same model and batch."""
    run = out / "loop-run"
    common = [
        "model.name=vit_b16",
        "data.name=synthetic",
        "data.synthetic_size=4096",
        "data.synthetic_classes=1000",
        "train.batch_size=256",
        "train.compile=true",
        "train.log_every=10",
        "train.eval_every=100000",
        "train.checkpoint_every=100000",
        "augment.crop=pad",
        "augment.pad=4",
        "augment.hflip=0.5",
        "train.warmup_steps=10",
    ]
    with GpuSampler() as gpu:
        start = time.perf_counter()
        rc, text = sh(
            [*VITKIT, "train", "--out", str(run), "--no-progress", *common, "train.steps=120"],
            out / "loop.log",
            args.part_timeout,
        )
        end = time.perf_counter()
    rows = train_rows(run) if (run / "metrics.jsonl").exists() else []
    return {
        "rc": rc,
        "img_s": steady_img_s(run, skip=3) if rows else None,
        "gpu": gpu.between(start, end),
        "tail": text[-600:] if rc else "",
    }


def part_jpeg(out: Path, args) -> dict:
    folder = Path("/tmp/vitkit-jpegs")
    make_jpegs(folder, classes=10, per_class=400)
    from vitkit.data.images import jpeg_decoder

    results = {"decoder": jpeg_decoder()}
    for workers in (int(w) for w in args.jpeg_workers.split(",")):
        run = out / f"jpeg-w{workers}"
        with GpuSampler() as gpu:
            start = time.perf_counter()
            rc, text = sh(
                [
                    *VITKIT,
                    "train",
                    "--out",
                    str(run),
                    "--data",
                    str(folder),
                    "--no-progress",
                    "model.name=vit_s16",
                    "augment.crop=rrc",
                    "train.batch_size=256",
                    "train.compile=true",
                    "train.steps=60",
                    "train.log_every=5",
                    "train.eval_every=100000",
                    "train.checkpoint_every=100000",
                    f"data.workers={workers}",
                    "data.val_fraction=0.05",
                ],
                out / "jpeg.log",
                150,
            )
            end = time.perf_counter()
        rows = train_rows(run) if (run / "metrics.jsonl").exists() else []
        results[f"workers={workers}"] = {
            "rc": rc,
            "img_s": steady_img_s(run, skip=3) if rows else None,
            "gpu": gpu.between(start, end),
            "tail": text[-600:] if rc else "",
        }
    return results


def make_jpegs(folder: Path, classes: int, per_class: int) -> None:
    """Photo-like JPEGs (smooth colour fields with edges, quality 90) of ImageNet-like sizes, 256 to 640 px a side."""
    import numpy as np
    from PIL import Image

    if folder.exists():
        return
    rng = np.random.default_rng(0)
    for c in range(classes):
        (folder / "train" / f"class_{c}").mkdir(parents=True)
        for i in range(per_class):
            h, w = rng.integers(256, 641, size=2)
            small = rng.integers(0, 256, size=(h // 32 + 2, w // 32 + 2, 3)).astype(np.uint8)
            img = Image.fromarray(small).resize((int(w), int(h)), Image.BICUBIC)
            img.save(folder / "train" / f"class_{c}" / f"{i}.jpg", quality=90)


PARTS = {
    "env": part_env,
    "fmnist": part_fmnist,
    "tests": part_tests,
    "train": part_train,
    "infer": part_infer,
    "memory": part_memory,
    "profile": part_profile,
    "loop": part_loop,
    "jpeg": part_jpeg,
    "fp8": part_fp8,
}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_memory":
        print(json.dumps(memory_probe(sys.argv[2], sys.argv[3])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_profile":
        print(json.dumps(profile_step()))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("parts", nargs="+", choices=list(PARTS))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--fmnist", default="/usr/share/datasets/fashion-mnist", help="Fashion-MNIST IDX folder")
    parser.add_argument(
        "--seconds", type=float, default=270, help="training time the Fashion-MNIST run's steps are sized to"
    )
    parser.add_argument("--part-timeout", type=float, default=240)
    parser.add_argument("--train-models", default="vit_s16,vit_b16,vit_l16", help="train: which of the three models")
    parser.add_argument("--jpeg-workers", default="6,14", help="jpeg: the DataLoader worker counts to run")
    parser.add_argument("--fp8-steps", type=int, default=600, help="fp8: the loss curves' length in steps")
    parser.add_argument(
        "--compare-batch",
        nargs=2,
        action="append",
        default=[],
        metavar=("BATCH", "LR"),
        help="fmnist: also probe img/s at this batch and learning rate",
    )
    parser.add_argument(
        "--results",
        action="store_true",
        help="write the rows of the parts tests, train, infer, fmnist and memory to benchmarks/results/gpu.csv",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {}
    for name in args.parts:
        start = time.perf_counter()
        try:
            summary[name] = PARTS[name](args.out, args)
        except Exception as err:
            summary[name] = {"error": f"{type(err).__name__}: {err}"}
        summary[name + "_seconds"] = time.perf_counter() - start
        (args.out / f"{name}.json").write_text(json.dumps(summary[name], indent=1, default=str))
        print(
            f"== {name} ({summary[name + '_seconds']:.0f} s): {json.dumps(summary[name], default=str)[:3000]}",
            flush=True,
        )
    if args.results:
        rows = results_rows(summary)
        if rows:
            from rows import write_rows

            write_rows("gpu", rows)


def _pretty(model: str) -> str:
    """vit_l16 -> ViT-L/16."""
    return f"ViT-{model[4].upper()}/{model[5:]}"


def results_rows(summary: dict) -> list[dict]:
    """gpu.csv rows (ids as the published ones, the machine slug appended by rows.write_rows) of the parts that ran."""
    common = {"benchmark": "GPU training and inference"}
    rows = []
    tests = summary.get("tests", {})
    if "tail" in tests and tests.get("rc") in (0, 1):
        found = [line for line in tests["tail"].splitlines() if " passed" in line or " failed" in line]
        rows.append(
            {
                **common,
                "id": "gpu-tests",
                "claim": "`pytest -m gpu` (tests/test_gpu.py)",
                "figure": found[-1].strip("= ").split(" in ")[0] if found else f"rc {tests['rc']}",
                "unit": "tests",
                "setting": f"{summary['tests_seconds']:.0f} s",
            }
        )
    for mode, part in (("train", "train"), ("infer", "infer")):
        for model, r in summary.get(part, {}).items():
            if not isinstance(r, dict) or "speedup" not in r:
                continue
            rows.append(
                {
                    **common,
                    "id": f"gpu-{mode}-{model.replace('_', '-')}",
                    "claim": f"{'training' if mode == 'train' else 'inference'} speed over timm "
                    f"({r['vitkit_img_s']:,.0f} img/s, MFU {100 * r['vitkit_mfu']:.1f}%)",
                    "figure": f"{r['speedup']:.2f}",
                    "unit": "x",
                    "against": f"timm {r['timm_img_s']:,.0f} img/s, MFU {100 * r['timm_mfu']:.1f}%",
                    "model": model,
                    "setting": f"batch {r['batch']}, bf16, compiled" + (", fused AdamW" if mode == "train" else ""),
                }
            )
    fmnist = summary.get("fmnist", {})
    if "top1" in fmnist.get("test", {}):
        wall = fmnist.get("summary", {}).get("wall_time_s", fmnist["command_seconds"])
        rows.append(
            {
                **common,
                "id": "gpu-fashion-mnist",
                "claim": f"Fashion-MNIST test top-1 after {wall:.0f} s of training",
                "figure": f"{100 * fmnist['test']['top1']:.2f}",
                "unit": "%",
                "model": "configs/fashion_mnist_gpu.yaml",
                "setting": f"{fmnist['steps']:,} x {fmnist['batch']}, {fmnist['probe_img_s']:,.0f} img/s probe",
            }
        )
    memory = summary.get("memory", {})
    for model in ("vit_l16", "vit_h14"):
        plain, ckpt = (memory.get(f"{model} {v}", {}) for v in ("plain", "grad_checkpointing"))
        if "largest_batch" in plain and "largest_batch" in ckpt:
            rows.append(
                {
                    **common,
                    "id": f"gpu-memory-{model.replace('_', '-')}",
                    "claim": f"largest batch that trains, {_pretty(model)} at 224: plain / `train.grad_checkpointing`",
                    "figure": f"{plain['largest_batch']:,} / {ckpt['largest_batch']:,}",
                    "unit": "images",
                    "model": model,
                    "setting": "bf16 autocast, fused AdamW, eager",
                }
            )
    return rows


if __name__ == "__main__":
    main()
