"""A conv-stem hybrid through the real `vitkit` command: train with a backbone override, eval, and the formats that
cannot hold it refusing in one line."""

import json

import numpy as np
from PIL import Image


def test_a_conv_stem_trains_evaluates_and_converts_only_to_vitkit(run_cli, vitkit_cmd, tmp_path):
    rng = np.random.default_rng(0)
    for split, n in (("train", 8), ("test", 4)):
        for c, name in enumerate(("dark", "bright")):
            (tmp_path / "data" / split / name).mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 60, (16, 16, 3)) + 150 * c
                Image.fromarray(pixels.astype(np.uint8)).save(tmp_path / "data" / split / name / f"{i}.png")
    run = tmp_path / "run"
    done = vitkit_cmd(
        "train", "--data", tmp_path / "data" / "train", "--out", run, "--no-progress",
        "model.name=vit_test", "model.depth=1", "model.image_size=16", "model.patch_size=1",
        "model.backbone={convs: [8, 16]}", "train.steps=3", "train.batch_size=8", "train.warmup_steps=1",
        "train.eval_every=3", "train.threads=1", "data.val_fraction=0.25",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "hybrid ViT at 16x16" in done.stdout and "conv stem 8-16 (stride 4), patch 1 (16 tokens)" in done.stdout
    saved = json.loads((run / "final" / "config.json").read_text())["model"]
    assert saved["backbone"] == {"convs": [8, 16]} and saved["patch_size"] == [1, 1]
    done = vitkit_cmd("eval", run, "--data", tmp_path / "data" / "test", "--json", "--threads", "1")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["n"] == 8 and 0.0 <= result["top1"] <= 1.0
    for to, dst, says in [
        ("npz", "m.npz", "the .npz format cannot hold a conv-stem hybrid"),
        ("timm", "m.safetensors", "a timm ViT checkpoint cannot hold a conv-stem hybrid"),
        ("hf", "hf", "Hugging Face ViT cannot hold a conv-stem hybrid"),
    ]:
        convert = run_cli if to == "npz" else vitkit_cmd  # the console script's process once, then its main() here
        done = convert("convert", run, tmp_path / dst, "--to", to)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert (
            says in done.stderr
            and "save as vitkit, or export to ONNX or OpenVINO" in done.stderr
            and "model.backbone=null" in done.stderr
        )
        assert not (tmp_path / dst).exists()
