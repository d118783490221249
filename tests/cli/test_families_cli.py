"""The backbones people start from through every command: a tiny DINOv2 folder (transformers' Dinov2Model) and a tiny
SigLIP image-text folder (SiglipModel: its vision tower), random weights, read by linear-probe, knn and fewshot
(each with its family's pooled feature), fine-tuned (a head added), then predict, eval, inspect and Classifier."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit

transformers = pytest.importorskip("transformers")

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=16, patch_size=4)
FAMILIES = ("dinov2", "siglip")
POOLS = {"dinov2": ("cls_mean", 64), "siglip": ("head", 32)}  # the feature and its width


def _random(model):
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model


def _folder(family: str, path):
    torch.manual_seed(0)
    if family == "dinov2":
        model = transformers.Dinov2Model(transformers.Dinov2Config(**TINY))
    else:  # an image-text model: vitkit reads its vision tower
        text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
        config = transformers.SiglipConfig(vision_config={**TINY, "intermediate_size": 64}, text_config=text)
        model = transformers.SiglipModel(config)
    _random(model).save_pretrained(path)
    return path


def _images(root, split, n):
    """root/split/{dark,bright}/i.png, 16 px RGB, told apart by brightness."""
    rng = np.random.default_rng(len(split))
    for c, name in enumerate(("dark", "bright")):
        (root / split / name).mkdir(parents=True)
        for i in range(n):
            pixels = rng.integers(0, 60, (16, 16, 3)) + 150 * c
            Image.fromarray(pixels.astype(np.uint8)).save(root / split / name / f"{i}.png")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    _images(root / "data", "train", 8)
    _images(root / "data", "test", 3)
    return root, {family: _folder(family, root / family) for family in FAMILIES}


def last_json(done):
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("family", FAMILIES)
def test_frozen_features_are_each_family_s_pooled_feature(family, made, vitkit_cmd, tmp_path):
    root, folders = made
    data, pool, width = root / "data", *POOLS[family]
    common = ("--data", data, "--threads", "1", "--batch-size", "16")
    knn = last_json(vitkit_cmd("knn", folders[family], *common, "--k", "1", "--out", tmp_path / "knn"))
    assert knn["pool"] == pool and knn["n_train"] == 14 and 0 <= knn["top1"]["1"] <= 1
    assert f"(--pool {pool})." in (tmp_path / "knn" / "knn.md").read_text()  # the report says which feature
    shots = last_json(vitkit_cmd("fewshot", folders[family], *common, "--shots", "2", "--out", tmp_path / "fs"))
    assert shots["pool"] == pool and shots["feature_dim"] == width
    probe = vitkit_cmd(
        "linear-probe", folders[family], *common, "--l2", "1", "--max-iter", "20", "--out", tmp_path / "lp"
    )
    assert last_json(probe)["feature_dim"] == width
    asked = last_json(
        vitkit_cmd("fewshot", folders[family], *common, "--shots", "2", "--pool", "mean", "--out", tmp_path / "m")
    )
    assert asked["pool"] == "mean" and asked["feature_dim"] == 32  # --pool over the family's own


@pytest.mark.parametrize("family", FAMILIES)
def test_finetune_adds_a_head_then_every_command_reads_the_run(family, made, vitkit_cmd, tmp_path):
    root, folders = made
    out = tmp_path / "ft"
    steps = ("--steps", "2", "--batch-size", "8", "--lr", "0.01", "--no-progress", "train.threads=1")
    done = last_json(vitkit_cmd("finetune", "--from", folders[family], "--data", root / "data", "--out", out, *steps))
    assert done["runs"]
    config = json.loads((out / "final" / "config.json").read_text())
    assert config["model"]["num_classes"] == 2 and config["class_names"] == ["bright", "dark"]
    image = root / "data" / "test" / "bright" / "0.png"
    predicted = vitkit_cmd("predict", out, image, "--json", "--threads", "1")
    assert predicted.returncode == 0, predicted.stderr
    top = json.loads(predicted.stdout.splitlines()[0])["top"]
    assert {t["label"] for t in top} == {"bright", "dark"} and sum(t["prob"] for t in top) == pytest.approx(1, abs=1e-5)
    assert last_json(vitkit_cmd("eval", out, "--split", "test", "--json", "--threads", "1"))["n"] == 6
    seen = vitkit_cmd("inspect", out, "--out", tmp_path / "look", "--num-images", "2", "--show", "2", "--threads", "1")
    assert seen.returncode == 0, seen.stderr
    assert (tmp_path / "look" / "inspection.json").is_file()
    classifier = vitkit.Classifier.load(out)
    assert classifier.predict(image, top=2)[0][0][0] in ("bright", "dark")
