"""The recipe `vitkit train --data FOLDER` fits to the data (train/fit.py): the family by the size of the training
split, and padding that continues the images' own borders."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from vitkit.cli import main
from vitkit.data.scan import ImageScan
from vitkit.train.fit import CONV_NET_BELOW, FAMILY_ROWS, FITTED_HYBRID_BELOW, fitted_to_data


@pytest.mark.parametrize(("side", "convs"), [(24, [32, 64]), (32, [32, 64, 128]), (64, [32, 64, 128])])
def test_a_small_training_split_gets_the_conv_stem_hybrid_with_a_small_grid(side, convs):
    n = CONV_NET_BELOW
    changes, note = fitted_to_data(ImageScan(64, n, side, side, 3), n)
    assert changes["model.backbone"] == {"convs": convs} and changes["model.patch_size"] == 1
    assert (changes["model.depth"], changes["model.classifier"]) == (6, "token")
    grid = side // 2 ** len(convs)
    assert 4 <= grid <= 8 and f"a conv stem ({len(convs)} stride-2 convolutions: a {grid}x{grid} grid" in note
    assert "model.backbone=null for a plain ViT" in note and "width 96, depth 6" in note


@pytest.mark.parametrize("n", [600, CONV_NET_BELOW * 10])
@pytest.mark.parametrize("side", [8, 12, 16])
def test_tiny_images_get_a_conv_net_with_no_block_that_builds_to_a_4x4_map(side, n):
    """Images fitted at 16 px, however many, get the conv net: 6 convolutions (2 of stride 2), their 4x4 map
    average-pooled into the head, depth 0."""
    from vitkit.models.registry import build_model
    from vitkit.train.config import load_run_config
    from vitkit.train.fit import layers

    changes, note = fitted_to_data(ImageScan(64, n, side, side, 1), n)
    stem = changes["model.backbone"]
    assert len(stem["convs"]) == 6 and stem["strides"].count(2) == 2 and set(stem["strides"]) == {1, 2}
    assert (changes["model.depth"], changes["model.classifier"], changes["model.image_size"]) == (0, "gap", 16)
    assert (
        "a conv net: a deep conv stem (6 convolutions, 2 of stride 2: a 4x4 map) average-pooled into the head" in note
    )
    assert "no transformer block" in note and "width 96, depth 0" in note
    model = build_model(load_run_config(None, [], base=layers(changes)).model_config().replace(num_classes=3))
    assert model(torch.rand(2, 1, 16, 16)).shape == (2, 3)
    assert model.config.grid_size == (4, 4) and len(model.blocks) == 0


@pytest.mark.parametrize("side", [32, 48, 64])
def test_a_set_under_a_thousand_images_gets_the_conv_net_read_at_32_px_at_most_on_an_8x8_map(side):
    """Under CONV_NET_BELOW training images the conv net is fitted at every size, and reads larger images at 32 px,
    where its first convolution does not stride (at 48 px it strided, and icons lost detail). The hybrid,
    from CONV_NET_BELOW images, keeps the images' size."""
    from vitkit.models.registry import build_model
    from vitkit.train.config import load_run_config
    from vitkit.train.fit import layers

    changes, note = fitted_to_data(ImageScan(64, 700, side, side, 3), 700)
    assert changes["model.image_size"] == 32 and changes["model.backbone"]["strides"][0] == 1
    assert changes["model.backbone"]["strides"].count(2) == 2 and changes["model.depth"] == 0
    assert changes["model.layer_scale"] is None and "-> 32x32 px" in note
    assert "a deep conv stem (6 convolutions, 2 of stride 2: a 8x8 map)" in note
    assert (f"a conv net at 32 px, not {side}, where its first convolution reads every pixel:" in note) == (side > 32)
    model = build_model(load_run_config(None, [], base=layers(changes)).model_config().replace(num_classes=6))
    assert model.config.grid_size == (8, 8) and model(torch.rand(2, 3, 32, 32)).shape == (2, 6)
    n = CONV_NET_BELOW
    hybrid = fitted_to_data(ImageScan(64, n, side, side, 3), n)[0]
    assert (hybrid["model.depth"], hybrid["model.image_size"]) == (6, side)  # from CONV_NET_BELOW: the hybrid


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
    _, note = fitted_to_data(ImageScan(64, CONV_NET_BELOW, 32, 32, 3), CONV_NET_BELOW)
    assert FAMILY_ROWS["hybrid"] and "benchmarks/results/families.csv" in note
    for prefix in FAMILY_ROWS["hybrid"]:
        assert prefix.removeprefix("families-") in note
        mine = {k.removeprefix(f"{prefix}-hybrid-"): v for k, v in figure.items() if k.startswith(f"{prefix}-hybrid-")}
        plain = {k.removeprefix(f"{prefix}-plain-"): v for k, v in figure.items() if k.startswith(f"{prefix}-plain-")}
        assert mine and mine.keys() == plain.keys(), prefix  # measured beside each other on each machine
        assert all(mine[m] >= plain[m] for m in mine), (prefix, mine, plain)
    _, note = fitted_to_data(ImageScan(64, 600, 16, 16, 3), 600)
    assert FAMILY_ROWS["conv"]
    for prefix in FAMILY_ROWS["conv"]:  # the conv net beat the stem with 1 block and the 6-block hybrid where fitted
        assert prefix.removeprefix("families-") in note
        mine = {k.removeprefix(f"{prefix}-conv-"): v for k, v in figure.items() if k.startswith(f"{prefix}-conv-")}
        for other in ("deep", "hybrid"):
            them = {
                k.removeprefix(f"{prefix}-{other}-"): v for k, v in figure.items() if k.startswith(f"{prefix}-{other}-")
            }
            assert mine and mine.keys() == them.keys(), (prefix, other)
            assert all(mine[m] >= them[m] for m in mine), (prefix, other, mine, them)
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


def _glyph(c, i, ink=0):
    """A bar of `ink` on a transparent ground, as symbolic icons are drawn."""
    pixels = np.zeros((16, 16, 4), np.uint8)
    pixels[..., :3] = ink
    pixels[4:12, 6 + c : 9 + c, 3] = 255
    return Image.fromarray(pixels, "RGBA")


def _light_glyph(c, i):
    return _glyph(c, i, ink=255)


def _digits_and_glyphs(c, i):
    """Opaque white-on-black digits, and one image in four a black glyph on a transparent ground."""
    return _glyph(c, i) if i == 3 else _dark_digit(c, i)


@pytest.mark.parametrize(
    ("draw", "background", "said"),
    [
        (_dark_digit, 0.0, "padded with black like the images' borders"),
        (_transparent_icon, 1.0, "padded with white like the images' borders"),
        # on their borders' colour (black, white) the glyphs were blank images: the fit takes the other
        (_digits_and_glyphs, 1.0, "composited on white and padded with it: 2 of 8 images looked at are transparent"),
        (_light_glyph, 0.0, "composited on black and padded with it: 8 of 8 images looked at are transparent"),
    ],
)
def test_the_fitted_background_continues_the_borders_and_never_hides_transparent_images(
    tmp_path, capsys, draw, background, said
):
    """White-on-black digits padded with white (the background's default) would train on frames no image has; icons
    composited on white and padded with black did. The fit pads with the colour the images' borders have, unless
    that colour would hide what transparent images show."""
    _folder(tmp_path / "data", draw)
    argv = ["train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "run"), "--no-progress"]
    assert main([*argv, "train.steps=1", "train.threads=1", "train.eval_every=1"]) == 0
    assert said in capsys.readouterr().out
    model = json.loads((tmp_path / "run" / "final" / "config.json").read_text())["model"]
    assert np.allclose(model["background"], background)


@pytest.mark.parametrize(("background", "warned"), [(0, True), (1, False)])
def test_a_named_model_warns_where_transparent_images_are_blank_on_its_background(tmp_path, capsys, background, warned):
    """Black glyphs on a transparent ground, composited on a black model.background, trained as blank images and
    nothing said so; a model named (or a checkpoint's, or a fine-tuned one's) background is the user's to change."""
    _folder(tmp_path / "data", _glyph)
    argv = ["train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "run"), "--no-progress"]
    argv += [
        "model.name=vit_test",
        "model.image_size=16",
        f"model.background={background}",
        "train.steps=1",
        "train.batch_size=4",
    ]
    assert main([*argv, "train.threads=1", "train.eval_every=1", "train.warmup_steps=0"]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if "partly transparent" in line]
    assert said == (
        [
            "warning    8 of 8 partly transparent training images looked at are one flat colour on model.background "
            "black: what they show is that colour, so the model sees blank images; model.background=1 (white) shows them"
        ]
        if warned
        else []
    )


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


def _fitted(tmp_path, capsys, draw):
    """A fitted run of one step on 20 training images a class drawn by `draw`: (what it printed, its augment section)."""
    for split, n in (("train", 20), ("val", 2)):
        for c, name in enumerate(("a", "b")):
            (tmp_path / "data" / split / name).mkdir(parents=True)
            for i in range(n):
                draw(c, i + 100 * (split == "val")).save(tmp_path / "data" / split / name / f"{i}.png")
    argv = ["train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "run"), "--no-progress"]
    assert main([*argv, "train.steps=1", "train.threads=1", "train.eval_every=1", "train.baseline=false"]) == 0
    out = capsys.readouterr().out
    return out, yaml.safe_load((tmp_path / "run" / "run.yaml").read_text())["augment"]


def _white_stripes(c, i):
    """_stripes as white ink on a transparent ground (the stripes opaque): blank images on white."""
    gray = np.asarray(_stripes(c, i))
    return Image.fromarray(np.dstack([np.full((16, 16, 3), 255, np.uint8), (gray > 100).astype(np.uint8) * 255]))


# the pixel model reads the images on the fitted background: on white, white stripes were blank and nothing was told
@pytest.mark.parametrize(
    ("draw", "flip", "said"), [(_sides, 0.0, "no flips"), (_stripes, 0.5, "flips"), (_white_stripes, 0.5, "flips")]
)
def test_the_fitted_flip_follows_whether_a_mirror_image_keeps_its_class(tmp_path, capsys, draw, flip, said):
    """Flips help photos and icons and are wrong for digits and scenes told apart by left and right: the fit flips
    where a pixel model of the training images knows their mirror images (evaluate.baseline.pixel_skills)."""
    out, augment = _fitted(tmp_path, capsys, draw)
    assert f"  flips      {said} (a pixel model of the images knows their mirror images at " in out
    assert augment["hflip"] == flip


def _checker(c, i):
    """Class a a checkerboard of single pixels, b the same moved by one pixel: only pixels in place tell them apart."""
    g = np.random.default_rng([c, i])
    rows, cols = np.indices((16, 16))
    return Image.fromarray((g.integers(0, 40, (16, 16)) + 150 * ((rows + cols + c) % 2)).astype(np.uint8))


def _halves(c, i):
    """Class a bright above, b below: a shape a one-pixel move keeps."""
    pixels = np.random.default_rng([c, i]).integers(0, 40, (16, 16)).astype(np.uint8)
    pixels[8 * c : 8 * c + 8] += 150
    return Image.fromarray(pixels)


@pytest.mark.parametrize(
    ("draw", "crop", "said"),
    [
        (_checker, "none", "not shifted (a pixel model"),
        (_halves, "pad", "shifted by a padded random crop (a pixel model"),
    ],
)
def test_the_fitted_crop_shifts_the_images_unless_single_pixels_in_place_tell_the_classes_apart(
    tmp_path, capsys, draw, crop, said
):
    """Shifting icons drawn on a pixel grid cost them points (benchmarks/results/families.csv): the fit shifts
    the images (a padded random crop) only where a pixel model of them keeps its skill on them moved by a pixel
    (evaluate.baseline.pixel_skills)."""
    out, augment = _fitted(tmp_path, capsys, draw)
    assert f"  shifts     {said} of the images keeps " in out and " of its skill when they move by a pixel" in out
    assert augment["crop"] == crop


@pytest.mark.parametrize("side", [16, 32])
def test_model_backbone_null_fits_a_plain_vit_on_a_4x4_grid_not_the_hybrid_less_its_stem(tmp_path, side):
    """The plan's "model.backbone=null for a plain ViT" gives the plain family (patches of a quarter of the size,
    6 blocks, a class token), not 1x1 patches of the pixels under the hybrid's depth and head."""
    from vitkit.train.fit import fitted_unless_named

    for split in ("train", "val"):
        for c in ("a", "b"):
            (tmp_path / split / c).mkdir(parents=True)
            for i in range(6):
                Image.fromarray(np.full((side, side, 3), 20 * i + 100 * (c == "b"), np.uint8)).save(
                    tmp_path / split / c / f"{i}.png"
                )
    fitted = fitted_unless_named(str(tmp_path), False, ["model.backbone=null"], "train")
    assert (fitted["model.patch_size"], fitted["model.depth"], fitted["model.classifier"]) == (side // 4, 6, "token")
    assert fitted["model.backbone"] is None
    hybrid = fitted_unless_named(str(tmp_path), False, [], "train")
    assert hybrid["model.backbone"] and hybrid["model.patch_size"] == 1
