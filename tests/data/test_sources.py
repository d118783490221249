import json

import numpy as np
import pytest
import torch
from PIL import Image

from vitkit.data import Batches, epoch_order, open_dataset
from vitkit.data.sources import open_split
from vitkit.errors import DataError


def make_folder(root, classes=("cat", "dog"), per_class=5):
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            Image.new("RGB", (12, 10), (40 * c, i, 0)).save(root / name / f"{i}.png")


def test_image_folder_with_seeded_split(tmp_path):
    make_folder(tmp_path)
    train = open_split(tmp_path, "train", channels=3, val_fraction=0.2, seed=1)
    val = open_split(tmp_path, "val", channels=3, val_fraction=0.2, seed=1)
    assert train.class_names == ["cat", "dog"]
    assert len(train) == 8 and len(val) == 2
    assert not set(map(str, train.paths)) & set(map(str, val.paths))
    again = open_split(tmp_path, "val", channels=3, val_fraction=0.2, seed=1)
    assert again.paths == val.paths


def test_image_folder_with_split_dirs(tmp_path):
    make_folder(tmp_path / "train")
    make_folder(tmp_path / "val", per_class=2)
    assert len(open_split(tmp_path, "val", channels=3)) == 4
    assert len(open_split(tmp_path, "train", channels=3)) == 10


def test_train_and_test_folders_hold_val_out_of_train_without_overlap(tmp_path):
    make_folder(tmp_path / "train")
    make_folder(tmp_path / "test", per_class=3)
    train = open_split(tmp_path, "train", channels=3, val_fraction=0.2, seed=0)
    val = open_split(tmp_path, "val", channels=3, val_fraction=0.2, seed=0)
    assert len(train) == 8 and len(val) == 2
    assert not set(map(str, train.paths)) & set(map(str, val.paths))
    assert len(open_split(tmp_path, "test", channels=3, val_fraction=0.2)) == 6
    assert len(open_split(tmp_path, "train", channels=3, val_fraction=0.0)) == 10  # nothing held out


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_list_files(tmp_path, kind):
    make_folder(tmp_path / "img")
    rows = [(f"img/{c}/{i}.png", c) for c in ("cat", "dog") for i in range(5)]
    if kind == "csv":
        (tmp_path / "list.csv").write_text("path,label\n" + "".join(f"{p},{label}\n" for p, label in rows))
    else:
        (tmp_path / "list.jsonl").write_text("".join(json.dumps({"path": p, "label": label}) + "\n" for p, label in rows))
    split = open_split(tmp_path / f"list.{kind}", "train", channels=3, val_fraction=0.2)
    assert split.class_names == ["cat", "dog"] and len(split) == 8
    assert all(p.is_file() for p in split.paths)


def test_bad_list_line_names_line(tmp_path):
    (tmp_path / "list.jsonl").write_text('{"path": "a.png", "label": 1}\n{"oops": 1}\n')
    with pytest.raises(DataError, match=r"list.jsonl:2"):
        open_split(tmp_path / "list.jsonl", "train", channels=3)


def test_empty_folder_is_an_error(tmp_path):
    (tmp_path / "a").mkdir()
    with pytest.raises(DataError, match="no images"):
        open_split(tmp_path, "train", channels=3)


def test_synthetic_splits_share_classes_not_samples():
    train = open_dataset("synthetic", None, "train", channels=1, image_size=8, synthetic_size=40, synthetic_classes=4)
    val = open_dataset("synthetic", None, "val", channels=1, image_size=8, synthetic_size=40, synthetic_classes=4)
    assert train.images.shape == (40, 1, 8, 8) and len(val) == 10
    assert not torch.equal(train.images[:10], val.images)
    # each class is one pattern: class means of train and val agree far better than across classes
    mean = lambda s, c: s.images[s.labels == c].float().mean(0)
    assert (mean(train, 0) - mean(val, 0)).abs().mean() < (mean(train, 0) - mean(val, 1)).abs().mean() / 2


def test_epoch_order_is_a_function_of_seed_and_epoch():
    assert torch.equal(epoch_order(50, 3, 2), epoch_order(50, 3, 2))
    assert not torch.equal(epoch_order(50, 3, 2), epoch_order(50, 3, 1))
    assert sorted(epoch_order(50, 3, 2).tolist()) == list(range(50))


def test_batches_resume_mid_epoch_matches_straight():
    split = open_dataset("synthetic", None, "train", channels=1, image_size=4, synthetic_size=30)
    batches = Batches(split, 4, seed=5, device=torch.device("cpu"), channels=1, size=4)
    assert batches.per_epoch == 7
    it = batches.iterate(0, 0)
    straight = [next(it)[1] for _ in range(12)]
    it = batches.iterate(1, 2)  # micro-batch 9 = epoch 1, position 2
    resumed = [next(it)[1] for _ in range(3)]
    for a, b in zip(straight[9:], resumed):
        assert torch.equal(a, b)


def test_streamed_files_equal_in_memory(tmp_path):
    make_folder(tmp_path, per_class=4)
    split = open_split(tmp_path, "train", channels=3, val_fraction=0.25)
    from vitkit.data import load_into_memory

    memory = load_into_memory(split, 3, 8)
    a = Batches(split, 2, seed=0, device=torch.device("cpu"), channels=3, size=8).iterate(0, 0)
    b = Batches(memory, 2, seed=0, device=torch.device("cpu"), channels=3, size=8).iterate(0, 0)
    for _ in range(4):
        (xa, ya), (xb, yb) = next(a), next(b)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert xa.dtype == torch.uint8 and xa.shape == (2, 3, 8, 8)
    np.testing.assert_array_equal(memory.labels.numpy(), split.labels.numpy())
