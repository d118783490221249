"""The paper's experiments (benchmarks/paper/): data size, compute, position embeddings, each end to end in CI size."""

import json
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

PAPER = Path(__file__).resolve().parents[1] / "benchmarks" / "paper"


@pytest.fixture(scope="module")
def idx_data(tmp_path_factory):
    """A 10-class IDX dataset of 28x28 images whose brightness gives the class (200 train, 60 test)."""
    sys.path.insert(0, str(PAPER))
    from common import write_idx

    root = tmp_path_factory.mktemp("idx")
    g = np.random.default_rng(0)
    for split, n in (("train", 200), ("t10k", 60)):
        labels = g.integers(0, 10, n).astype(np.uint8)
        write_idx(root / f"{split}-images-idx3-ubyte", g.integers(0, 60, (n, 28, 28)) + labels[:, None, None] * 19)
        write_idx(root / f"{split}-labels-idx1-ubyte", labels)
    yield root
    sys.path.remove(str(PAPER))


def run(script, *args, monkeypatch):
    threads = torch.get_num_threads()
    monkeypatch.setattr(sys, "argv", [str(PAPER / script), "--ci", "--threads", "1", *map(str, args)])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(PAPER / script), run_name="__main__")
    torch.set_num_threads(threads)
    assert done.value.code == 0


def outputs(out: Path, name: str) -> dict:
    assert (out / f"{name}.png").stat().st_size > 1000
    text = (out / f"{name}.md").read_text()
    assert "Paper" in text and "test images: 40" in text  # the claim beside the table, and how many images scored it
    return json.loads((out / f"{name}.json").read_text())


def test_data_size(idx_data, tmp_path, monkeypatch):
    run("data_size.py", "--data", idx_data, "--out", tmp_path, "--sizes", "50,100", monkeypatch=monkeypatch)
    result = outputs(tmp_path, "data_size")
    rows = result["rows"]
    assert [(r["family"], r["subset"]) for r in rows] == [(f, n) for n in (50, 100) for f in ("ViT", "BiT", "hybrid")]
    assert all(0 <= r["test_top1"] <= 1 and 0 <= r["fewshot10"] <= 1 and r["test_images"] == 40 for r in rows)
    assert [r["train_images"] for r in rows[::3]] == [48, 95]  # 5% of each subset held out for validation
    small = set(np.fromfile(tmp_path / "data" / "train50" / "train-images-idx3-ubyte", np.uint8)[16:].reshape(-1, 784).sum(1))
    large = set(np.fromfile(tmp_path / "data" / "train100" / "train-images-idx3-ubyte", np.uint8)[16:].reshape(-1, 784).sum(1))
    assert small <= large  # nested subsets


def test_compute(idx_data, tmp_path, monkeypatch):
    run("compute.py", "--data", idx_data, "--out", tmp_path, "--sizes-per-family", "3", "--families", "ViT,BiT",
        monkeypatch=monkeypatch)
    rows = outputs(tmp_path, "compute")["rows"]
    assert [r["family"] for r in rows] == ["ViT"] * 3 + ["BiT"] * 3
    for family in ("ViT", "BiT"):
        flops = [r["train_flops"] for r in rows if r["family"] == family]
        assert flops == sorted(flops) and flops[0] > 0  # sizes listed small to large, FLOPs counted


def test_pos_embed(idx_data, tmp_path, monkeypatch):
    run("pos_embed.py", "--data", idx_data, "--out", tmp_path, monkeypatch=monkeypatch)
    result = outputs(tmp_path, "pos_embed")
    assert set(result["stats"]) == {"none", "learned", "learned_2d", "relative", "sincos2d"}
    assert "minus_none" in result["stats"]["relative"] and "minus_none" not in result["stats"]["none"]
