"""CPU twins of tests/test_gpu.py: the logic each CUDA test runs besides the GPU's own arithmetic (bookkeeping, reports,
MFU and ratios, candidate setup, the runner's timing), run with device cpu on a tiny model, so CI sees it break.
The twins that live beside their subject are listed in test_gpu.py's docstring; these are the ones that had none."""

import json

import pytest
import torch
from tiny_run import TINY_RUN as TRAIN_TINY

from vitkit.checkpoint.io import read_safetensors
from vitkit.train import train
from vitkit.train.config import load_run_config

# the train tests' tiny run, on the CPU, without the random crops and flips that would part two runs' batches
TINY = [*TRAIN_TINY, "augment.crop=none", "augment.hflip=0", "train.device=cpu"]


def _train_losses(run):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["kind"] == "train"]


def test_ema_is_the_average_not_the_last_step(tmp_path):
    """test_ema_on_cuda_is_the_average_not_the_last_step on the CPU: the final weights are the average."""
    out = tmp_path / "run"
    train(load_run_config(None, TINY + ["train.steps=6", "train.ema=0.9"]), out)
    final = read_safetensors(out / "final" / "model.safetensors")
    last = read_safetensors(out / "checkpoints" / "step_0000006" / "model.safetensors")
    assert final.keys() == last.keys()
    assert not torch.equal(final["head.weight"], last["head.weight"])
    assert all(torch.isfinite(v).all() for v in final.values() if v.is_floating_point())


@pytest.mark.slow
def test_compiled_training_matches_eager(tmp_path):
    """test_compiled_training_on_cuda_matches_eager on the CPU: torch.compile changes kernels, not the sums."""
    train(load_run_config(None, TINY + ["train.steps=4"]), tmp_path / "eager")
    train(load_run_config(None, TINY + ["train.steps=4", "train.compile=true"]), tmp_path / "compiled")
    eager, compiled = _train_losses(tmp_path / "eager"), _train_losses(tmp_path / "compiled")
    assert len(eager) == len(compiled) == 2
    for x, y in zip(eager, compiled):
        assert x == pytest.approx(y, rel=1e-3), (eager, compiled)


def test_benchmark_both_modes_reports_mfu_and_a_ratio_to_a_reference(vitkit_cmd, tmp_path):
    """test_benchmark_on_cuda_reports_mfu_and_a_ratio_to_timm on the CPU, through the same command: --mode both writes
    one report per mode, each with vitkit's MFU against the measured peak and the ratio to the reference. transformers
    stands in for timm, which is not installed where CI runs (its bookkeeping with a foreign model:
    inference/test_benchmark.py's test_a_candidate_from_another_library_gets_no_vitkit_kernels_and_is_reported_so)."""
    pytest.importorskip("transformers")
    out = tmp_path / "b.json"
    done = vitkit_cmd(
        "benchmark", "--device", "cpu", "--model", "vit_test", "--batch", "2", "--mode", "both",
        "--compare", "transformers", "--rounds", "1", "--compile", "off", "--kernels", "torch", "--json", out,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    reports = json.loads(out.read_text())
    assert [r["mode"] for r in reports] == ["inference", "train"]
    for report in reports:
        assert report["dtype"] == "fp32" and report["device"].endswith(("thread", "threads"))
        assert report["results"]["vitkit"]["mfu"] > 0 and report["speedup"]["vitkit/transformers"] > 0
        assert report["candidates"]["transformers"] == "transformers fp32"


def test_a_runner_choosing_its_path_times_four_finished_batches(monkeypatch):
    """test_a_runner_choosing_its_path_on_cuda_times_finished_batches on the CPU: a runner deciding by itself times
    the eager batch, the one that compiled and the two it compares, each through `_seconds_since` (which waits for a
    GPU's batch to finish), and keeps the path that won."""
    from vitkit.inference import precision
    from vitkit.models import create_model

    timed = []
    seconds_since = precision.Runner._seconds_since
    monkeypatch.setattr(
        precision.Runner, "_seconds_since", lambda self, start: (timed.append(1), seconds_since(self, start))[1]
    )
    monkeypatch.setattr(precision.Runner, "_compiled", lambda self: self.forward)
    model = create_model("vit_test").eval()
    x = torch.randn(8, 3, *model.config.image_size)
    expected = model(x)
    runner = precision.prepare(model, "fp32", device="cpu", batches=10**9, kernels=False)
    runner.settle(x)
    assert len(timed) == 4
    torch.testing.assert_close(runner(x), expected)
