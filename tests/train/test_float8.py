"""train.precision=fp8: the blocks' linear layers in torchao's float8, everything else in bf16 autocast. The CPU has no
fp8 matrix units but runs the same layers, so the recipe, its loss curve against bf16's and its checkpoints are
checked here; the GPU's speed is benchmarks/gpu.py's fp8 part, its run tests/test_gpu.py."""

import json

import pytest
import torch
from tiny_run import TINY_RUN as TINY
from torch import nn

import vitkit
from vitkit.checkpoint.io import read_safetensors
from vitkit.errors import ConfigError
from vitkit.kernels import float8
from vitkit.models import create_model
from vitkit.train import train
from vitkit.train.config import load_run_config

CPU = torch.device("cpu")
OVERFIT = [
    "model.depth=2",
    "data.synthetic_size=16",
    "train.steps=12",
    "train.lr=1e-2",
    "train.weight_decay=0",
    "augment.crop=none",
    "augment.hflip=0",
    "train.log_every=1",
]


def _losses(run) -> list[float]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["kind"] == "train"]


def test_fp8_training_follows_the_bf16_loss_curve_and_saves_a_plain_model(tmp_path, capsys):
    train(load_run_config(None, TINY + OVERFIT + ["train.precision=fp8"]), tmp_path / "fp8")
    plan = capsys.readouterr().out
    # two blocks of four linear layers convert; the head stays bf16
    assert "precision  fp8 (train.precision=fp8): 8 of 9 linear layers in torchao's float8" in plan
    assert "the CPU has no fp8 matrix units" in plan
    train(load_run_config(None, TINY + OVERFIT + ["train.precision=bf16"]), tmp_path / "bf16")
    fp8, bf16 = _losses(tmp_path / "fp8"), _losses(tmp_path / "bf16")
    assert fp8[-1] < 0.5 * fp8[0]  # it learns
    assert fp8 != bf16 and fp8 == pytest.approx(bf16, rel=0.1)  # in fp8, not bf16, and close to bf16's curve
    # the checkpoint holds the same tensors as a bf16 run's, and loads as a plain model
    weights = read_safetensors(tmp_path / "fp8" / "final" / "model.safetensors")
    assert weights.keys() == read_safetensors(tmp_path / "bf16" / "final" / "model.safetensors").keys()
    model = vitkit.load_pretrained(tmp_path / "fp8")
    assert float8.converted(model) == 0 and torch.isfinite(model(torch.randn(2, 3, 8, 8))).all()


def test_only_the_blocks_linear_layers_with_sizes_in_sixteens_convert():
    model = create_model("vit_test", depth=2)
    weight = model.blocks[0].mlp.fc1.weight
    assert float8.convert(model, CPU) == 8 == float8.converted(model)
    kinds = {name: type(m).__name__ for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert all((kind == "Float8Linear") == name.startswith("blocks.") for name, kind in kinds.items()), kinds
    assert model.blocks[0].mlp.fc1.weight is weight  # its parameters kept: optimizer, EMA and checkpoints see them
    odd = create_model("vit_test", depth=1, mlp_dim=72)  # 72 is no multiple of 16: the MLP's two layers stay
    assert float8.convert(odd, CPU) == 2
    assert type(odd.blocks[0].mlp.fc1) is nn.Linear and type(odd.blocks[0].attn.qkv).__name__ == "Float8Linear"


def test_a_gpu_without_fp8_tensor_cores_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(ConfigError, match=r"A100.*capability 8\.0\) has no fp8 tensor cores.*train\.precision=bf16"):
        float8.check(torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    float8.check(torch.device("cuda"))  # Hopper: no error
    with pytest.raises(ConfigError, match="not on mps"):
        float8.check(torch.device("mps"))
