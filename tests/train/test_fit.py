"""The recipe `vitkit train --data FOLDER` fits to the data (train/fit.py): the family by the size of the training
split, and padding that continues the images' own borders."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from vitkit.cli import main
from vitkit.data.scan import ImageScan
from vitkit.train.fit import FAMILY_ROWS, FITTED_HYBRID_BELOW, fitted_to_data


@pytest.mark.parametrize(("side", "convs"), [(16, [32, 64]), (24, [32, 64]), (32, [32, 64, 128]), (64, [32, 64, 128])])
def test_a_small_training_split_gets_the_conv_stem_hybrid_with_a_small_grid(side, convs):
    changes, note = fitted_to_data(ImageScan(64, 600, side, side, 3), 600)
    assert changes["model.backbone"] == {"convs": convs} and changes["model.patch_size"] == 1
    grid = side // 2 ** len(convs)
    assert 4 <= grid <= 8 and f"a conv stem ({len(convs)} stride-2 convolutions: a {grid}x{grid} grid" in note
    assert "model.backbone=null for a plain ViT" in note


def test_a_large_training_split_gets_the_plain_vit_on_a_4x4_grid():
    n = FITTED_HYBRID_BELOW
    changes, note = fitted_to_data(ImageScan(64, n, 28, 28, 1), n)
    assert changes["model.backbone"] is None and changes["model.patch_size"] == 8 and "patch 8 (a 4x4 grid;" in note


def test_the_plan_names_the_benchmark_rows_its_family_rests_on_and_they_hold_it_up():
    """The fitted hybrid is named with the kinds of data of benchmarks/results/families.csv where it was measured;
    there it beat the plain ViT at matched CPU time. The plain ViT, fitted only beyond the sizes measured, says so."""
    table = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "families.csv"
    with table.open(newline="", encoding="utf-8") as f:
        figure = {row["id"]: float(row["figure"]) for row in csv.DictReader(f)}
    _, note = fitted_to_data(ImageScan(64, 600, 32, 32, 3), 600)
    assert FAMILY_ROWS["hybrid"] and "benchmarks/results/families.csv" in note
    for prefix in FAMILY_ROWS["hybrid"]:
        assert prefix.removeprefix("families-") in note
        mine = {k.removeprefix(f"{prefix}-hybrid-"): v for k, v in figure.items() if k.startswith(f"{prefix}-hybrid-")}
        plain = {k.removeprefix(f"{prefix}-plain-"): v for k, v in figure.items() if k.startswith(f"{prefix}-plain-")}
        assert mine and mine.keys() == plain.keys(), prefix  # measured beside each other on each machine
        assert all(mine[m] >= plain[m] for m in mine), (prefix, mine, plain)
    n = FITTED_HYBRID_BELOW
    _, note = fitted_to_data(ImageScan(64, n, 32, 32, 3), n)
    assert not FAMILY_ROWS["plain"] and "beyond the sizes benchmarks/results/families.csv measures" in note


def _folder(root, draw):
    for split in ("train", "val"):
        for c, name in enumerate(("a", "b")):
            (root / split / name).mkdir(parents=True)
            for i in range(4):
                draw(c, i).save(root / split / name / f"{i}.png")


def _dark_digit(c, i):
    pixels = np.zeros((16, 16), np.uint8)
    pixels[4:12, 6 + c : 9 + c] = 200 + i
    return Image.fromarray(pixels)


def _transparent_icon(c, i):
    pixels = np.zeros((16, 16, 4), np.uint8)
    pixels[5:11, 5:11] = (200, 40 * c, 30 + i, 255)
    return Image.fromarray(pixels, "RGBA")


@pytest.mark.parametrize(
    ("draw", "background", "said"), [(_dark_digit, 0.0, "black"), (_transparent_icon, 1.0, "white")]
)
def test_the_fitted_padding_continues_the_images_borders(tmp_path, capsys, draw, background, said):
    """White-on-black digits padded with white (the background's default) would train on frames no image has; icons
    composited on white and padded with black did. The fit pads with the colour the images' borders have."""
    _folder(tmp_path / "data", draw)
    argv = ["train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "run"), "--no-progress"]
    assert main([*argv, "train.steps=1", "train.threads=1", "train.eval_every=1"]) == 0
    assert f"padded with {said} like the images' borders" in capsys.readouterr().out
    model = json.loads((tmp_path / "run" / "final" / "config.json").read_text())["model"]
    assert np.allclose(model["background"], background)


def _sides(c, i):
    """Class a bright on the left, b on the right: a mirror image is the other class."""
    g = np.random.default_rng([c, i])
    pixels = g.integers(0, 40, (16, 16)).astype(np.uint8)
    pixels[:, (0 if c == 0 else 8) : (8 if c == 0 else 16)] += 150
    return Image.fromarray(pixels)


def _stripes(c, i):
    """Class a striped across, b striped down, each at a seeded offset: a mirror image is the same class."""
    g = np.random.default_rng([c, i])
    pixels = g.integers(0, 40, (16, 16)).astype(np.uint8)
    k = int(g.integers(0, 4))
    if c == 0:
        pixels[k::4] += 150
    else:
        pixels[:, k::4] += 150
    return Image.fromarray(pixels)


@pytest.mark.parametrize(("draw", "flip", "said"), [(_sides, 0.0, "no flips"), (_stripes, 0.5, "flips")])
def test_the_fitted_flip_follows_whether_a_mirror_image_keeps_its_class(tmp_path, capsys, draw, flip, said):
    """Flips help photos and icons and are wrong for digits and scenes told apart by left and right: the fit flips
    where a pixel model of the training images knows their mirror images (evaluate.baseline.mirror_skill)."""
    for split, n in (("train", 20), ("val", 2)):
        for c, name in enumerate(("a", "b")):
            (tmp_path / "data" / split / name).mkdir(parents=True)
            for i in range(n):
                draw(c, i + 100 * (split == "val")).save(tmp_path / "data" / split / name / f"{i}.png")
    argv = ["train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "run"), "--no-progress"]
    assert main([*argv, "train.steps=1", "train.threads=1", "train.eval_every=1", "train.baseline=false"]) == 0
    out = capsys.readouterr().out
    assert f", {said} (a pixel model of the images knows their mirror images at " in out
    assert yaml.safe_load((tmp_path / "run" / "run.yaml").read_text())["augment"]["hflip"] == flip
