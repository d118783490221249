"""Masked patch prediction (paper §4.6): corruption draws, colour targets, training, checkpoints."""

import json
import math
from pathlib import Path

import pytest
import torch
from tiny_run import TINY_RUN

import vitkit
from vitkit.checkpoint.io import read_safetensors
from vitkit.data.sources.idx import default_dir, find_idx
from vitkit.errors import ConfigError
from vitkit.models import create_model
from vitkit.train import train
from vitkit.train.config import load_run_config
from vitkit.train.objectives import (
    MaskedPatchPrediction,
    colour_classes,
    draw_corruption,
    evaluate_masked_patch,
    mean_colour_targets,
)

TINY = [*TINY_RUN, "train.objective=masked_patch"]


def train_losses(out):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["kind"] == "train"]


# -- corruption ---------------------------------------------------------------------------------
def test_corruption_proportions_over_many_draws():
    B, N = 4000, 49
    c = draw_corruption(B, N, torch.Generator().manual_seed(1))
    assert (c.chosen.sum(1) == round(0.5 * N)).all()  # half the patches of every image
    assert not (c.masked & ~c.chosen).any() and not (c.swapped & ~c.chosen).any() and not (c.masked & c.swapped).any()
    chosen = int(c.chosen.sum())
    kept = c.chosen & ~c.masked & ~c.swapped
    for part, share in ((c.masked, 0.8), (c.swapped, 0.1), (kept, 0.1)):
        assert abs(int(part.sum()) / chosen - share) < 0.01  # ~98k chosen: 1 point is > 10 standard errors
    # every patch position is chosen equally often (uniform choice)
    per_position = c.chosen.float().mean(0)
    assert (per_position - 0.5).abs().max() < 0.05
    # a swapped patch takes another patch's embedding, from anywhere in the batch
    own = torch.arange(B * N).view(B, N)
    assert not (c.source == own).any()
    assert (c.source // N != own // N)[c.swapped].float().mean() > 0.9


def test_corruption_is_a_function_of_the_generator():
    a = draw_corruption(8, 16, torch.Generator().manual_seed(3))
    b = draw_corruption(8, 16, torch.Generator().manual_seed(3))
    c = draw_corruption(8, 16, torch.Generator().manual_seed(4))
    assert torch.equal(a.chosen, b.chosen) and torch.equal(a.source, b.source)
    assert not torch.equal(a.chosen, c.chosen)


def test_corrupt_replaces_embeddings_as_drawn():
    objective = MaskedPatchPrediction(create_model("vit_test"))
    B, N, D = 6, 16, 32
    x = torch.randn(B, N, D)
    c = draw_corruption(B, N, torch.Generator().manual_seed(0))
    y = objective.corrupt(x, c)
    assert c.masked.any() and c.swapped.any()
    assert torch.equal(y[c.masked], objective.mask_token[0].expand(int(c.masked.sum()), D))
    assert torch.equal(y[c.swapped], x.reshape(B * N, D)[c.source[c.swapped]])
    untouched = ~c.masked & ~c.swapped
    assert torch.equal(y[untouched], x[untouched])


def test_forward_predicts_only_the_corrupted_patches_through_the_model_hook():
    vit = create_model("vit_test")
    objective = MaskedPatchPrediction(vit)
    x = torch.rand(3, 3, 16, 16) * 2 - 1
    seen = []
    vit.blocks[0].register_forward_hook(lambda m, inp, out: seen.append(inp[0]))
    logits, targets = objective(x, torch.Generator().manual_seed(0))
    c = draw_corruption(3, 16, torch.Generator().manual_seed(0))
    assert logits.shape == targets.shape == (int(c.chosen.sum()), 512)
    expected = vit.embed(x, corrupt=lambda e: objective.corrupt(e, c))  # the ViT's own hook, before cls and E_pos
    torch.testing.assert_close(seen[0], expected)
    assert not torch.allclose(seen[0], vit.embed(x))
    torch.testing.assert_close(targets.argmax(-1), objective.targets(x)[c.chosen], rtol=0, atol=0)


# -- targets ------------------------------------------------------------------------------------
def test_mean_colour_targets_on_hand_made_rgb_patches():
    p = 4
    img = torch.zeros(1, 3, 2 * p, 2 * p)
    img[..., :p, p:] = 1.0  # patch 1: white
    img[:, 0, p:, :p], img[:, 1, p:, :p], img[:, 2, p:, :p] = 0.5, 0.2, 0.99  # patch 2
    img[:, 0, p : p + 2, p:] = 1.0  # patch 3: red channel half white -> mean 0.5, green and blue black
    targets = mean_colour_targets(img, (p, p))
    # 3 bits per channel, r * 64 + g * 8 + b: black 0, white 7*64+7*8+7, (4, 1, 7), (4, 0, 0)
    assert targets.tolist() == [[0, 511, 4 * 64 + 1 * 8 + 7, 4 * 64]]


def test_mean_colour_targets_grayscale_levels():
    means = torch.tensor([0.0, 0.124, 0.125, 0.3, 0.5, 0.874, 0.876, 1.0])
    img = means.view(1, 1, 1, 8).repeat_interleave(2, -1).repeat_interleave(2, -2)  # 8 patches of 2x2
    assert mean_colour_targets(img, (2, 2)).tolist() == [[0, 0, 1, 2, 4, 6, 7, 7]]
    assert colour_classes(1) == 8 and colour_classes(3) == 512


def test_targets_undo_the_input_normalisation():
    vit = create_model("vit_mini4_28", width=32, depth=1, mlp_dim=32, num_heads=2)
    objective = MaskedPatchPrediction(vit)
    assert objective.head.out_features == 8
    pixels = torch.rand(2, 1, 28, 28)
    x = (pixels - 0.5) / 0.5  # the model's [-1, 1] inputs
    assert torch.equal(objective.targets(x), mean_colour_targets(pixels, (4, 4)))


# -- training -----------------------------------------------------------------------------------
def test_loss_decreases_on_a_tiny_synthetic_set(tmp_path):
    config = load_run_config(
        None,
        TINY
        + [
            "train.steps=40",
            "train.lr=1e-2",
            "train.weight_decay=0",
            "augment.crop=none",
            "train.eval_every=40",
            "train.checkpoint_every=40",
            "model.depth=2",
        ],
    )
    summary = train(config, tmp_path / "run")
    losses = train_losses(tmp_path / "run")
    assert losses[0] == pytest.approx(math.log(512), abs=0.05)  # zero-initialised colour head: uniform prediction
    assert losses[-1] < losses[0] - 1.0
    assert summary["objective"] == "masked_patch" and summary["final_val_top1"] > 0.1  # chance is ~1/512


def test_saved_model_is_a_plain_vit_that_finetunes_and_gives_features(tmp_path):
    pre = tmp_path / "pre"
    train(load_run_config(None, TINY + ["train.steps=4"]), pre)
    state = read_safetensors(pre / "final" / "model.safetensors")
    assert not any("mask" in k for k in state) and set(state) == set(
        create_model("vit_test", image_size=8, depth=1).state_dict()
    )
    model = vitkit.load_pretrained(pre / "final", num_classes=10)  # as fewshot and finetune load it
    torch.testing.assert_close(model.state_dict()["patch_embed.weight"], state["patch_embed.weight"])
    with torch.inference_mode():
        feats = model.forward_head(model.forward_features(torch.zeros(2, 3, 8, 8)), pre_logits=True)
    assert feats.shape == (2, 32) and torch.isfinite(feats).all()
    # fine-tuning (model.init) from it: classification, starting from the pre-trained weights
    tuned = tmp_path / "tuned"
    summary = train(
        load_run_config(
            None, TINY + ["train.steps=2", "train.objective=classification", f"model.init={pre}", "train.lr=0"]
        ),
        tuned,
    )
    assert summary["objective"] == "classification"
    after = read_safetensors(tuned / "final" / "model.safetensors")
    torch.testing.assert_close(after["blocks.0.mlp.fc1.weight"], state["blocks.0.mlp.fc1.weight"])  # lr 0: weights kept


def test_interrupted_and_resumed_equals_straight(tmp_path):
    """The [mask] embedding and colour head are in the step checkpoints: a resumed run ends where a straight one does."""
    config = load_run_config(None, TINY + ["train.steps=6", "train.checkpoint_every=3", "model.dropout=0.1"])
    train(config, tmp_path / "straight")
    train(config, tmp_path / "resumed", stop_at=3)
    train(config, tmp_path / "resumed", resume=True)
    a = read_safetensors(tmp_path / "straight" / "final" / "model.safetensors")
    b = read_safetensors(tmp_path / "resumed" / "final" / "model.safetensors")
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=1e-6, rtol=0, msg=key)
    for x, y in zip(train_losses(tmp_path / "resumed"), train_losses(tmp_path / "straight"), strict=True):
        assert math.isclose(x, y, rel_tol=1e-5)


def test_objective_cannot_change_on_resume(tmp_path):
    train(load_run_config(None, TINY + ["train.steps=4"]), tmp_path / "run", stop_at=2)
    with pytest.raises(ConfigError, match="train.objective=masked_patch"):
        train(
            load_run_config(None, TINY + ["train.steps=4", "train.objective=classification"]),
            tmp_path / "run",
            resume=True,
        )


def test_validation_is_repeatable_and_counts_corrupted_patches():
    objective = MaskedPatchPrediction(create_model("vit_test"))
    images = torch.randint(0, 256, (10, 3, 16, 16), dtype=torch.uint8)
    batches = [(images[:6], None), (images[6:], None)]
    a = evaluate_masked_patch(objective, batches, seed=5)
    b = evaluate_masked_patch(objective, batches, seed=5)
    assert a == b and a["n"] == 10 * 8  # 8 of the 16 patches of every image
    assert a["loss"] == pytest.approx(math.log(512), abs=1e-5) and 0.0 <= a["top1"] <= a["top5"] <= 1.0


def test_unknown_objective_is_a_config_error():
    with pytest.raises(
        ConfigError, match="train.objective: expected one of auto, classification, multi_label, masked_patch"
    ):
        load_run_config(None, ["train.objective=mae"])


def test_cli_pretrains_on_a_folder_without_labels(tmp_path, vitkit_cmd):
    """`vitkit train --data FOLDER train.objective=masked_patch` with images directly in FOLDER (no class folders)."""
    import numpy as np
    from PIL import Image

    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(24):
        Image.fromarray(rng.integers(0, 256, (16, 16, 3)).astype(np.uint8)).save(folder / f"{i}.png")
    out = tmp_path / "run"
    done = vitkit_cmd(
        "train",
        "--data",
        folder,
        "--out",
        out,
        "--no-progress",
        "train.objective=masked_patch",
        "model.name=vit_test",
        "model.depth=1",
        "train.steps=3",
        "train.batch_size=8",
        "train.eval_every=3",
        "train.threads=1",
        "data.val_split=val",
        "data.val_fraction=0.25",
        "augment.crop=pad",
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["objective"] == "masked_patch" and summary["steps"] == 3
    assert json.loads((out / "final" / "config.json").read_text())["class_names"] == ["unlabeled"]
    assert vitkit.load_pretrained(out / "final").config.depth == 1
    for command in (
        ["eval", out, "--split", "val"],
        ["predict", out, folder / "0.png"],
    ):  # its head never trained: no figure
        told = vitkit_cmd(*command)
        assert (
            told.returncode == 2
            and "classification head never trained" in told.stderr
            and "vitkit finetune" in told.stderr
        )
        assert len(told.stderr.strip().splitlines()) == 1 and told.stdout == ""
    # fine-tuning it on its own unlabelled images: said to need --data (it said "one class ('unlabeled') ... use
    # train.objective=masked_patch" after announcing a learning rate)
    told = vitkit_cmd("finetune", "--from", out, "--out", tmp_path / "ft", "--steps", "2")
    assert (
        told.returncode == 2
        and "images without the labels fine-tuning needs; give labelled data with --data" in told.stderr
    )
    refused = vitkit_cmd(
        "train", "--data", folder, "--out", tmp_path / "cls", "model.name=vit_test", "train.steps=1"
    )  # classification
    assert (
        refused.returncode == 2 and "train.objective=masked_patch" in refused.stderr and not (tmp_path / "cls").exists()
    )


def test_pretrained_checkpoint_goes_through_fewshot_and_finetune(tmp_path, capsys):
    """vitkit train (masked_patch) -> vitkit fewshot and vitkit finetune on the run directory, like any checkpoint."""
    import numpy as np
    from PIL import Image

    from vitkit.cli import main

    rng = np.random.default_rng(0)
    for split, n in (("train", 16), ("test", 6)):
        for c, name in enumerate(("dark", "mid", "bright")):
            (tmp_path / "data" / split / name).mkdir(parents=True)
            for i in range(n):
                Image.fromarray((rng.integers(0, 50, (28, 28)) + 90 * c).astype(np.uint8), mode="L").save(
                    tmp_path / "data" / split / name / f"{i}.png"
                )
    data, pre = tmp_path / "data", tmp_path / "pre"

    def vitkit_json(*args):
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        assert code == 0, err
        return json.loads(out.strip().splitlines()[-1])

    vitkit_json(
        "train",
        "--data",
        data,
        "--out",
        pre,
        "--no-progress",
        "train.objective=masked_patch",
        "model.name=vit_test",
        "model.in_chans=1",
        "model.image_size=28",
        "model.depth=1",
        "train.steps=4",
        "train.batch_size=16",
        "train.threads=1",
        "augment.crop=pad",
        "data.val_split=val",
        "data.val_fraction=0.25",
        "train.seed=7",
    )
    shots = vitkit_json(
        "fewshot", pre, "--data", data, "--shots", "1,5", "--seeds", "2", "--out", tmp_path / "fs", "--threads", "1"
    )
    assert shots["feature_dim"] == 32 and shots["n_test"] == 18
    assert all(0.0 <= r["mean"] <= 1.0 and len(r["per_seed"]) == 2 for r in shots["shots"].values())
    vitkit_json(
        "finetune",
        "--from",
        pre,
        "--data",
        data,
        "--out",
        tmp_path / "ft",
        "--steps",
        "2",
        "--batch-size",
        "16",
        "--lr",
        "0.001",
        "--no-progress",
        "train.warmup_steps=1",
        "train.threads=1",
        "augment.crop=pad",
        "data.val_fraction=0.25",
    )
    start = read_safetensors(pre / "final" / "model.safetensors")
    tuned = read_safetensors(tmp_path / "ft" / "final" / "model.safetensors")
    assert json.loads((tmp_path / "ft" / "final" / "config.json").read_text())["class_names"] == [
        "bright",
        "dark",
        "mid",
    ]
    # fine-tuning started from the pre-trained weights (two small SGD steps move them little), not from a fresh init
    torch.manual_seed(0)
    fresh = create_model("vit_test", in_chans=1, image_size=28, depth=1).state_dict()
    for key in ("blocks.0.attn.qkv.weight", "pos_embed"):
        assert (tuned[key] - start[key]).abs().max() < 0.01 < (fresh[key] - start[key]).abs().max()
    assert tuned["head.weight"].shape == (3, 32)


@pytest.mark.skipif(
    find_idx(default_dir(), "train", "images") is None,
    reason="Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)",
)
def test_short_real_fashion_mnist_pretraining(tmp_path, vitkit_cmd):
    """A few steps of configs/pretrain_masked_patch.yaml through the CLI: the colour loss falls from ln 8."""
    out = tmp_path / "run"
    done = vitkit_cmd(
        "train",
        "--config",
        Path(__file__).resolve().parents[2] / "configs" / "pretrain_masked_patch.yaml",
        "--out",
        out,
        "--no-progress",
        "train.steps=30",
        "train.warmup_steps=5",
        "train.log_every=5",
        "train.eval_every=30",
        "train.checkpoint_every=30",
        "model.depth=2",
        "data.val_fraction=0.02",
    )
    assert done.returncode == 0, done.stderr
    losses = train_losses(out)
    assert losses[0] < math.log(8) + 0.05 and losses[-1] < losses[0] - 0.3
    summary = json.loads((out / "summary.json").read_text())
    assert (
        summary["objective"] == "masked_patch" and summary["final_val_top1"] > 0.48
    )  # the commonest level alone: 0.46
