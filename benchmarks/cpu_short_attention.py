"""Where training runs attention written out instead of torch's fused kernel (`vitkit.kernels.short_attention`,
WRITTEN_OUT_MAX_TOKENS and WRITTEN_OUT_MAX_SCORES): forward + backward of both over a grid of shapes, then whole
training steps of the demo model both ways, in turns.

    python benchmarks/cpu_short_attention.py --threads 2 --rounds 20 --results
    python benchmarks/cpu_short_attention.py --rounds 1 --results-dir /tmp/smoke   # a smoke run

Per shape (batch, heads, tokens, head size): the median time of each and their ratio, and whether vitkit's rule picks
the written-out form. Then the demo model (configs/fashion_mnist.yaml) at batch 256: ms per training step with the
rule as it is and with the fused kernel forced, interleaved, and the median of per-round ratios.

--results writes the demo model's row demo-step-written-out-attention-SLUG (SLUG: the machine kind) of
benchmarks/results/demo.csv through benchmarks/rows.py; --results-dir DIR writes DIR/demo.csv instead. Then run
`python benchmarks/render.py`.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from rows import add_results_arguments, write_asked_rows

import vitkit
from vitkit.inference.benchmark import device_name, interleaved_times
from vitkit.kernels import short_attention

SHAPES = [
    (256, 4, 16, 24),
    (256, 3, 17, 64),
    (128, 4, 50, 64),
    (128, 12, 50, 64),
    (64, 6, 65, 64),
    (256, 6, 65, 64),
    (64, 3, 101, 64),
    (64, 6, 129, 64),
    (16, 6, 197, 64),
    (64, 6, 197, 64),
]


def written_out(q, k, v):
    return ((q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5).softmax(-1) @ v


def shape_times(shape: tuple[int, int, int, int], rounds: int) -> dict[str, float]:
    q, k, v = (torch.randn(*shape, requires_grad=True) for _ in range(3))
    grad = torch.randn(*shape)

    def step(attention):
        return lambda: attention(q, k, v).backward(grad)

    times = interleaved_times(
        {"fused": step(F.scaled_dot_product_attention), "written_out": step(written_out)},
        device="cpu",
        rounds=rounds,
        warmup=2,
    )
    fused, out = (1e3 * statistics.median(times[name]) for name in ("fused", "written_out"))
    with torch.enable_grad():
        picked = short_attention.written_out_is_faster(q, k)
    return {"fused_ms": fused, "written_out_ms": out, "speedup": fused / out, "rule_picks_written_out": picked}


def demo_steps(rounds: int) -> dict[str, float]:
    config = dict(patch_size=7, width=96, mlp_dim=192, num_heads=4, depth=6, classifier="gap", num_classes=10)
    x, y = torch.randn(256, 1, 28, 28), torch.randint(0, 10, (256,))
    steps = {}
    for name in ("rule", "fused"):
        torch.manual_seed(0)
        model = short_attention.install(vitkit.create_model("vit_mini4_28", **config))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step(model=model, opt=opt, forced=name == "fused"):
            limit = short_attention.WRITTEN_OUT_MAX_TOKENS
            short_attention.WRITTEN_OUT_MAX_TOKENS = 0 if forced else limit
            try:
                F.cross_entropy(model(x), y).backward()
            finally:
                short_attention.WRITTEN_OUT_MAX_TOKENS = limit
            opt.step()
            opt.zero_grad(set_to_none=True)

        steps[name] = step
    times = interleaved_times(steps, device="cpu", rounds=rounds, warmup=2)
    return {
        "rule_ms": 1e3 * statistics.median(times["rule"]),
        "fused_ms": 1e3 * statistics.median(times["fused"]),
        "speedup": statistics.median(f / r for f, r in zip(times["fused"], times["rule"])),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--rounds", type=int, default=20)
    add_results_arguments(p, "demo")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{device_name('cpu')}, torch {torch.__version__}, fp32, forward + backward")
    report = {
        "device": device_name("cpu"),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "shapes": {},
    }
    for shape in SHAPES:
        r = report["shapes"][str(shape)] = shape_times(shape, args.rounds)
        print(
            f"{str(shape):20s} fused {r['fused_ms']:7.2f} ms  written out {r['written_out_ms']:7.2f} ms  "
            f"{r['speedup']:.2f}x  rule: {'written out' if r['rule_picks_written_out'] else 'fused'}",
            flush=True,
        )
    d = report["demo"] = demo_steps(args.rounds)
    print(
        f"demo model training step, batch 256: {d['rule_ms']:.1f} ms (rule) against {d['fused_ms']:.1f} ms (fused): "
        f"{d['speedup']:.2f}x"
    )
    print(json.dumps(report))
    row = {
        "id": "demo-step-written-out-attention",
        "benchmark": "Fashion-MNIST demo (`make demo`)",
        "claim": "training step, attention written out for short sequences",
        "figure": f"{d['speedup']:.2f}",
        "unit": "x",
        "against": f"torch's fused attention ({d['rule_ms']:.1f} vs {d['fused_ms']:.1f} ms)",
        "model": "demo model",
        "setting": f"batch 256, fp32, {report['threads']} threads, interleaved rounds",
    }
    write_asked_rows(args, "demo", [row])


if __name__ == "__main__":
    main()
