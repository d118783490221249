"""`vitkit inspect` through the real entry point."""

from __future__ import annotations

import json
import os
from pathlib import Path

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
    assert pngs == sorted(
        [
            "patch_embedding_filters.png",
            "pos_embed_similarity.png",
            "mean_attention_distance.png",
            "attention_rollout.png",
            "last_layer_attention.png",
        ]
    )
    assert all((out / name).stat().st_size > 0 for name in pngs)
    summary = json.loads((out / "inspection.json").read_text())
    assert summary["num_images"] == 3 and summary["grid_size"] == [4, 4]
    assert "mean attention distance per layer" in capsys.readouterr().out


def test_a_head_that_never_trained_predicts_nothing_in_the_figures(image_dir, tmp_path):
    """inspect of a masked-patch checkpoint labelled every image "pred: <class 0>", from a head that never trained
    (eval and predict refuse it)."""
    model = vitkit.create_model("vit_test", num_classes=3)
    torch.nn.init.normal_(model.head.weight)
    labels = {}
    for objective in ("classification", "masked_patch"):
        extra = {
            "class_names": ["ant", "bee", "cat"],
            **({"objective": objective} if objective == "masked_patch" else {}),
        }
        ckpt = vitkit.save_pretrained(model, tmp_path / objective, extra=extra)
        assert (
            main(
                [
                    "inspect",
                    str(ckpt),
                    "--images",
                    str(image_dir),
                    "--out",
                    str(tmp_path / f"o_{objective}"),
                    "--show",
                    "2",
                ]
            )
            == 0
        )
        labels[objective] = [
            s["label"] for s in json.loads((tmp_path / f"o_{objective}" / "inspection.json").read_text())["shown"]
        ]
    assert all("pred: " in label for label in labels["classification"])
    assert labels["masked_patch"] and not any("pred" in label for label in labels["masked_patch"])


def test_an_unreadable_image_stops_inspect_naming_the_way_round_or_is_left_out_and_named(
    checkpoint, image_dir, tmp_path, capsys
):
    """A truncated image among a run's images stopped inspect with no way to leave it out (eval has --skip-unreadable)."""
    (image_dir / "cut.png").write_bytes((image_dir / "0.png").read_bytes()[:40])
    assert main(["inspect", str(checkpoint), "--images", str(image_dir), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "cut.png" in err and "--skip-unreadable" in err and len(err.strip().splitlines()) == 1
    assert (
        main(
            ["inspect", str(checkpoint), "--images", str(image_dir), "--out", str(tmp_path / "o"), "--skip-unreadable"]
        )
        == 0
    )
    summary = json.loads((tmp_path / "o" / "inspection.json").read_text())
    assert summary["num_images"] == 3 and [Path(u["path"]).name for u in summary["unreadable"]] == ["cut.png"]
    assert "(1 unreadable left out)" in capsys.readouterr().out


def test_inspect_at_a_higher_resolution_interpolates_the_position_embeddings(checkpoint, image_dir, tmp_path):
    out = tmp_path / "out"
    assert (
        main(["inspect", str(checkpoint), "--images", str(image_dir), "--out", str(out), "--image-size", "16", "24"])
        == 0
    )
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
    assert (
        main(["inspect", str(checkpoint), "--images", str(image_dir), "--out", str(tmp_path / "o"), "--show", "0"]) == 2
    )
    assert "--show" in capsys.readouterr().err
    assert (
        main(["inspect", str(checkpoint), "--images", str(image_dir), "--out", str(tmp_path / "o"), "--device", "gpu0"])
        == 2
    )
    assert "--device" in capsys.readouterr().err
    conv_net = vitkit.create_model("vit_test", backbone={"convs": [8, 16]}, patch_size=1, depth=0, classifier="gap")
    where = vitkit.save_pretrained(conv_net, tmp_path / "conv_net")
    assert main(["inspect", str(where), "--images", str(image_dir), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err  # a conv net (depth 0) has no attention: said before any image is read
    assert "model.depth is 0" in err and "no attention" in err and len(err.strip().splitlines()) == 1


def test_help_names_every_output(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["inspect", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for name in ("CKPT", "--images", "--out", "mean_attention_distance.png", "attention_rollout.png", "inspection.npz"):
        assert name in text


def _dark_and_light(root: Path, per_class: dict[str, int], seed: int) -> None:
    """root/SPLIT/{dark,light}/I.png: 16x16 noise images, per_class[SPLIT] of each class."""
    rng = np.random.default_rng(seed)
    for split, n in per_class.items():
        for name, base in (("dark", 0), ("light", 150)):
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                Image.fromarray((rng.integers(0, 60, (16, 16, 3)) + base).astype(np.uint8)).save(
                    root / split / name / f"{i}.png"
                )


def test_inspect_says_how_many_images_the_model_trained_on(image_dir, tmp_path, capsys):
    """The figures and the printed line name the images and count those of the run's training split."""
    _dark_and_light(tmp_path / "data", {"train": 6, "val": 3}, seed=0)
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--data",
                str(tmp_path / "data"),
                "--out",
                str(run),
                "--no-progress",
                "train.steps=2",
                "model.name=vit_test",
                "model.depth=1",
                "train.batch_size=4",
                "train.threads=1",
                "augment.crop=pad",
                "train.eval_every=2",
            ]
        )
        == 0
    )
    capsys.readouterr()
    out = tmp_path / "out"
    shown = [str(tmp_path / "data" / "train" / "dark"), str(tmp_path / "data" / "val")]
    assert main(["inspect", str(run), "--images", *shown, "--out", str(out), "--show", "2"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith(f"inspected 12 images from {shown[0]}, {shown[1]}; 6 of them in this model's training data")
    assert f"training data: {tmp_path / 'data'}, split train" in line
    summary = json.loads((out / "inspection.json").read_text())
    assert summary["in_training_data"] == 6 and summary["images"] == shown and summary["num_images"] == 12
    # each shown image says whether the model trained on it, in the JSON and in its title
    marks = [
        (f"{os.sep}train{os.sep}" in s["image"], s["in_training_data"], s["label"].endswith("\ntrained on"))
        for s in summary["shown"]
    ]
    assert {m[0] for m in marks} == {True, False} and all(a == b == c for a, b, c in marks)
    # --data of other images: checked against the run's own training images, not that data's train split (which called the
    # run's held-out val images, copied into a folder's train/, "trained on")
    import shutil

    shutil.copytree(tmp_path / "data" / "val", tmp_path / "other" / "train")
    assert (
        main(
            ["inspect", str(run), "--data", str(tmp_path / "other"), "--split", "train", "--out", str(tmp_path / "o3")]
        )
        == 0
    )
    line = capsys.readouterr().out.splitlines()[0]
    assert "images from the train split of" in line and "none of them in this model's training data" in line
    assert f"training data: {tmp_path / 'data'}, split train" in line
    # a checkpoint that records no training data: said, not guessed
    assert (
        main(
            [
                "inspect",
                str(vitkit.save_pretrained(vitkit.create_model("vit_test"), tmp_path / "bare")),
                "--images",
                str(image_dir),
                "--out",
                str(tmp_path / "out2"),
            ]
        )
        == 0
    )
    assert (
        "3 images from" in (line := capsys.readouterr().out.splitlines()[0])
        and "not checked against its training data" in line
    )
    bare = json.loads((tmp_path / "out2" / "inspection.json").read_text())
    assert bare["in_training_data"] is None and all(s["in_training_data"] is None for s in bare["shown"])


def test_inspect_marks_copies_of_training_images_as_trained_on(tmp_path, capsys):
    """inspect marked "trained on" by file path: a training image copied into val/ (or into a folder given with
    --images) was shown as unseen, where eval and `vitkit data` name such copies."""
    import shutil

    _dark_and_light(tmp_path / "data", {"train": 4, "val": 2}, seed=1)
    shutil.copy(tmp_path / "data" / "train" / "dark" / "0.png", tmp_path / "data" / "val" / "dark" / "copy.png")
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--data",
                str(tmp_path / "data"),
                "--out",
                str(run),
                "--no-progress",
                "train.steps=2",
                "model.name=vit_test",
                "model.depth=1",
                "train.batch_size=4",
                "train.threads=1",
                "augment.crop=pad",
                "train.eval_every=2",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["inspect", str(run), "--split", "val", "--out", str(tmp_path / "o1"), "--show", "5"]) == 0
    assert "5 images from the val split of" in (line := capsys.readouterr().out.splitlines()[0])
    assert "1 of them in this model's training data" in line
    shown = json.loads((tmp_path / "o1" / "inspection.json").read_text())["shown"]
    assert [s["image"].endswith("copy.png") for s in shown] == [s["in_training_data"] for s in shown]
    given = tmp_path / "given"
    given.mkdir()
    shutil.copy(tmp_path / "data" / "train" / "light" / "1.png", given / "a.png")
    shutil.copy(tmp_path / "data" / "val" / "light" / "1.png", given / "b.png")
    assert main(["inspect", str(run), "--images", str(given), "--out", str(tmp_path / "o2")]) == 0
    assert (
        "2 images from" in (line := capsys.readouterr().out.splitlines()[0])
        and "1 of them in this model's training data" in line
    )
    shown = json.loads((tmp_path / "o2" / "inspection.json").read_text())["shown"]
    assert [(Path(s["image"]).name, s["in_training_data"]) for s in shown] == [("a.png", True), ("b.png", False)]


def test_inspect_on_shards_marks_copies_and_on_parquet_does_not_claim_none(tmp_path, capsys):
    """On a model trained on tar shards or Parquet, inspect said "none of them in this model's training data" of a val
    split holding copies of training images: it compared files only, and took the split's name for the answer."""
    import shutil

    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    _dark_and_light(tmp_path / "data", {"train": 4, "val": 2}, seed=1)
    shutil.copy(tmp_path / "data" / "train" / "dark" / "0.png", tmp_path / "data" / "val" / "dark" / "copy.png")
    assert main(["data", str(tmp_path / "data"), "--to-shards", str(tmp_path / "shards")]) == 0
    (tmp_path / "pq").mkdir()
    for split in ("train", "val"):
        files = sorted((tmp_path / "data" / split).rglob("*.png"))
        table = pa.table(
            {
                "image": [{"bytes": f.read_bytes(), "path": f.name} for f in files],
                "label": [int(f.parent.name == "light") for f in files],
            }
        )
        features = {"image": {"_type": "Image"}, "label": {"names": ["dark", "light"], "_type": "ClassLabel"}}
        pq.write_table(
            table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})}),
            tmp_path / "pq" / f"{split}-00000-of-00001.parquet",
        )
    lines = {}
    for kind in ("shards", "pq"):
        run = tmp_path / f"run_{kind}"
        assert (
            main(
                [
                    "train",
                    "--data",
                    str(tmp_path / kind),
                    "--out",
                    str(run),
                    "--no-progress",
                    "train.steps=2",
                    "model.name=vit_test",
                    "model.depth=1",
                    "train.batch_size=4",
                    "train.threads=1",
                    "augment.crop=pad",
                    "train.eval_every=2",
                ]
            )
            == 0
        )
        capsys.readouterr()
        assert main(["inspect", str(run), "--split", "val", "--out", str(tmp_path / f"o_{kind}"), "--show", "5"]) == 0
        lines[kind] = capsys.readouterr().out.splitlines()[0]
        assert "5 images from the val split of" in lines[kind]
    shown = json.loads((tmp_path / "o_shards" / "inspection.json").read_text())["shown"]
    assert (
        "1 of them in this model's training data" in lines["shards"] and sum(s["in_training_data"] for s in shown) == 1
    )
    assert all(".tar:" in s["image"] for s in shown)  # each shown record named by its shard and member
    assert (
        "none of them from its training split" in lines["pq"] and "copies not checked" in lines["pq"]
    )  # not "in its training data"
    assert (
        main(["eval", str(tmp_path / "run_pq"), "--split", "val", "--threads", "1"]) == 0
    )  # eval says it too (it said nothing)
    assert (
        "note: these val images were not checked for copies of the images the model trained on ("
        in capsys.readouterr().out
    )


def test_inspect_reads_given_images_as_predict_does(tmp_path, monkeypatch):
    """inspect --images stretched every image to the model's square input, where predict and eval resize the shorter
    side to size / crop_pct and cut the centre: its "pred:" titles and attention maps were of other pixels than
    `vitkit predict` scores."""
    import vitkit.evaluate.inspection

    torch.manual_seed(0)
    model = vitkit.create_model("vit_test", num_classes=2)
    torch.nn.init.normal_(model.head.weight)
    ckpt = vitkit.save_pretrained(
        model, tmp_path / "ckpt", extra={"class_names": ["a", "b"], "preprocess": {"crop_pct": 0.875}}
    )
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name, size in (("wide.png", (23, 40)), ("tall.jpg", (37, 19))):
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(folder / name)
    seen, real = [], vitkit.evaluate.inspection.inspect_model

    def spy(model, x, **kwargs):
        seen.append(x)
        return real(model, x, **kwargs)

    monkeypatch.setattr(vitkit.evaluate.inspection, "inspect_model", spy)
    assert main(["inspect", str(ckpt), "--images", str(folder), "--out", str(tmp_path / "out")]) == 0
    classifier = vitkit.Classifier.load(ckpt)
    expected = torch.stack([classifier.pixels(folder / name) for name in ("tall.jpg", "wide.png")]).float() / 255.0
    torch.testing.assert_close(seen[0], vitkit.evaluate.inspection.normalize(expected, classifier.model.config))


def test_inspect_without_images_reads_a_held_out_split_of_the_checkpoints_data(tmp_path, capsys):
    """No --images: the test split of the recorded data (arrays here, as IDX files are), else val; --split train is
    all training images; a class is shown before any repeats."""
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--out",
                str(run),
                "--no-progress",
                "data.name=synthetic",
                "data.synthetic_size=64",
                "train.steps=2",
                "model.name=vit_test",
                "model.depth=1",
                "train.batch_size=8",
                "train.threads=1",
                "train.eval_every=2",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["inspect", str(run), "--out", str(tmp_path / "out"), "--num-images", "12", "--show", "10"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith(
        "inspected 12 images from the test split of synthetic; none of them in this model's training data"
    )
    summary = json.loads((tmp_path / "out" / "inspection.json").read_text())
    truths = [s["label"].splitlines()[0] for s in summary["shown"]]
    assert truths == [f"true: class_{k}" for k in range(10)]  # one of each class first
    assert all(s["in_training_data"] is False for s in summary["shown"]) and summary["images"] == [
        "the test split of synthetic"
    ]
    assert main(["inspect", str(run), "--out", str(tmp_path / "out2"), "--num-images", "12", "--split", "train"]) == 0
    assert "12 of them in this model's training data" in capsys.readouterr().out
    assert (
        main(["inspect", str(run), "--out", str(tmp_path / "out3"), "--images", str(tmp_path), "--split", "val"]) == 2
    )
    assert "--split and --data choose the images when --images is not given" in capsys.readouterr().err
