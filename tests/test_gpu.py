"""The CUDA paths: training (bf16 autocast, fused AdamW, compile), resume, EMA, masked-patch pre-training,
evaluation, export, inspection, the benchmark and a one-GPU torchrun under DDP and FSDP2.

Marked gpu: skipped where no CUDA device is visible (CI). Run them on a GPU machine with `pytest -m gpu`.

Each has a CPU twin that runs the same logic on device cpu, so CI sees it break:
    bf16 training               train/test_train_precision.py test_bf16_training_on_the_cpu_learns_like_fp32_and_resumes_exactly
    fp8 training                train/test_float8.py test_fp8_training_follows_the_bf16_loss_curve_and_saves_a_plain_model
    interrupted and resumed     train/test_loop.py test_interrupted_and_resumed_equals_straight (the same two settings)
    compiled training           test_gpu_twins.py test_compiled_training_matches_eager
    EMA                         test_gpu_twins.py test_ema_is_the_average_not_the_last_step
    masked patch pre-training   train/test_masked_patch.py test_loss_decreases_on_a_tiny_synthetic_set
    eval at reduced precision   cli/test_eval.py test_reduced_precision_reports_its_cost_against_fp32
    export of a trained run     inference/test_export.py test_cli_export
    inspection numbers          cli/test_inspect.py test_inspect_writes_every_figure_and_the_numbers
    benchmark against timm      test_gpu_twins.py test_benchmark_both_modes_reports_mfu_and_a_ratio_to_a_reference,
                                inference/test_benchmark.py test_a_candidate_from_another_library_gets_no_vitkit_kernels_and_is_reported_so
    torchrun DDP and FSDP       train/test_distributed.py test_two_ddp_processes_match_one_process,
                                test_fsdp_resumes_on_another_world_size_with_its_ema_weights
    a runner choosing its path  test_gpu_twins.py test_a_runner_choosing_its_path_times_four_finished_batches
"""

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from tiny_run import TINY_RUN

from vitkit.checkpoint.io import read_safetensors
from vitkit.checkpoint.native import load_native
from vitkit.train import train
from vitkit.train.config import load_run_config

pytestmark = pytest.mark.gpu

# the suite's tiny run, two blocks at 16 px on the GPU (threads back to the default: the CPU only feeds it)
TINY = [
    *TINY_RUN,
    "model.depth=2",
    "model.image_size=16",
    "data.synthetic_size=128",
    "train.batch_size=32",
    "train.threads=0",
    "train.device=cuda",
]


def _train_rows(run):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == "train"]


def test_bf16_training_on_cuda_learns_and_saves_weights_a_cpu_loads(tmp_path):
    config = load_run_config(
        None,
        TINY
        + [
            "data.synthetic_size=16",
            "train.batch_size=16",
            "train.steps=30",
            "train.lr=1e-2",
            "train.weight_decay=0",
            "augment.crop=none",
            "augment.hflip=0",
            "train.log_every=1",
        ],
    )
    train(config, tmp_path / "run")
    losses = [r["loss"] for r in _train_rows(tmp_path / "run")]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < 0.3 * losses[0]
    model, _ = load_native(tmp_path / "run" / "final")  # saved from the GPU, loaded on the CPU
    assert next(model.parameters()).device.type == "cpu"


@pytest.mark.skipif(
    torch.cuda.is_available() and torch.cuda.get_device_capability() < (8, 9), reason="no fp8 tensor cores"
)
def test_fp8_training_on_cuda_compiled_follows_bf16(tmp_path):
    """train.precision=fp8 on a GPU with fp8 tensor cores, compiled: it learns, close to bf16's loss curve (CPU twin:
    train/test_float8.py)."""
    overfit = ["data.synthetic_size=16", "train.batch_size=16", "train.steps=30", "train.lr=1e-2"]
    overfit += [
        "train.weight_decay=0",
        "augment.crop=none",
        "augment.hflip=0",
        "train.log_every=1",
        "train.compile=true",
    ]
    for precision in ("fp8", "bf16"):
        train(load_run_config(None, TINY + overfit + [f"train.precision={precision}"]), tmp_path / precision)
    fp8, bf16 = ([r["loss"] for r in _train_rows(tmp_path / p)] for p in ("fp8", "bf16"))
    assert all(math.isfinite(x) for x in fp8) and fp8[-1] < 0.3 * fp8[0]
    assert fp8 != bf16 and fp8 == pytest.approx(bf16, rel=0.15)


@pytest.mark.parametrize(
    "extra",
    [
        [],
        [
            "train.micro_batch=16",
            "augment.mixup=0.8",
            "augment.cutmix=1.0",
            "augment.erase=0.5",
            "model.dropout=0.1",
            "train.ema=0.9",
        ],
    ],
)
def test_interrupted_and_resumed_on_cuda_equals_straight(tmp_path, extra):
    config = load_run_config(
        None, TINY + ["train.steps=7", "train.checkpoint_every=3", "augment.randaugment_ops=1"] + extra
    )
    torch.use_deterministic_algorithms(True, warn_only=True)  # atomics in some backward kernels would add noise
    try:
        train(config, tmp_path / "straight")
        assert train(config, tmp_path / "resumed", stop_at=3) == {"stopped_at": 3, "steps": 7}
        train(config, tmp_path / "resumed", resume=True)
    finally:
        torch.use_deterministic_algorithms(False)
    a = read_safetensors(tmp_path / "straight" / "final" / "model.safetensors")
    b = read_safetensors(tmp_path / "resumed" / "final" / "model.safetensors")
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=1e-5, rtol=0, msg=key)
    assert [r["step"] for r in _train_rows(tmp_path / "resumed")] == [
        r["step"] for r in _train_rows(tmp_path / "straight")
    ]


def test_compiled_training_on_cuda_matches_eager(tmp_path):
    """torch.compile changes kernels, not the computation: the same losses to bf16 rounding."""
    common = TINY + ["train.steps=6", "augment.crop=none", "augment.hflip=0"]
    train(load_run_config(None, common), tmp_path / "eager")
    train(load_run_config(None, common + ["train.compile=true"]), tmp_path / "compiled")
    eager = [r["loss"] for r in _train_rows(tmp_path / "eager")]
    compiled = [r["loss"] for r in _train_rows(tmp_path / "compiled")]
    assert len(eager) == len(compiled) == 3
    for x, y in zip(eager, compiled):
        assert math.isclose(x, y, rel_tol=2e-2), (eager, compiled)


def test_ema_on_cuda_is_the_average_not_the_last_step(tmp_path):
    out = tmp_path / "run"
    train(load_run_config(None, TINY + ["train.steps=6", "train.ema=0.9"]), out)
    final = read_safetensors(out / "final" / "model.safetensors")
    last = read_safetensors(out / "checkpoints" / "step_0000006" / "model.safetensors")
    assert not torch.equal(final["head.weight"], last["head.weight"])
    assert all(torch.isfinite(v).all() for v in final.values() if v.is_floating_point())


def test_masked_patch_pretraining_on_cuda(tmp_path):
    out = tmp_path / "run"
    train(load_run_config(None, TINY + ["train.objective=masked_patch", "train.steps=20", "train.lr=3e-3"]), out)
    losses = [r["loss"] for r in _train_rows(out)]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]


@pytest.fixture(scope="module")
def cuda_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu") / "run"
    train(load_run_config(None, TINY + ["train.steps=8"]), out)
    return out


def _cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "vitkit", *map(str, args)], capture_output=True, text=True, timeout=600, cwd=cwd
    )


def test_eval_on_cuda_agrees_with_the_cpu(cuda_run):
    results = {}
    for device in ("cpu", "cuda"):
        r = _cli("eval", cuda_run, "--split", "val", "--device", device, "--json")
        assert r.returncode == 0, r.stderr
        results[device] = json.loads(r.stdout.strip().splitlines()[-1])
    assert results["cuda"]["n"] == results["cpu"]["n"] > 0
    assert abs(results["cuda"]["top1"] - results["cpu"]["top1"]) <= 2 / results["cpu"]["n"]  # bf16 may flip a near tie


def test_a_cuda_trained_model_exports_and_the_export_matches(cuda_run, tmp_path):
    pytest.importorskip("onnxruntime")
    r = _cli("export", cuda_run, "--format", "onnx", "--out", tmp_path / "m.onnx")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "m.onnx").stat().st_size > 0


def test_inspection_on_cuda_gives_the_cpu_numbers(cuda_run, tmp_path):
    from PIL import Image

    images = tmp_path / "images"
    images.mkdir()
    g = torch.Generator().manual_seed(0)
    for i in range(6):
        pixels = torch.randint(0, 256, (20, 24, 3), generator=g, dtype=torch.uint8).numpy()
        Image.fromarray(pixels).save(images / f"{i}.png")
    numbers = {}
    for device in ("cpu", "cuda"):
        r = _cli(
            "inspect",
            cuda_run,
            "--images",
            images,
            "--out",
            tmp_path / device,
            "--device",
            device,
            "--show",
            "2",
            "--components",
            "4",
        )
        assert r.returncode == 0, r.stderr
        numbers[device] = json.loads((tmp_path / device / "inspection.json").read_text())
    assert numbers["cuda"]["figures"] == numbers["cpu"]["figures"]
    for key in ("mean_attention_distance", "filter_explained_variance_ratio"):
        torch.testing.assert_close(
            torch.tensor(numbers["cuda"][key]), torch.tensor(numbers["cpu"][key]), atol=1e-3, rtol=1e-3
        )


def test_benchmark_on_cuda_reports_mfu_and_a_ratio_to_timm(tmp_path):
    pytest.importorskip("timm")
    r = _cli(
        "benchmark",
        "--device",
        "cuda",
        "--model",
        "vit_test",
        "--batch",
        "8",
        "--mode",
        "both",
        "--compare",
        "timm",
        "--rounds",
        "2",
        "--compile",
        "off",
        "--json",
        tmp_path / "b.json",
    )
    assert r.returncode == 0, r.stderr
    reports = json.loads((tmp_path / "b.json").read_text())
    for report in reports:
        assert report["dtype"] == "bf16" and report["device"] == torch.cuda.get_device_name(0)
        assert 0 < report["results"]["vitkit"]["mfu"] < 1 and report["speedup"]["vitkit/timm"] > 0


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_torchrun_on_one_gpu_trains_under_nccl(tmp_path, strategy):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=1",
            "--master_port",
            str(29500 + (strategy == "fsdp")),
            "-m",
            "vitkit",
            "train",
            "--out",
            str(out),
            *TINY,
            "train.steps=4",
            f"train.strategy={strategy}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert all(math.isfinite(row["loss"]) for row in _train_rows(out))
    load_native(out / "final")


def test_a_runner_choosing_its_path_on_cuda_times_finished_batches(monkeypatch):
    """eval's runner times an eager batch, compiles, and keeps the compiled graph only where two batches of it beat that
    eager one: on a GPU each of those timings must wait for the batch to finish, not only for its launch."""
    from vitkit.inference import precision
    from vitkit.models import create_model

    synced = []
    synchronize = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: (synced.append(device), synchronize(device))[1])
    model = create_model("vit_test").eval()
    x = torch.randn(8, 3, *model.config.image_size)
    expected = model(x).float()
    runner = precision.prepare(model, "bf16", device="cuda", batches=10**9)  # decides on its first batch: compiles
    runner.settle(x)
    out = runner(x).float().cpu()
    timed = [d for d in synced if d is not None]  # inductor's own benchmarking synchronises too, with no device
    assert timed == [torch.device("cuda")] * 4  # the eager batch, the compiling one, the two compared
    assert runner.compiled or "compiled ran slower" in runner.description
    torch.testing.assert_close(out, expected, atol=5e-2, rtol=5e-2)
