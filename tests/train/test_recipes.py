"""The published recipes under configs/: their values against the papers' (written out here), and each one run for
two steps at a reduced scale on the CPU (a tiny model, synthetic data), as the same file runs at full scale."""

import json
import math
from pathlib import Path

import pytest

from vitkit.data.augment import parse_policy
from vitkit.train import train
from vitkit.train.config import load_run_config
from vitkit.train.finetune import PAPER_LRS, finetune_recipe

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
IMAGENET_TRAIN = 1_281_167  # ILSVRC-2012 training images

# the same file at a reduced scale: a tiny model on synthetic data, two steps of eight images
REDUCED = [
    "model.name=vit_test",
    "model.image_size=16",
    "model.patch_size=4",
    "data.name=synthetic",
    "data.path=null",
    "data.synthetic_size=32",
    "data.workers=0",
    "data.memory_mb=64",
    "train.steps=2",
    "train.batch_size=8",
    "train.micro_batch=null",
    "train.warmup_steps=1",
    "train.log_every=1",
    "train.eval_every=2",
    "train.checkpoint_every=2",
    "train.eval_batch_size=16",
    "train.progress=false",
    "train.threads=1",
]


def _model(config) -> dict:
    c = config.model_config()
    return {"width": c.width, "depth": c.depth, "heads": c.num_heads, "patch": c.patch_size[0], "size": c.image_size[0]}


def test_the_papers_fine_tuning():
    """Dosovitskiy et al. 2021, App. B: SGD momentum 0.9, batch 512, no weight decay, clipping at 1, cosine decay
    after a 500-step warmup, 384 px, ImageNet 20k steps, lr from {0.001, 0.003, 0.01, 0.03}."""
    c = finetune_recipe(CONFIGS / "finetune_imagenet.yaml")
    t = c.train
    assert (t.optimizer, t.momentum, t.batch_size, t.weight_decay, t.clip_norm) == ("sgd", 0.9, 512, 0.0, 1.0)
    assert (t.decay, t.warmup_steps, t.steps, c.model["image_size"]) == ("cosine", 500, 20_000, 384)
    assert t.lr in PAPER_LRS == (0.001, 0.003, 0.01, 0.03)


def test_deit_s16():
    """Touvron et al. 2021, Table 9: AdamW, lr 5e-4 x batch/512, weight decay 0.05, batch 1024, 300 epochs, 5 warmup
    epochs, cosine, label smoothing 0.1, RandAugment 9/0.5, Mixup 0.8, CutMix 1.0, erasing 0.25, repeated
    augmentation, stochastic depth 0.1, no gradient clipping, no dropout; DeiT-S: width 384, depth 12, 6 heads."""
    c = load_run_config(CONFIGS / "deit_s16_imagenet.yaml")
    t, a = c.train, c.augment
    assert _model(c) == {"width": 384, "depth": 12, "heads": 6, "patch": 16, "size": 224}
    assert (t.optimizer, t.weight_decay, t.batch_size, t.epochs, t.decay) == ("adamw", 0.05, 1024, 300, "cosine")
    assert t.lr == pytest.approx(5e-4 * t.batch_size / 512) and t.clip_norm is None
    assert t.warmup_steps == math.ceil(5 * IMAGENET_TRAIN / t.batch_size)
    assert (a.label_smoothing, a.mixup, a.cutmix, a.erase, c.data.repeats) == (0.1, 0.8, 1.0, 0.25, 3)
    ra = parse_policy(a.auto_augment)
    assert (ra.magnitude, ra.mstd, ra.num_ops, "PosterizeIncreasing" in ra.ops) == (9, 0.5, 2, True)
    assert c.model["drop_path"] == 0.1 and c.model_config().dropout == 0.0


def test_augreg_b16_pretraining_and_transfer():
    """Steiner et al. 2022 (How to train your ViT?), the released B/16 ImageNet-21k model: 300 epochs, batch 4096,
    Adam lr 1e-3, weight decay 0.1, 10k warmup steps, cosine, clipping at 1, medium1 = RandAugment(2, 15) + Mixup
    0.2, no dropout or stochastic depth; transfer to ImageNet-1k: SGD momentum 0.9, batch 512, lr 0.01, 20k steps,
    384 px, no weight decay."""
    c = load_run_config(CONFIGS / "augreg_b16_i21k.yaml")
    t = c.train
    assert _model(c) == {"width": 768, "depth": 12, "heads": 12, "patch": 16, "size": 224}
    assert (t.epochs, t.batch_size, t.optimizer, t.lr, t.weight_decay) == (300, 4096, "adamw", 1e-3, 0.1)
    assert (t.warmup_steps, t.decay, t.clip_norm, c.augment.mixup) == (10_000, "cosine", 1.0, 0.2)
    ra = parse_policy(c.augment.auto_augment)
    assert (ra.num_ops, ra.magnitude, ra.mmax >= 15) == (2, 15, True)
    assert c.model_config().dropout == c.model_config().drop_path == 0.0
    ft = finetune_recipe(CONFIGS / "augreg_b16_finetune_imagenet.yaml")
    f = ft.train
    assert (f.optimizer, f.momentum, f.batch_size, f.lr, f.steps) == ("sgd", 0.9, 512, 0.01, 20_000)
    assert (f.weight_decay, f.clip_norm, f.decay, ft.model["image_size"]) == (0.0, 1.0, "cosine", 384)


def test_better_plain_vit_baselines():
    """Beyer et al. 2022: ViT-S/16, batch 1024, 90 epochs, Adam lr 1e-3 with decoupled weight decay 1e-4 (big_vision's,
    not multiplied by the lr: AdamW's 0.1 at lr 1e-3), 10k warmup steps, cosine, clipping at 1, RandAugment(2, 10),
    Mixup 0.2, GAP, sin-cos 2D position embeddings, 224 px, Inception crop from 5% of the area, 1% minival."""
    c = load_run_config(CONFIGS / "plain_vit_s16_imagenet.yaml")
    t, a, m = c.train, c.augment, c.model_config()
    assert _model(c) == {"width": 384, "depth": 12, "heads": 6, "patch": 16, "size": 224}
    assert (m.classifier, m.pos_embed, t.batch_size, t.epochs) == ("gap", "sincos2d", 1024, 90)
    assert (t.optimizer, t.lr, t.warmup_steps, t.decay, t.clip_norm) == ("adamw", 1e-3, 10_000, "cosine", 1.0)
    # big_vision decays by wd x schedule a step, AdamW by lr x schedule x weight_decay: the same for lr x weight_decay = 1e-4
    assert t.weight_decay * t.lr == pytest.approx(1e-4)
    ra = parse_policy(a.auto_augment)
    assert (ra.num_ops, ra.magnitude, "Posterize" in ra.ops) == (2, 10, True)
    assert (a.mixup, a.cutmix, a.label_smoothing, a.rrc_scale, c.data.val_fraction) == (
        0.2,
        0.0,
        0.0,
        (0.05, 1.0),
        0.01,
    )


@pytest.mark.parametrize(
    "name, extra",
    [
        ("deit_s16_imagenet.yaml", []),
        ("plain_vit_s16_imagenet.yaml", ["model.representation_size=16"]),
        ("augreg_b16_i21k.yaml", []),
        ("augreg_b16_finetune_imagenet.yaml", ["train.layer_decay=0.75"]),
        ("finetune_imagenet.yaml", ["train.optimizer=sgd", "augment.auto_augment=ta_wide"]),
    ],
)
def test_each_recipe_runs_two_steps_reduced(name, extra, tmp_path, capsys, monkeypatch):
    """The recipe file with overrides for data and size trains two finite steps, through every knob it turns on."""
    monkeypatch.setattr("vitkit.train.loop._plot", lambda *args: None)  # the figures: tests/plots/test_plots.py
    config = load_run_config(CONFIGS / name, REDUCED + extra)
    summary = train(config, tmp_path / "run")
    plan = capsys.readouterr().out
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert summary["steps"] == 2 and all(math.isfinite(r["loss"]) for r in rows if r["kind"] == "train"), rows
    assert "optimizer  " in plan and ("layer decay 0.75: head x1" in plan) == ("train.layer_decay=0.75" in extra)
