"""A BiT ResNet through the commands a ViT goes through: train, eval, fewshot, linear-probe, knn, finetune, export, models."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from vitkit.cli import main


def run(capsys, *args):
    """The command in this process; the JSON object on its last output line."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out.strip().splitlines()[-1])


def folder(root):
    """train/ and test/ folders of 16x16 RGB PNGs, 2 classes told apart by brightness."""
    rng = np.random.default_rng(0)
    for split, n in (("train", 12), ("test", 4)):
        for c, name in enumerate(("dark", "bright")):
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                Image.fromarray((rng.integers(0, 60, (16, 16, 3)) + 150 * c).astype(np.uint8)).save(
                    root / split / name / f"{i}.png"
                )
    return root


@pytest.fixture
def one_thread():
    """The commands below run with --threads 1 (set for the whole process): put the count back afterwards."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_bit_end_to_end(capsys, tmp_path, one_thread):
    data = folder(tmp_path / "data")
    common = [
        "--no-progress",
        "train.steps=2",
        "train.batch_size=8",
        "train.warmup_steps=1",
        "train.eval_every=2",
        "train.threads=1",
    ]
    run(capsys, "train", "--data", data, "--out", tmp_path / "run", "model.name=bit_test", *common)
    config = json.loads((tmp_path / "run" / "final" / "config.json").read_text())
    assert config["model"]["arch"] == "bit" and config["model"]["layers"] == [1, 1]
    assert (
        run(capsys, "eval", tmp_path / "run", "--data", data, "--split", "test", "--json", "--threads", "1")["n"] == 8
    )
    fewshot = run(capsys, "fewshot", tmp_path / "run", "--data", data, "--shots", "2", "--seeds", "1", "--threads", "1")
    assert fewshot["feature_dim"] == 256  # the pooled ResNet features: 4 x root width 32 x 2
    assert (
        run(capsys, "knn", tmp_path / "run", "--data", data, "--k", "3", "--threads", "1")["n_train"] == 22
    )  # the run's training images (2 held out)
    assert "test_top1" in run(
        capsys, "linear-probe", tmp_path / "run", "--data", data, "--l2", "1e-2", "--max-iter", "20", "--threads", "1"
    )
    sweep = run(
        capsys,
        "finetune",
        "--from",
        tmp_path / "run",
        "--data",
        data,
        "--out",
        tmp_path / "ft",
        "--image-size",
        "24",
        "--lr",
        "0.01",
        "--steps",
        "1",
        "--batch-size",
        "8",
        "--no-progress",
        "train.warmup_steps=1",
        "train.threads=1",
        "data.val_fraction=0.25",
    )
    assert sweep["image_size"] == [24, 24]
    assert (
        main(["export", str(tmp_path / "run" / "final"), "--format", "onnx", "--out", str(tmp_path / "bit.onnx")]) == 0
    )
    assert (tmp_path / "bit.onnx").is_file()
    capsys.readouterr()
    main(["models", "bit_r50x1", "bit_test", "--json"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[0]["params"] == 25_549_352 and rows[0]["backbone"] == "BiT-R50x1" and rows[1]["gflops"] > 0


def test_commands_for_vits_only_refuse_a_resnet_in_one_line(capsys, tmp_path):
    assert main(["benchmark", "--model", "bit_test", "--batch", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Vision Transformers" in err and len(err.splitlines()) == 1
    assert (
        main(
            [
                "train",
                "--out",
                str(tmp_path / "mpp"),
                "model.name=bit_test",
                "data.name=synthetic",
                "train.objective=masked_patch",
                "train.steps=1",
                "train.batch_size=4",
                "--no-progress",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert "masked_patch" in err and "ResNetV2" in err
