"""`vitkit inspect` through the real entry point."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from vitkit.cli import build_parser, main


@pytest.fixture
def checkpoint(tmp_path):
    torch.manual_seed(0)
    return vitkit.save_pretrained(vitkit.create_model("vit_test"), tmp_path / "ckpt")


@pytest.fixture
def image_dir(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return folder


def test_inspect_writes_every_figure_and_the_numbers(checkpoint, image_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["inspect", str(checkpoint), "--images", str(image_dir), "--out", str(out), "--show", "2"]) == 0
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == sorted(["patch_embedding_filters.png", "pos_embed_similarity.png", "mean_attention_distance.png",
                           "attention_rollout.png", "last_layer_attention.png"])
    assert all((out / name).stat().st_size > 0 for name in pngs)
    summary = json.loads((out / "inspection.json").read_text())
    assert summary["num_images"] == 3 and summary["grid_size"] == [4, 4]
    assert "mean attention distance per layer" in capsys.readouterr().out


def test_inspect_at_a_higher_resolution_interpolates_the_position_embeddings(checkpoint, image_dir, tmp_path):
    out = tmp_path / "out"
    assert main(["inspect", str(checkpoint), "--images", str(image_dir), "--out", str(out), "--image-size", "16", "24"]) == 0
    with np.load(out / "inspection.npz", allow_pickle=False) as npz:
        assert npz["pos_embed_similarity"].shape == (4, 6, 4, 6)
        assert npz["rollout"].shape == (3, 4, 6)


def test_user_errors_are_one_line_and_exit_2(checkpoint, image_dir, tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "nope"), "--images", str(image_dir), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and len(err.strip().splitlines()) == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["inspect", str(checkpoint), "--images", str(empty), "--out", str(tmp_path / "o")]) == 2
    assert "no images found" in capsys.readouterr().err
    assert main(["inspect", str(checkpoint), "--images", str(image_dir), "--out", str(tmp_path / "o"), "--show", "0"]) == 2
    assert "--show" in capsys.readouterr().err
    assert main(["inspect", str(checkpoint), "--images", str(image_dir), "--out", str(tmp_path / "o"), "--device", "gpu0"]) == 2
    assert "--device" in capsys.readouterr().err


def test_help_names_every_output(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["inspect", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for name in ("CKPT", "--images", "--out", "mean_attention_distance.png", "attention_rollout.png", "inspection.npz"):
        assert name in text
