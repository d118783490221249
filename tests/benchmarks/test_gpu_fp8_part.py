"""benchmarks/gpu.py's fp8 part without a GPU: the commands it would run are valid (each training run's config loads)
and it compares the two loss curves step for step."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

from vitkit.train.config import load_run_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gpu


def test_the_fp8_part_runs_valid_configs_and_reports_the_largest_loss_gap(tmp_path, monkeypatch):
    benches, runs = [], []

    def bench(out, name, mode, batch, timeout, extra, compare):
        benches.append((name, mode, extra, compare))
        return {"batch": batch}

    monkeypatch.setattr(gpu, "_bench", bench)
    curves = {"bf16": [2.0, 1.0, 0.5], "fp8": [2.1, 1.0, 0.45]}

    def sh(cmd, log, timeout, env=None):
        args = cmd[cmd.index("train") + 1 :]
        out = Path(args[args.index("--out") + 1])
        overrides = [a for a in args if "=" in a and not a.startswith("--")]
        config = load_run_config(Path(args[args.index("--config") + 1]), overrides)  # a bad key would raise here
        runs.append(config.train.precision)
        out.mkdir(parents=True)
        rows = [{"kind": "train", "loss": loss, "img_s": 1000.0} for loss in curves[config.train.precision]]
        (out / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
        return 0, ""

    monkeypatch.setattr(gpu, "sh", sh)
    report = gpu.part_fp8(tmp_path, SimpleNamespace(fmnist=str(tmp_path), fp8_steps=60))
    assert runs == ["bf16", "fp8"]
    assert [b[0] for b in benches] == ["vit_b16", "vit_l16"]
    assert all(b[1] == "train" and "fp8" in b[2] and b[3] == "timm,vitkit:bf16" for b in benches)
    assert report["curves"]["fp8"]["loss"] == curves["fp8"]
    assert abs(report["largest_loss_gap"] - 0.1) < 1e-9  # |0.45 - 0.5| / 0.5
