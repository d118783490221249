"""A list with a split column (split/subset: train, val, test; fastai's is_valid) is a dataset with those splits: each
split its own rows, never trained on where they are val or test."""

import json

import pytest
from PIL import Image

from vitkit.data.sources import available_splits, data_root, is_flat, open_split
from vitkit.data.sources.lists import read_list
from vitkit.errors import DataError


def images(root, n):
    (root / "images").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.new("RGB", (10, 12), (20 * i % 255, 5, 9)).save(root / "images" / f"{i}.png")


@pytest.mark.parametrize(
    "name, header, mark",
    [
        ("list.csv", "path,label,split", lambda i: ("train", "validation", "test", "train")[i % 4]),
        # fastai's: True marks a validation image
        ("list.csv", "fname,label,is_valid", lambda i: ("False", "True", None, "False")[i % 4]),
        ("list.jsonl", None, lambda i: ("train", "val", "test", "train")[i % 4]),
    ],
)
def test_each_split_is_its_own_rows(tmp_path, name, header, mark):
    images(tmp_path, 16)
    labels = ["cat" if i % 2 else "dog" for i in range(16)]
    kept = [i for i in range(16) if mark(i) is not None]
    if header:
        lines = [f"images/{i}.png,{labels[i]},{mark(i)}" for i in kept]
        (tmp_path / name).write_text(header + "\n" + "\n".join(lines) + "\n")
    else:
        rows = [{"path": f"images/{i}.png", "label": labels[i], "split": mark(i)} for i in kept]
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    listed = tmp_path / name
    want = {"train": [i for i in kept if i % 4 in (0, 3)], "val": [i for i in kept if i % 4 == 1]}
    if header is None or "split" in header:
        want["test"] = [i for i in kept if i % 4 == 2]
    assert available_splits(listed, 0.1) == list(want) and not is_flat(listed)
    for split, rows in want.items():
        part = open_split(listed, split, channels=3)
        assert [p.name for p in part.paths] == [f"{i}.png" for i in rows], split
        assert [part.class_names[c] for c in part.labels] == [labels[i] for i in rows]
        assert part.selection == f"the {split} rows of its split column"


def test_without_val_rows_val_is_held_out_of_the_train_rows_and_test_stays_apart(tmp_path):
    images(tmp_path, 20)
    lines = [f"images/{i}.png,{('a', 'b')[i % 2]},{'test' if i >= 16 else 'train'}" for i in range(20)]
    (tmp_path / "list.csv").write_text("path,label,split\n" + "\n".join(lines) + "\n")
    train, val, test = (
        open_split(tmp_path / "list.csv", s, channels=3, val_fraction=0.25) for s in ("train", "val", "test")
    )
    assert len(train) + len(val) == 16 and not set(train.paths) & set(val.paths)
    assert {p.name for p in test.paths} == {f"{i}.png" for i in range(16, 20)}
    assert "held out" in val.selection and "of the train rows of its split column" in val.selection


def test_a_folder_holding_a_list_with_a_split_column_reads_its_splits(tmp_path):
    images(tmp_path, 8)
    lines = [f"images/{i}.png,{('a', 'b')[i % 2]},{('train', 'val')[i >= 6]}" for i in range(8)]
    (tmp_path / "data.csv").write_text("path,label,split\n" + "\n".join(lines) + "\n")
    assert data_root(tmp_path) == tmp_path / "data.csv"
    assert len(open_split(tmp_path, "val", channels=3)) == 2


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "path,label,split\nimages/0.png,a,train\nimages/1.png,b,holdout\n",
            r"list.csv:3: split 'holdout': expected train, val",
        ),
        ("path,label,is_valid\nimages/0.png,a,maybe\n", r"list.csv:2: is_valid 'maybe': expected true or false"),
        ("path,label,fold\nimages/0.png,a,3\n", r"list.csv: 'fold': a fold column names no split"),
        ("path,label,split\nimages/0.png,a,val\n", r"its split column names no training image"),
        ("path,label,split\nimages/0.png,a,train\nimages/0.png,a,val\n", r"list.csv:3: .*0.png is listed again"),
    ],
)
def test_split_columns_it_cannot_read_are_one_error(tmp_path, text, message):
    images(tmp_path, 2)
    (tmp_path / "list.csv").write_text(text)
    with pytest.raises(DataError, match=message):
        open_split(tmp_path / "list.csv", "val", channels=3)


def test_a_list_with_a_split_column_read_whole_is_refused(tmp_path):
    """Read as one set (a folder's metadata list), its val and test rows would be trained on."""
    images(tmp_path, 2)
    (tmp_path / "list.csv").write_text("path,label,split\nimages/0.png,a,train\nimages/1.png,b,val\n")
    with pytest.raises(DataError, match=r"list.csv: has a split column; give the list itself as the data"):
        read_list(tmp_path / "list.csv")


def test_fastai_s_labels_column_of_one_label_an_image_is_single_label(tmp_path):
    """fastai names its label column `labels` whatever the task: one label each is a class each; one image with two
    makes the whole list multi-label."""
    images(tmp_path, 8)
    rows = [f"images/{i}.png,{('cat', 'dog')[i % 2]},{i >= 6}" for i in range(8)]
    (tmp_path / "single.csv").write_text("fname,labels,is_valid\n" + "\n".join(rows) + "\n")
    (tmp_path / "several.csv").write_text(
        "fname,labels,is_valid\n" + "\n".join(rows).replace(",cat,", ",cat dog,", 1) + "\n"
    )
    (tmp_path / "alone.csv").write_text("fname,labels\n" + "\n".join(r.rsplit(",", 1)[0] for r in rows) + "\n")
    single, several = (open_split(tmp_path / f"{n}.csv", "val", channels=3) for n in ("single", "several"))
    assert not single.multi_label and [single.class_names[i] for i in single.labels] == ["cat", "dog"]
    assert "its labels column holds one label an image: single-label" in single.read_as
    assert several.multi_label and several.labels.tolist() == [[1, 0], [0, 1]]
    assert not open_split(tmp_path / "alone.csv", "train", channels=3, val_fraction=0.25).multi_label
