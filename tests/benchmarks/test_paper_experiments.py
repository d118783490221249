"""The paper's experiments (benchmarks/paper/): data size, compute, position embeddings, each end to end in CI size."""

import json
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

PAPER = Path(__file__).resolve().parents[2] / "benchmarks" / "paper"


@pytest.fixture(scope="module", autouse=True)
def scripts_importable():
    """The scripts import their shared `common` module from their own folder."""
    sys.path.insert(0, str(PAPER))
    yield
    sys.path.remove(str(PAPER))


@pytest.fixture(autouse=True)
def no_plots_per_run(monkeypatch):
    """Each experiment trains many runs, and every `vitkit train` run ends drawing its own loss, accuracy, lr and
    confusion figures (tests/train cover them); the experiments' claims are their own table and figure, so the runs
    here skip theirs."""
    from vitkit.train import loop

    monkeypatch.setattr(loop, "_plot", lambda *args, **kwargs: [])


@pytest.fixture(scope="module")
def idx_data(tmp_path_factory):
    """A 10-class IDX dataset of 28x28 images whose brightness gives the class (200 train, 60 test)."""
    from common import write_idx

    root = tmp_path_factory.mktemp("idx")
    g = np.random.default_rng(0)
    for split, n in (("train", 200), ("t10k", 60)):
        labels = g.integers(0, 10, n).astype(np.uint8)
        write_idx(root / f"{split}-images-idx3-ubyte", g.integers(0, 60, (n, 28, 28)) + labels[:, None, None] * 19)
        write_idx(root / f"{split}-labels-idx1-ubyte", labels)
    return root


def run(script, *args, monkeypatch, code=0):
    threads = torch.get_num_threads()
    monkeypatch.setattr(sys, "argv", [str(PAPER / script), "--ci", "--threads", "1", *map(str, args)])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(PAPER / script), run_name="__main__")
    torch.set_num_threads(threads)
    assert done.value.code == code


def outputs(out: Path, name: str) -> dict:
    assert (out / f"{name}.png").stat().st_size > 1000
    text = (out / f"{name}.md").read_text()
    assert (
        "Paper" in text and "test images: the first 40 of 60" in text
    )  # the claim beside the table, and how many images scored it
    return json.loads((out / f"{name}.json").read_text())


def test_data_size(idx_data, tmp_path, monkeypatch):
    run("data_size.py", "--data", idx_data, "--out", tmp_path, "--sizes", "50,100", monkeypatch=monkeypatch)
    result = outputs(tmp_path, "data_size")
    rows = result["rows"]
    assert [(r["family"], r["subset"]) for r in rows] == [(f, n) for n in (50, 100) for f in ("ViT", "BiT", "hybrid")]
    assert all(0 <= r["test_top1"] <= 1 and 0 <= r["fewshot10"] <= 1 and r["test_images"] == 40 for r in rows)
    # n images train: cut from the 190 left once 5% of the 200 are held out for validation
    assert [r["train_images"] for r in rows[::3]] == [50, 100]
    assert (
        rows[0]["train_selection"]
        == "first 50 of a seeded order (seed 0) of all but the 0.05 held out by class (seed 0)"
    )
    h = result["header"]
    assert (h["image_size"], h["channels"], h["test_split"]) == (28, 1, "test")  # IDX: its own size, grayscale


def test_data_size_on_a_folder_of_ones_own_photos(tmp_path, monkeypatch, capsys):
    """A folder with only train/ and val/ of RGB and grayscale photos of odd sizes: the families are built at the size
    vitkit train would fit (their median shorter side to a multiple of 8: 40 px), 3 channels, scored on val."""
    from PIL import Image

    g = np.random.default_rng(0)
    for split, n in (("train", 16), ("val", 4)):
        for c, name in enumerate(("dark", "light")):
            (tmp_path / "photos" / split / name).mkdir(parents=True)
            for i in range(n):
                h, w = int(g.integers(36, 44)), int(g.integers(40, 60))
                image = Image.fromarray((g.integers(0, 60, (h, w, 3)) + 150 * c).astype(np.uint8))
                (image.convert("L") if i % 3 == 0 else image).save(
                    tmp_path / "photos" / split / name / f"{i}.{'png' if i % 2 else 'jpg'}"
                )
    out = tmp_path / "out"
    run(
        "data_size.py",
        "--data",
        tmp_path / "photos",
        "--test-split",
        "val",
        "--out",
        out,
        "--sizes",
        "8,20",
        "--families",
        "ViT,hybrid",
        "--batch-size",
        "4",
        monkeypatch=monkeypatch,
    )
    result = json.loads((out / "data_size.json").read_text())
    h = result["header"]
    assert (h["image_size"], h["channels"], h["test_split"]) == (40, 3, "val")
    assert (
        "scored on its val split (val images: all 8)" in (text := (out / "data_size.md").read_text())
        and "| ViT val top-1 |" in text
    )
    assert [(r["family"], r["train_images"], r["test_images"]) for r in result["rows"]] == [
        ("ViT", 8, 8),
        ("hybrid", 8, 8),
        ("ViT", 20, 8),
        ("hybrid", 20, 8),
    ]
    config = json.loads((out / "runs" / "hybrid_8" / "final" / "config.json").read_text())
    assert (
        config["model"]["image_size"] == [40, 40]
        and config["model"]["in_chans"] == 3
        and config["data"]["val_split"] == "val"
    )
    # more images than the folder holds, a family that is not one: one line each
    for args, words in (
        (["--sizes", "33"], "--sizes: 33 is more than the training split holds: 32 images ("),
        (["--families", "vit"], "'vit': expected one of"),
    ):
        monkeypatch.setattr(
            sys,
            "argv",
            [
                "data_size.py",
                "--ci",
                "--data",
                str(tmp_path / "photos"),
                "--test-split",
                "val",
                "--out",
                str(out),
                *args,
            ],
        )
        with pytest.raises(SystemExit) as done:
            runpy.run_path(str(PAPER / "data_size.py"), run_name="__main__")
        assert done.value.code == 2 and words in capsys.readouterr().err


def test_compute(idx_data, tmp_path, monkeypatch):
    run(
        "compute.py",
        "--data",
        idx_data,
        "--out",
        tmp_path,
        "--sizes-per-family",
        "2",
        "--families",
        "ViT,BiT",
        monkeypatch=monkeypatch,
    )
    rows = outputs(tmp_path, "compute")["rows"]
    assert [r["family"] for r in rows] == ["ViT"] * 2 + ["BiT"] * 2
    for family in ("ViT", "BiT"):
        flops = [r["train_flops"] for r in rows if r["family"] == family]
        assert flops == sorted(flops) and flops[0] > 0  # sizes listed small to large, FLOPs counted


def test_pos_embed(idx_data, tmp_path, monkeypatch):
    run("pos_embed.py", "--data", idx_data, "--out", tmp_path, monkeypatch=monkeypatch)
    result = outputs(tmp_path, "pos_embed")
    assert set(result["stats"]) == {"none", "learned", "learned_2d", "relative", "sincos2d"}
    assert "minus_none" in result["stats"]["relative"] and "minus_none" not in result["stats"]["none"]


def test_a_stopped_experiment_continues_and_a_rerun_with_other_settings_is_refused(
    idx_data, tmp_path, monkeypatch, capsys
):
    """A run of an earlier command was reused whatever its settings (a table of 20-step runs captioned "5 steps"); one
    stopped by Ctrl-C ended in a traceback, and the same command then failed on it every time."""
    import common

    real, calls = common.train, []

    def stopped_once(config, out, **kw):  # the first run is stopped after its first step, as SIGINT would stop it
        calls.append(kw.get("resume", False))
        return real(config, out, **kw, **({"stop_at": 1} if len(calls) == 1 else {}))

    monkeypatch.setattr(common, "train", stopped_once)
    args = ("pos_embed.py", "--data", idx_data, "--out", tmp_path, "--variants", "none", "--seeds", "1")
    run(*args, monkeypatch=monkeypatch)
    assert "stopped at step 1 of 2" in capsys.readouterr().err and not (tmp_path / "pos_embed.json").exists()
    run(*args, monkeypatch=monkeypatch)  # the same command: continues the stopped run
    assert (
        calls == [False, True]
        and json.loads((tmp_path / "runs" / "none_seed0" / "summary.json").read_text())["steps"] == 2
    )
    assert (tmp_path / "pos_embed.json").is_file()
    run(*args, "--steps", "3", monkeypatch=monkeypatch, code=2)  # other settings: never reported as this command's
    assert (
        "trained with other settings (train.checkpoint_every, train.eval_every, train.steps differ"
        in capsys.readouterr().err
    )
