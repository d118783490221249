"""train.precision: auto picks bf16 on a CPU where a measurement (kept per machine and model shape) says it is faster;
bf16 training on the CPU learns like fp32 and resumes exactly. Measurements are injected: no test times anything."""

import json

import pytest
import torch
from tiny_run import TINY_RUN as TINY

from vitkit.checkpoint.io import read_safetensors
from vitkit.models import create_model
from vitkit.train import precision, train
from vitkit.train.config import load_run_config


@pytest.fixture
def measured(monkeypatch, tmp_path):
    """A CPU with AVX512_BF16, its cache in tmp_path, and a measurement that returns `speedups` in turn (recorded)."""
    monkeypatch.setenv("VITKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(precision, "native_bf16", lambda: "AVX512_BF16")
    calls, speedups = [], []

    def measure(model, images):
        calls.append((model.config.width, images))
        return speedups.pop(0)

    monkeypatch.setattr(precision, "measure_speedup", measure)
    return calls, speedups


def test_auto_measures_once_per_model_shape_and_keeps_the_result(measured, monkeypatch, tmp_path):
    calls, speedups = measured
    cpu = torch.device("cpu")
    small = create_model("vit_test")
    # a model this small is never measured: fp32, and the plan says why
    choice = precision.choose("auto", small, cpu, 16)
    assert choice.dtype is None and "bf16 gains nothing for a model this small" in choice.reason and not calls
    monkeypatch.setattr(precision, "MIN_GFLOPS", 0.0)
    speedups += [1.6, 0.9, 1.3]
    choice = precision.choose("auto", small, cpu, 64)
    assert choice.dtype == torch.bfloat16 and calls == [(32, 32)]  # passes of at most 32 images
    assert "bf16 (AVX512_BF16): 1.60x fp32, measured 20" in choice.reason
    assert precision.choose("auto", small, cpu, 64) == choice and len(calls) == 1  # read from the cache
    wider = create_model("vit_test", width=64, num_heads=2)  # another shape: measured on its own
    choice = precision.choose("auto", wider, cpu, 8)
    assert choice.dtype is None and "fp32: bf16 not faster for this model (0.90x" in choice.reason
    assert calls[-1] == (64, 8)
    kept = json.loads((tmp_path / "cache" / precision.CACHE_FILE).read_text())
    assert sorted(e["speedup"] for e in kept.values()) == [0.9, 1.6]
    (tmp_path / "cache" / precision.CACHE_FILE).write_text("{damaged")  # measured again, not an error
    assert precision.choose("auto", small, cpu, 64).reason.startswith("bf16 (AVX512_BF16): 1.30x") and len(calls) == 3
    # what is not measured: a CPU without native bf16, several processes, an asked precision, a resumed run's
    monkeypatch.setattr(precision, "native_bf16", lambda: None)
    assert "no native bf16" in precision.choose("auto", small, cpu, 64).reason
    monkeypatch.setattr(precision, "native_bf16", lambda: "AMX")
    assert precision.choose("auto", small, cpu, 64, processes=2).dtype is None
    assert precision.choose("bf16", small, cpu, 64).reason == "bf16 (train.precision=bf16)"
    assert precision.choose("auto", small, cpu, 64, earlier="fp32").dtype is None and len(calls) == 3


def test_a_compiled_run_on_native_bf16_trains_bf16_unmeasured_and_the_plan_says_why(
    measured, monkeypatch, capsys, tmp_path
):
    """Compiled, the casts fuse: even the demo's small model trains faster in bf16 on AMX and on AVX512_BF16, so a
    compiled run there takes bf16 without measuring (that would compile twice more). Eager, or on a CPU without
    native bf16, a model this small stays fp32."""
    calls, _ = measured
    cpu, small = torch.device("cpu"), create_model("vit_test")
    monkeypatch.setattr(precision, "native_bf16", lambda: "AMX")
    assert precision.choose("auto", small, cpu, 16).dtype is None  # eager: too small to gain
    choice = precision.choose("auto", small, cpu, 16, compiled=True)
    assert choice.dtype == torch.bfloat16 and "bf16 (AMX, compiled" in choice.reason and not calls
    assert precision.choose("fp32", small, cpu, 16, compiled=True).dtype is None  # asked: as asked
    assert precision.choose("auto", small, cpu, 16, compiled=True, processes=2).dtype is None
    monkeypatch.setattr(precision, "native_bf16", lambda: "AVX512_BF16")
    choice = precision.choose("auto", small, cpu, 16, compiled=True)
    assert choice.dtype == torch.bfloat16 and "bf16 (AVX512_BF16, compiled" in choice.reason and not calls
    assert precision.choose("auto", small, cpu, 16).dtype is None  # eager: too small to gain
    monkeypatch.setattr(precision, "native_bf16", lambda: None)
    assert precision.choose("auto", small, cpu, 16, compiled=True).dtype is None and not calls
    # a run with train.compile=true: torch.compile stands in as the identity (nothing compiles), AMX as the CPU's
    monkeypatch.setattr(precision, "native_bf16", lambda: "AMX")
    monkeypatch.setattr(torch, "compile", lambda module, **kwargs: module)
    train(load_run_config(None, [*TINY, "train.steps=2", "train.compile=true"]), tmp_path / "compiled")
    assert "precision  bf16 (AMX, compiled" in capsys.readouterr().out
    train(load_run_config(None, [*TINY, "train.steps=2"]), tmp_path / "eager")
    assert "precision  fp32: bf16 gains nothing for a model this small" in capsys.readouterr().out and not calls


def test_bf16_training_on_the_cpu_learns_like_fp32_and_resumes_exactly(measured, monkeypatch, tmp_path, capsys):
    """auto picks bf16 where measured faster, the plan says so, and the run keeps bf16 when resumed whatever a new
    measurement says. The resumed run's weights equal the straight run's bit for bit (same machine: exact)."""
    calls, speedups = measured
    monkeypatch.setattr(precision, "MIN_GFLOPS", 0.0)
    speedups += [1.7]
    overfit = ["data.synthetic_size=16", "train.steps=12", "train.lr=1e-2", "train.weight_decay=0"]
    overfit += ["augment.crop=none", "augment.hflip=0", "train.log_every=1", "train.checkpoint_every=6"]
    config = load_run_config(None, TINY + overfit)
    train(config, tmp_path / "straight")
    assert "precision  bf16 (AVX512_BF16): 1.70x fp32, measured" in capsys.readouterr().out
    train(config, tmp_path / "resumed", stop_at=6)
    assert len(calls) == 1  # the second run read the measurement from the cache
    (tmp_path / "cache" / precision.CACHE_FILE).unlink()
    speedups[:] = [0.5]  # a resume must not measure, nor switch to fp32
    capsys.readouterr()
    train(config, tmp_path / "resumed", resume=True)
    assert "precision  bf16, as this run's earlier stretch" in capsys.readouterr().out and speedups == [0.5]
    a = read_safetensors(tmp_path / "straight" / "final" / "model.safetensors")
    b = read_safetensors(tmp_path / "resumed" / "final" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    train(load_run_config(None, TINY + overfit + ["train.precision=fp32"]), tmp_path / "fp32")

    def losses(run):
        rows = [json.loads(x) for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        return [r["loss"] for r in rows if r["kind"] == "train"]

    bf16, fp32 = losses("straight"), losses("fp32")
    assert losses("resumed") == bf16
    assert bf16[-1] < 0.5 * bf16[0]  # it learns
    assert bf16 != fp32 and bf16 == pytest.approx(fp32, rel=0.1)  # in bf16, not fp32, and close to fp32's curve
