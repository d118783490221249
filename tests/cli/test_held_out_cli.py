"""A new user's folder without train/ and val/, through the real `vitkit` command: val is held out class by class, the
same images every run, listed in the run directory; copies of one image under two classes are said apart from other
copies; the plan says how far apart the classes are in size. A list with a labels column trains multi-label unasked,
and its `eval` says which scored images are copies of training images, as single-label eval does."""

import json
import shutil
import struct

import numpy as np
import pytest
from PIL import Image

from vitkit.data import DataSpec
from vitkit.data.sources import open_split

TINY = [
    "model.name=vit_test",
    "model.depth=1",
    "model.image_size=8",
    "train.steps=2",
    "train.batch_size=8",
    "train.warmup_steps=1",
    "train.eval_every=2",
    "train.threads=1",
    "augment.crop=none",
    "--no-progress",
]


def make_folder(root, sizes: dict, seed: int = 0) -> None:
    """root/<class>/<i>.png, each image its own pixels."""
    rng = np.random.default_rng(seed)
    for name, n in sizes.items():
        (root / name).mkdir(parents=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)).save(root / name / f"{i}.png")


def summary(done) -> dict:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_folder_without_splits_holds_out_each_class_its_share_the_same_images_every_run(tmp_path, vitkit_cmd):
    """A seeded permutation of all the images held out 36 of one class and 22 of another; a class of one image could
    land in val, never trained on."""
    make_folder(tmp_path / "flat", {"a": 50, "b": 30, "c": 10, "d": 1})
    shown = summary(vitkit_cmd("data", tmp_path / "flat", "data.val_fraction=0.2", "--json"))
    val, train = shown["splits"]["val"], shown["splits"]["train"]
    assert (
        val["per_class"] == {"a": 10, "b": 6, "c": 2, "d": 0} and val["selection"] == "0.2 held out by class (seed 0)"
    )
    assert train["per_class"] == {"a": 40, "b": 24, "c": 8, "d": 1}
    assert (
        summary(vitkit_cmd("data", tmp_path / "flat", "data.val_fraction=0.2", "--json"))["splits"] == shown["splits"]
    )
    cut = [open_split(tmp_path / "flat", "val", channels=3, val_fraction=0.2, seed=s).paths for s in (0, 0, 1)]
    assert cut[0] == cut[1] and cut[0] != cut[2]
    other_seed = summary(vitkit_cmd("data", tmp_path / "flat", "data.val_fraction=0.2", "data.split_seed=1", "--json"))
    assert other_seed["splits"]["val"]["per_class"] == val["per_class"]


def test_copies_of_one_image_under_two_classes_are_said_apart_from_other_copies(tmp_path, vitkit_cmd):
    """An image filed under two class folders was said as any other copy (a val image equal to a training one), or,
    both copies in train, not at all."""
    make_folder(tmp_path / "ds" / "train", {"a": 6, "b": 6})
    make_folder(tmp_path / "ds" / "val", {"a": 2, "b": 2}, seed=1)
    shutil.copy(tmp_path / "ds" / "train" / "a" / "0.png", tmp_path / "ds" / "val" / "a" / "again.png")
    shutil.copy(tmp_path / "ds" / "train" / "a" / "1.png", tmp_path / "ds" / "train" / "b" / "misfiled.png")
    done = vitkit_cmd("data", tmp_path / "ds", "--json")
    shown = summary(done)
    assert shown["copies_of_training_images"]["val"]["images"] == 1
    assert shown["copies_labelled_otherwise"] == {
        "images": 2,
        "groups": 1,
        "example": [
            [str(tmp_path / "ds" / "train" / "a" / "1.png"), "a"],
            [str(tmp_path / "ds" / "train" / "b" / "misfiled.png"), "b"],
        ],
    }
    warnings = [line for line in done.stdout.splitlines() if line.startswith("warning")]
    assert len(warnings) == 2 and "1 val image is byte-identical to training images" in warnings[0]
    assert "2 files are byte-identical copies of 1 image under different labels" in warnings[1]
    assert "again.png" not in warnings[1]  # a copy under its own class is no conflict


def test_train_lists_the_held_out_images_and_its_plan_says_the_classes_sizes_and_copies(tmp_path, vitkit_cmd):
    """Which images vitkit held out as val was said nowhere; nor that a class had 27 times the images of another, that
    val held no image of one, or that an image was filed under two classes."""
    data, run = tmp_path / "flat", tmp_path / "run"
    make_folder(data, {"a": 30, "b": 12, "c": 5, "d": 1})
    shutil.copy(data / "a" / "0.png", data / "b" / "copy.png")
    done = vitkit_cmd("train", "--data", data, "--out", run, *TINY)
    assert done.returncode == 0, done.stderr
    listed = (run / "splits" / "val.txt").read_text().splitlines()
    held = open_split(data, "val", channels=3, val_fraction=0.1)
    assert listed == [str(path.relative_to(data)) for path in held.paths] and len(listed) == 5
    assert sorted(name.split("/")[0] for name in listed) == ["a", "a", "a", "b", "c"]
    # the val images are read into memory before the plan: the list still names files, and the plan says so
    assert f"listed   the val images in {run / 'splits' / 'val.txt'} (one a line, below the data folder)" in done.stdout
    plan = [line for line in done.stdout.splitlines() if line.startswith("warning")]
    assert any("classes: 1 to 27 training images, the largest (a) 27x the smallest (d)" in line for line in plan), plan
    assert any("val holds no image of 1 class (d)" in line and "stays whole in train" in line for line in plan), plan
    assert any("2 files are byte-identical copies of 1 image under different labels" in line for line in plan), plan


def make_idx(root, n: int) -> np.ndarray:
    """root's four IDX files, n training images of 8x8 whose top-left pixel is their row in the file; the images."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n, 8, 8), dtype=np.uint8)
    images[:, 0, 0] = np.arange(n)
    labels = rng.integers(0, 3, n, dtype=np.uint8)
    root.mkdir()
    for name, array in {
        "train-images-idx3-ubyte": images,
        "train-labels-idx1-ubyte": labels,
        "t10k-images-idx3-ubyte": images[:6],
        "t10k-labels-idx1-ubyte": labels[:6],
    }.items():
        header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
        (root / name).write_bytes(header + array.tobytes())
    return images


@pytest.mark.parametrize("train_images", [None, 20])
def test_train_lists_the_rows_held_out_of_idx_files(tmp_path, vitkit_cmd, train_images):
    """Images in memory (IDX files) held out as val were listed nowhere: splits/val.txt now holds each one's row in
    the training file, also where data.train_images then took part of the rest."""
    data, run = tmp_path / "idx", tmp_path / "run"
    images = make_idx(data, 40)
    fewer = [] if train_images is None else [f"data.train_images={train_images}"]
    done = vitkit_cmd("train", "--data", data, "--out", run, *TINY, "data.val_fraction=0.2", *fewer)
    assert done.returncode == 0, done.stderr
    assert "(one a line, its row in the training file, from 0)" in done.stdout
    listed = [int(line) for line in (run / "splits" / "val.txt").read_text().splitlines()]
    # the splits as the run read them: the same images its checkpoint records
    record = json.loads((run / "final" / "config.json").read_text())["data"]
    spec = DataSpec(path=str(data), val_fraction=0.2, train_images=train_images)
    val, train = (spec.open(name, channels=3, image_size=8) for name in ("val", "train"))
    assert val.describe() == record["splits"]["val"] and train.describe() == record["splits"]["train"]
    assert len(listed) == 8 and np.array_equal(images[listed], val.images[:, 0].numpy())
    trained_rows = set(train.images[:, 0, 0, 0].tolist())  # each image's row, read from its own pixels
    assert len(trained_rows) == (train_images or 32) and trained_rows.isdisjoint(listed)


def make_tags(root, n: int = 24) -> None:
    """root/tags.jsonl: n images whose labels are their lit channels, each listed twice (a byte-identical copy)."""
    rng = np.random.default_rng(0)
    root.mkdir()
    rows = []
    for i in range(n):
        lit = rng.random(3) < 0.5
        pixels = (rng.integers(0, 30, (8, 8, 3)) + 200 * lit).astype(np.uint8)
        for name in (f"{i}.png", f"{i}_again.png"):
            Image.fromarray(pixels).save(root / name)
            labels = [c for c, on in zip(("red", "green", "blue"), lit) if on]
            rows.append(json.dumps({"path": name, "labels": labels}) + "\n")
    (root / "tags.jsonl").write_text("".join(rows))


def test_a_labels_list_trains_multi_label_unasked_and_its_eval_names_copies_of_training_images(tmp_path, vitkit_cmd):
    """A list with a labels column was refused until train.objective=multi_label was typed; eval of the multi-label
    model then scored val images byte-identical to training images as unseen, unsaid (single-label eval says so)."""
    make_tags(tmp_path / "tags")
    run = tmp_path / "run"
    done = vitkit_cmd("train", "--data", tmp_path / "tags" / "tags.jsonl", "--out", run, *TINY)
    assert done.returncode == 0, done.stderr
    assert "objective  multi_label: chosen by train.objective=auto (the default)" in done.stdout
    assert summary(done)["objective"] == "multi_label"
    assert "objective: auto" in (run / "run.yaml").read_text()  # as for train.precision: the data decides
    scored = vitkit_cmd("eval", run, "--split", "val", "--json", "--threads", "1")
    result = summary(scored)
    assert result["problem_type"] == "multi_label_classification" and result["copies_of_training_images"] >= 1
    assert f"note: {result['copies_of_training_images']} of these val images" in scored.stdout
    refused = vitkit_cmd(
        "train",
        "--data",
        tmp_path / "tags" / "tags.jsonl",
        "--out",
        tmp_path / "softmax",
        *TINY,
        "train.objective=classification",
    )
    assert refused.returncode == 2 and "train with train.objective=multi_label" in refused.stderr


def test_a_fitted_run_on_a_labels_list_skips_the_pixel_baseline_saying_why(tmp_path, vitkit_cmd):
    """train.objective=auto makes a labels list multi-label: the fitted run's baseline (one class per image) must see
    the objective the data chose, not the "auto" the run config says, and skip saying why."""
    make_tags(tmp_path / "tags")
    fitted = ["train.steps=2", "train.batch_size=8", "train.threads=1", "model.depth=1", "--no-progress"]
    done = vitkit_cmd("train", "--data", tmp_path / "tags" / "tags.jsonl", "--out", tmp_path / "run", *fitted)
    assert done.returncode == 0, done.stderr
    assert "baseline   multi-label: a softmax regression predicts one class per image" in done.stdout
    assert summary(done)["objective"] == "multi_label"


def test_a_csv_whose_labels_are_joined_by_spaces_trains_on_the_labels_and_says_how_it_read_them(tmp_path, vitkit_cmd):
    """Kaggle's lists join an image's tags with spaces: vitkit read "red blue" as one class, a class for each
    combination, and said nothing of it."""
    make_tags(tmp_path / "tags")
    rows = [json.loads(line) for line in (tmp_path / "tags" / "tags.jsonl").read_text().splitlines()]
    (tmp_path / "tags" / "tags.csv").write_text(
        "path,labels\n" + "".join(f"{row['path']},{' '.join(row['labels'])}\n" for row in rows)
    )
    done = vitkit_cmd("train", "--data", tmp_path / "tags" / "tags.csv", "--out", tmp_path / "run", *TINY)
    assert done.returncode == 0, done.stderr
    assert "3 classes (blue, green, red)" in done.stdout
    assert (
        "gives each image a set of labels (joined by spaces in the labels column of tags.csv, as no cell holds ';')"
        in done.stdout
    )
    shown = vitkit_cmd("data", tmp_path / "tags" / "tags.csv")
    assert (
        "classes  3: blue, green, red (several labels per image, joined by spaces in the labels column of tags.csv"
        in shown.stdout
    )
