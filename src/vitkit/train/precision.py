"""train.precision: which precision a run trains in, and why (the plan's `precision` line).

    choice = choose(config.train.precision, model, env.device, env.micro)
    choice.dtype     # the autocast dtype, None for fp32
    choice.reason    # "bf16: 1.62x fp32 (forward + backward, measured 2026-11-27 on this CPU)"

fp32 / bf16 / fp16   as asked.
fp8    as asked: the blocks' linear layers in torchao's float8, bf16 autocast elsewhere (vitkit.kernels.float8).
auto   bf16 autocast on a GPU. On a CPU with native bf16 (AVX512_BF16 or AMX) bf16 where a measurement shows it
       faster: forward + backward of the run's model in both precisions, in turns, a few passes each (some seconds,
       once). The result is kept in a small JSON file in vitkit's cache folder, per CPU (model, flags), torch
       version, thread count and model shape, so later runs read it. Models under MIN_GFLOPS per image stay fp32
       unmeasured: their steps are too short for bf16's casts to pay back. A CPU without native bf16 stays fp32.
       A compiled run (train.compile) on a CPU with native bf16 trains bf16 unmeasured: the compiled graph fuses the
       casts into the work around them, and AMX's bf16 tiles or AVX512_BF16's dot products then pay even for a small
       model (the rows demo-step-compiled-* in benchmarks/results); measuring it would compile the model twice more.
A resumed run keeps the precision its first stretch chose (train_state.json), so a resume stays exact.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import statistics
import time
from datetime import datetime, timezone

import torch
from torch import nn

from vitkit.files import read_json, write_json
from vitkit.inference.precision import cpu_flags, cpuinfo, native_bf16
from vitkit.kernels import float8
from vitkit.models.distill import one_output
from vitkit.paths import cache_root

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}  # fp8: autocast dtype
MIN_GFLOPS = 0.1  # per image, forward: below it a CPU step is short and bf16 gains nothing (the demo's model: 0.015)
FASTER = 1.1  # bf16 must beat fp32 by this much: a smaller margin is within a shared machine's noise
ROUNDS = 3  # timed passes per precision, in turns, after one warm-up pass each
CACHE_FILE = "train_precision.json"


@dataclasses.dataclass(frozen=True)
class Choice:
    name: str  # fp32 | bf16 | fp16 | fp8
    reason: str  # what the plan prints

    @property
    def dtype(self) -> torch.dtype | None:
        return DTYPES[self.name]


def choose(
    asked: str,
    model: nn.Module,
    device: torch.device,
    micro: int,
    *,
    earlier: str | None = None,
    processes: int = 1,
    compiled: bool = False,
) -> Choice:
    """The precision a run trains in: `asked` (train.precision), or for "auto" what pays on `device` (see the module
    docstring). `earlier`: the precision a resumed run trained in so far (kept, for an exact resume); `compiled`:
    whether the run's step is compiled."""
    if asked == "fp8":
        return Choice(asked, float8.describe(model, device))
    if asked != "auto":
        return Choice(asked, f"{asked} (train.precision={asked})")
    if earlier is not None:
        return Choice(earlier, f"{earlier}, as this run's earlier stretch (train.precision=auto, kept on resume)")
    if device.type == "cuda":
        return Choice("bf16", "bf16 autocast on the GPU (train.precision=auto)")
    if device.type != "cpu":
        return Choice("fp32", f"fp32 on {device.type} (train.precision=auto)")
    isa = native_bf16()
    if isa is None:
        return Choice("fp32", "fp32: this CPU has no native bf16 (train.precision=auto)")
    if processes > 1:  # every process must train alike: each measuring for itself could disagree
        return Choice("fp32", "fp32: several processes (train.precision=auto); train.precision=bf16 asks for bf16")
    if compiled:
        return Choice(
            "bf16",
            f"bf16 ({isa}, compiled: the casts fuse into the work around them; rows demo-step-compiled-* in "
            "benchmarks/results; train.precision=auto, fp32 for fp32)",
        )
    from vitkit.models.summary import count_flops

    gflops = count_flops(model.config) / 1e9
    if gflops < MIN_GFLOPS:
        return Choice("fp32", f"fp32: bf16 gains nothing for a model this small ({gflops:.3g} GFLOPs/image)")
    images = min(micro, 32)
    speedup, date = cached_speedup(model, images)
    pick = "bf16" if speedup >= FASTER else "fp32"
    if pick == "bf16":
        return Choice("bf16", f"bf16 ({isa}): {speedup:.2f}x fp32, measured {date} on this CPU (train.precision=auto)")
    return Choice(
        "fp32", f"fp32: bf16 not faster for this model ({speedup:.2f}x, measured {date}; train.precision=auto)"
    )


# what the timed pass runs: a new number when that changes (short bf16 attention written out), so older measurements
# in the cache are not reused
PASS_VERSION = 2


def cache_key(model: nn.Module, images: int) -> str:
    """The measurement's key: the pass's version, CPU model and flags, torch version, threads, the model's shape and
    the pass's images."""
    what = [
        PASS_VERSION,
        cpuinfo("model name"),
        sorted(cpu_flags()),
        torch.__version__,
        torch.get_num_threads(),
        images,
        dataclasses.asdict(model.config),
    ]
    return hashlib.sha256(json.dumps(what, default=str, sort_keys=True).encode()).hexdigest()[:20]


def cached_speedup(model: nn.Module, images: int) -> tuple[float, str]:
    """(bf16's speed over fp32's, the date it was measured): from the cache, else measured now and kept."""
    path = cache_root() / CACHE_FILE
    key = cache_key(model, images)
    try:
        known = read_json(path) if path.is_file() else {}
    except Exception:  # a damaged cache is measured again and rewritten
        known = {}
    known = known if isinstance(known, dict) else {}
    entry = known.get(key)
    if isinstance(entry, dict) and isinstance(entry.get("speedup"), float) and isinstance(entry.get("date"), str):
        return entry["speedup"], entry["date"]
    speedup = measure_speedup(model, images)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    known[key] = {"speedup": speedup, "date": date, "cpu": cpuinfo("model name"), "torch": torch.__version__}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, known)
    except Exception:  # a read-only cache or another run writing it: measured again next time
        pass
    return speedup, date


@contextlib.contextmanager
def timing_passes(model: nn.Module, device: torch.device):
    """Around passes that only time the model itself (no copy: memory stays as it is): afterwards the RNG state and
    the buffers (BatchNorm's running statistics) are as before and the gradients cleared, so the run's weights, data
    order and random draws are untouched."""
    kept = [b.detach().clone() for b in model.buffers()]
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            yield
    finally:
        with torch.no_grad():
            for buffer, before in zip(model.buffers(), kept):
                buffer.copy_(before)
        model.zero_grad(set_to_none=True)


def measure_speedup(model: nn.Module, images: int) -> float:
    """fp32's time over bf16 autocast's for forward + backward of `images` images through `model` (on the CPU), the
    median of per-round ratios, the precisions taking turns, within `timing_passes`."""
    c = model.config
    x = torch.zeros(images, c.in_chans, *c.image_size)
    was_training = model.training
    model.train()

    def seconds(dtype: torch.dtype | None) -> float:
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = one_output(model(x)).float().logsumexp(-1).mean()
        loss.backward()
        return time.perf_counter() - start

    with timing_passes(model, torch.device("cpu")):
        seconds(None), seconds(torch.bfloat16)  # warm-up: first passes allocate and pick kernels
        ratios = []
        for r in range(ROUNDS):
            order = (None, torch.bfloat16) if r % 2 == 0 else (torch.bfloat16, None)
            t = {dtype: seconds(dtype) for dtype in order}
            ratios.append(t[None] / t[torch.bfloat16])
    model.train(was_training)
    return float(statistics.median(ratios))


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, or None for plain fp32: bf16 on GPU by default, fp32 on CPU until the run resolves auto
    (vitkit.train.precision.choose, once the model is built)."""
    if precision == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    return DTYPES[precision]
