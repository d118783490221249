""".txt lists of fields split at spaces, as Caffe's ImageNet lists (`n01440764/n01440764_10026.JPEG 0`) and
Oxford-IIIT Pet's annotations (`Abyssinian_100 1 1 1`, '#' comment lines, beside images/) are written."""

import pytest
from PIL import Image

from vitkit.data.sources import available_splits, open_split
from vitkit.errors import DataError

WNIDS = ("n01440764", "n01443537")


def caffe(root):
    """train.txt and val.txt beside train/<wnid>/<image> and val/<image>, labels 0 and 1."""
    train, val = [], []
    for label, wnid in enumerate(WNIDS):
        (root / "train" / wnid).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (9, 7), (90 * label, 30 * i, 0)).save(root / "train" / wnid / f"{wnid}_{i}.JPEG")
            train.append(f"{wnid}/{wnid}_{i}.JPEG {label}")
        (root / "val").mkdir(exist_ok=True)
        Image.new("RGB", (9, 7), (90 * label, 0, 9)).save(root / "val" / f"ILSVRC2012_val_{label + 1:08d}.JPEG")
        val.append(f"ILSVRC2012_val_{label + 1:08d}.JPEG   {label}")
    (root / "train.txt").write_text("\n".join(train) + "\n")
    (root / "val.txt").write_text("\n".join(val) + "\n")


def test_caffe_lists_by_split_read_their_images_below_the_split_folders(tmp_path):
    caffe(tmp_path)
    train = open_split(tmp_path / "train.txt", "train", channels=3, val_fraction=0.0)
    assert train.class_names == ["0", "1"] and train.labels.tolist() == [0, 0, 0, 1, 1, 1]
    assert all(p.is_file() for p in train.paths)
    assert train.read_as == "train.txt: fields split at spaces; images below train/"
    val = open_split(tmp_path / "val.txt", "train", channels=3, val_fraction=0.0)
    assert [p.name for p in val.paths] == ["ILSVRC2012_val_00000001.JPEG", "ILSVRC2012_val_00000002.JPEG"]


def test_pets_annotations_skip_comments_and_find_images_beside_their_folder(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "annotations").mkdir()
    lines = ["#Image CLASS-ID SPECIES BREED ID", "#ID: 1:37 Class ids"]
    for i, (breed, label) in enumerate([("Abyssinian", 1), ("Bengal", 2)] * 3):
        Image.new("RGB", (9, 7), (40 * i, 0, 0)).save(tmp_path / "images" / f"{breed}_{i}.jpg")
        lines.append(f"{breed}_{i} {label} 1 {label}")
    listed = tmp_path / "annotations" / "trainval.txt"
    listed.write_text("\n".join(lines) + "\n")
    split = open_split(listed, "train", channels=3, val_fraction=0.0)
    assert split.class_names == ["1", "2"] and split.labels.tolist() == [0, 1, 0, 1, 0, 1]
    assert [p.parent for p in split.paths] == [tmp_path / "images"] * 6
    assert split.read_as == (
        "trainval.txt: fields split at spaces, '#' lines skipped; images below ../images/, each file the listed name "
        "+ '.jpg'"
    )
    assert available_splits(listed, 0.1) == ["train", "val"]


def test_a_line_of_one_field_in_a_spaced_list_names_its_line(tmp_path):
    caffe(tmp_path)
    with open(tmp_path / "train.txt", "a") as f:
        f.write("n01440764/n01440764_0.JPEG\n")
    with pytest.raises(DataError, match=r"train.txt:7: expected 'path,label'"):
        open_split(tmp_path / "train.txt", "train", channels=3, val_fraction=0.0)


def test_a_txt_list_with_commas_is_still_a_csv_list(tmp_path):
    (tmp_path / "img").mkdir()
    for name in ("a b.png", "c.png"):
        Image.new("RGB", (8, 8)).save(tmp_path / "img" / name)
    (tmp_path / "list.txt").write_text("img/a b.png,cat\nimg/c.png,dog\n")
    split = open_split(tmp_path / "list.txt", "train", channels=3, val_fraction=0.0)
    assert [p.name for p in split.paths] == ["a b.png", "c.png"] and split.class_names == ["cat", "dog"]
