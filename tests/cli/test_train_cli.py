"""The real `vitkit` entry point: train, eval, predict, errors as one line with exit code 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitkit.cli import main
from vitkit.data.idx import default_dir, find_idx

FAST = ["model.name=vit_test", "model.depth=1", "train.batch_size=16", "train.threads=1", "train.warmup_steps=2",
        "train.log_every=2", "train.eval_every=4", "train.checkpoint_every=4", "augment.crop=pad"]


def vitkit(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "vitkit", *map(str, args)], capture_output=True, text=True, timeout=timeout, env=os.environ)


def make_folder(root, size=16):
    rng = np.random.default_rng(0)
    for c, name in enumerate(("circle", "square")):
        (root / name).mkdir(parents=True)
        for i in range(12):
            pixels = rng.integers(0, 60, (size, size, 3)) + 150 * c
            Image.fromarray(pixels.astype(np.uint8)).save(root / name / f"{i}.png")


def test_image_folder_end_to_end(tmp_path):
    make_folder(tmp_path / "data")
    out = tmp_path / "run"
    done = vitkit("train", "--data", tmp_path / "data", "--out", out, "train.steps=8", "data.val_fraction=0.25", "--no-progress",
                  *FAST, "train.lr=3e-3", "augment.hflip=0")
    assert done.returncode == 0, done.stderr
    evaluated = vitkit("eval", out, "--data", tmp_path / "data", "--split", "val", "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    result = json.loads(evaluated.stdout.strip().splitlines()[-1])
    assert result["n"] == 6 and 0.0 <= result["top1"] <= result["top5"] == 1.0
    assert set(result["per_class"]) == {"circle", "square"}
    assert Path(result["confusion_png"]).is_file()
    image = tmp_path / "data" / "square" / "0.png"
    predicted = vitkit("predict", out, image, "--json")
    assert predicted.returncode == 0, predicted.stderr
    top = json.loads(predicted.stdout.strip().splitlines()[-1])["top"]
    assert [t["label"] for t in top] in (["circle", "square"], ["square", "circle"])
    assert abs(sum(t["prob"] for t in top) - 1.0) < 1e-5
    text = vitkit("predict", out, image)
    assert "square" in text.stdout and "%" in text.stdout


def test_resume_through_cli(tmp_path):
    out = tmp_path / "run"
    done = vitkit("train", "--out", out, "data.name=synthetic", "train.steps=4", "--no-progress", *FAST)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["steps"] == 4 and (out / "final" / "model.safetensors").is_file()
    again = vitkit("train", "--resume", out, "train.steps=6")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1])["steps"] == 6
    assert (out / "checkpoints" / "step_0000006").is_dir()


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--out", "{tmp}/x", "train.lrr=1"], "train.lrr: unknown key"),
        (["train", "--out", "{tmp}/x", "train.steps=abc"], "train.steps: expected int"),
        (["train", "--out", "{tmp}/x", "--data", "{tmp}/missing"], "no such file"),
        (["train", "data.name=synthetic"], "--out"),
        (["eval", "{tmp}"], "neither a vitkit checkpoint"),
    ],
)
def test_user_errors_are_one_line(tmp_path, capsys, args, message):
    assert main([a.format(tmp=tmp_path) for a in args]) == 2  # in-process: the same entry point, without a new interpreter
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()  # nothing was started


def test_missing_default_data_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("VITKIT_DATA", str(tmp_path / "none"))
    done = vitkit("train", "--out", tmp_path / "run", "train.steps=1")
    assert done.returncode == 2 and "apt-get install dataset-fashion-mnist" in done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(find_idx(default_dir(), "train", "images") is None, reason="Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)")
def test_short_real_fashion_mnist_run(tmp_path):
    """A few steps of the demo recipe on real Fashion-MNIST; loss must fall and test eval must run."""
    out = tmp_path / "run"
    done = vitkit("train", "--config", Path(__file__).resolve().parents[2] / "configs" / "fashion_mnist.yaml", "--out", out, "--no-progress",
                  "train.steps=30", "train.warmup_steps=5", "train.log_every=5", "train.eval_every=30", "train.checkpoint_every=30",
                  "model.depth=2", "data.val_fraction=0.02")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if r["kind"] == "train"]
    assert losses[-1] < losses[0] - 0.3
    evaluated = vitkit("eval", out, "--split", "test", "--json")
    result = json.loads(evaluated.stdout.strip().splitlines()[-1])
    assert result["n"] == 10_000 and result["top1"] > 0.3
    assert "Ankle boot" in result["per_class"]
