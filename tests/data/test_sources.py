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


def test_train_images_are_nested_seeded_subsets_of_the_training_part_only(tmp_path):
    """data.train_images: the first N of one seeded order of the training split (after the val hold-out), so a smaller N
    lies inside a larger one, no held-out image is ever among them, and the split says which images they are."""
    from vitkit.data import DataSpec

    make_folder(tmp_path, per_class=20)
    spec = DataSpec(path=str(tmp_path), val_fraction=0.25, split_seed=3)
    subsets = {
        n: DataSpec(**{**spec.__dict__, "train_images": n}).open("train", channels=3, image_size=8) for n in (5, 12, 30)
    }
    paths = {n: set(map(str, split.paths)) for n, split in subsets.items()}
    assert {n: len(p) for n, p in paths.items()} == {5: 5, 12: 12, 30: 30}
    assert paths[5] < paths[12] < paths[30] == set(map(str, spec.open("train", channels=3, image_size=8).paths))
    held = set(map(str, DataSpec(**{**spec.__dict__, "train_images": 5}).open("val", channels=3, image_size=8).paths))
    assert len(held) == 10 and not held & paths[30]
    assert subsets[12].selection == "first 12 of a seeded order (seed 3) of all but the 0.25 held out by class (seed 3)"
    assert [str(p) for p in subsets[12].paths] == sorted(map(str, subsets[12].paths))  # in the split's own order
    other_seed = DataSpec(**{**spec.__dict__, "train_images": 12, "split_seed": 4}).open(
        "train", channels=3, image_size=8
    )
    assert set(map(str, other_seed.paths)) != paths[12]
    with pytest.raises(
        DataError, match="data.train_images: 31 is more than the training split holds .*give at most 30"
    ):
        DataSpec(**{**spec.__dict__, "train_images": 31}).open("train", channels=3, image_size=8)


def test_a_folder_of_lists_by_split_reads_each_split_from_its_own_list(tmp_path):
    """train.csv / val.jsonl / test.csv beside the images: each split its list, val and test labelled by train's class
    names (val here lacks 'bird' and lists 'dog' first), a class train lacks is one error, no val list holds val out."""
    from vitkit.data import DataSpec
    from vitkit.data.summary import data_format

    make_folder(tmp_path / "images", classes=("bird", "cat", "dog"), per_class=4)
    rows = [(f"images/{c}/{i}.png", c) for c in ("bird", "cat", "dog") for i in range(3)]
    (tmp_path / "train.csv").write_text("file_name,label\n" + "".join(f"{p},{c}\n" for p, c in rows))
    (tmp_path / "val.jsonl").write_text(
        "".join(json.dumps({"path": f"images/{c}/3.png", "label": c}) + "\n" for c in ("dog", "cat"))
    )
    spec = DataSpec(path=str(tmp_path))
    train, val = (spec.open(s, channels=3, image_size=8) for s in ("train", "val"))
    assert train.class_names == val.class_names == ["bird", "cat", "dog"] and len(train) == 9
    assert val.labels.tolist() == [2, 1] and [p.parent.name for p in val.paths] == ["dog", "cat"]
    assert data_format(tmp_path) == "lists by split (train.csv, val.jsonl)"
    with pytest.raises(DataError, match=r"has no 'test' split \(it has train, val\)"):
        spec.open("test", channels=3, image_size=8)
    (tmp_path / "test.csv").write_text("images/cat/3.png,cat\nimages/bird/3.png,emu\n")
    with pytest.raises(DataError, match=r"test.csv: class 'emu' is not one of the 3 classes of .*train.csv"):
        spec.open("test", channels=3, image_size=8)
    (tmp_path / "val.jsonl").unlink()  # no val list: val is held out of train, as for one list
    held = DataSpec(path=str(tmp_path), val_fraction=0.25).open("val", channels=3, image_size=8)
    assert (
        len(held) == 2
        and held.source == str(tmp_path / "train.csv")
        and held.selection == "0.25 held out by class (seed 0)"
    )
    (tmp_path / "train.jsonl").write_text("")
    with pytest.raises(DataError, match="train.csv and train.jsonl both list the train split"):
        spec.open("train", channels=3, image_size=8)


@pytest.mark.parametrize(
    "train, val", [("Train", "Val"), ("train", "validation"), ("TRAIN", "Validation"), ("train", "valid")]
)
def test_split_folders_are_found_in_any_case_and_by_hugging_face_s_validation_name(tmp_path, train, val):
    """Train/ and Val/ were read as two classes named "Train" and "Val" (exit 0, a 2-class model); a validation/ folder
    was ignored, and 10% of train/ held out in its place."""
    make_folder(tmp_path / train, per_class=4)
    make_folder(tmp_path / val, per_class=2)
    trained, held = (open_split(tmp_path, s, channels=3) for s in ("train", "val"))
    assert trained.class_names == held.class_names == ["cat", "dog"]
    assert (len(trained), trained.source, trained.selection) == (8, str(tmp_path / train), "all")
    assert (len(held), held.source, held.selection) == (4, str(tmp_path / val), "all")
    make_folder(tmp_path / "val" if val != "val" else tmp_path / "validation", per_class=1)
    with pytest.raises(DataError, match=r"are both the val split; keep one"):
        open_split(tmp_path, "val", channels=3)


def test_an_image_listed_twice_or_in_both_train_and_val_lists_is_one_error(tmp_path):
    """Both were read as given: a val list sharing images with train.csv, and inspect then said of them "none of them in
    this model's training data"; an image listed twice (or with two labels) could fall on both sides of a held-out cut."""
    from vitkit.data import DataSpec

    make_folder(tmp_path / "images", classes=("cat", "dog"), per_class=4)
    rows = [f"images/{c}/{i}.png,{c}\n" for c in ("cat", "dog") for i in range(3)]
    (tmp_path / "train.csv").write_text("path,label\n" + "".join(rows))
    (tmp_path / "val.csv").write_text(
        "path,label\nimages/cat/3.png,cat\nimages/dog/3.png,dog\n./images/dog/1.png,dog\n"
    )
    spec = DataSpec(path=str(tmp_path))
    assert len(spec.open("train", channels=3, image_size=8)) == 6
    with pytest.raises(
        DataError, match=r"val.csv: 1 of its 3 images is also in train.csv \(e.g. .*dog/1.png\); the val split must"
    ):
        spec.open("val", channels=3, image_size=8)
    (tmp_path / "val.csv").write_text("path,label\nimages/cat/3.png,cat\nimages/dog/3.png,dog\n")
    assert len(spec.open("val", channels=3, image_size=8)) == 2
    (tmp_path / "train.csv").write_text("path,label\n" + "".join(rows) + "images/cat/../cat/0.png,dog\n")
    with pytest.raises(
        DataError, match=r"train.csv:8: .*cat/0.png is listed again \(first on line 2\); list each image once"
    ):
        spec.open("train", channels=3, image_size=8)


def test_split_folders_labelled_by_a_metadata_list_as_hugging_face_s_imagefolder_writes_them(tmp_path):
    """train/ and val/ each hold their images and a metadata.csv / metadata.jsonl (file_name,label): labelled by it, val by
    train's class names; before, the images of each folder were one class, "unlabeled"."""
    from vitkit.data import DataSpec
    from vitkit.data.summary import data_format

    for split, n in (("train", 6), ("val", 2)):
        (tmp_path / split).mkdir()
        for i in range(n):
            Image.new("RGB", (12, 10), (40 * (i % 3), i, 0)).save(tmp_path / split / f"{i}.png")
    (tmp_path / "train" / "metadata.csv").write_text(
        "file_name,label\n" + "".join(f"{i}.png,{'abc'[i % 3]}\n" for i in range(6))
    )
    (tmp_path / "val" / "metadata.jsonl").write_text(
        '{"file_name": "0.png", "label": "c"}\n{"file_name": "1.png", "label": "b"}\n'
    )
    spec = DataSpec(path=str(tmp_path))
    train, val = (spec.open(split, channels=3, image_size=8) for split in ("train", "val"))
    assert train.class_names == val.class_names == ["a", "b", "c"] and train.labels.tolist() == [0, 1, 2, 0, 1, 2]
    assert val.labels.tolist() == [2, 1] and val.source == str(tmp_path / "val" / "metadata.jsonl")
    assert data_format(tmp_path) == "image folder (labels in metadata.csv, metadata.jsonl)"
    (tmp_path / "val" / "metadata.jsonl").write_text('{"file_name": "0.png", "label": "zebra"}\n')
    with pytest.raises(DataError, match=r"metadata.jsonl: class 'zebra' is not one of the 3 classes of .*train"):
        spec.open("val", channels=3, image_size=8)
    (tmp_path / "val" / "metadata.csv").write_text("file_name,label\n0.png,a\n")
    with pytest.raises(DataError, match="metadata.csv and metadata.jsonl both label its images; keep one"):
        spec.open("val", channels=3, image_size=8)
    for name in ("metadata.csv", "metadata.jsonl"):
        (tmp_path / "val" / name).unlink()
    with pytest.raises(
        DataError, match=r"val: images without class folders, where .*train has classes a, b, c; .*metadata.csv"
    ):
        spec.open("val", channels=3, image_size=8)  # before: a class "unlabeled" that train lacks
    (tmp_path / "val" / "metadata.csv").write_text(
        "file_name,label\n0.png,a\n"
    )  # 1.png unlisted: left out, and said (it was silent)
    with pytest.warns(UserWarning, match=r"val: 1 image file not in metadata.csv left out \(e.g. 1.png\)"):
        assert len(spec.open("val", channels=3, image_size=8)) == 1


def test_what_macs_and_notebooks_leave_in_a_folder_is_not_data(tmp_path):
    """A zip made on a Mac carries __MACOSX/ (it became a class) and ._x.png resource forks; Jupyter keeps copies in
    .ipynb_checkpoints/ (they became duplicate training images); upper-case suffixes are images."""
    from vitkit.data.images import find_images

    make_folder(tmp_path / "train")
    for junk in (tmp_path / "train" / "__MACOSX", tmp_path / "train" / "cat" / ".ipynb_checkpoints"):
        junk.mkdir()
        Image.new("RGB", (12, 10)).save(junk / "copy.png")
    (tmp_path / "train" / "cat" / "._0.png").write_bytes(b"\x00\x05\x16\x07 resource fork")
    Image.new("RGB", (12, 10)).save(tmp_path / "train" / "cat" / "UPPER.PNG")
    split = open_split(tmp_path, "train", channels=3, val_fraction=0.0)
    assert split.class_names == ["cat", "dog"] and len(split) == 11
    assert len(find_images([tmp_path / "train"])) == 11


def test_which_data_is_one_set_without_splits_of_its_own(tmp_path):
    """eval scores all of such data by default (--split all): a list, a folder of class folders, shards named for no split."""
    from vitkit.data.sources import is_flat, write_tar_shards

    make_folder(tmp_path / "flat")
    (tmp_path / "list.csv").write_text("flat/cat/0.png,cat\n")
    make_folder(tmp_path / "split" / "train")
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "train.csv").write_text("../flat/cat/0.png,cat\n")
    write_tar_shards(
        open_split(tmp_path / "flat", "train", channels=3, val_fraction=0.0), tmp_path / "shards", per_shard=4
    )
    write_tar_shards(
        open_split(tmp_path / "flat", "train", channels=3, val_fraction=0.0), tmp_path / "named" / "test", per_shard=4
    )
    assert [is_flat(tmp_path / p) for p in ("flat", "list.csv", "shards")] == [True, True, True]
    assert [is_flat(tmp_path / p) for p in ("split", "lists", "named")] == [False, False, False]


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
        (tmp_path / "list.jsonl").write_text(
            "".join(json.dumps({"path": p, "label": label}) + "\n" for p, label in rows)
        )
    split = open_split(tmp_path / f"list.{kind}", "train", channels=3, val_fraction=0.2)
    assert split.class_names == ["cat", "dog"] and len(split) == 8
    assert all(p.is_file() for p in split.paths)


@pytest.mark.parametrize(
    "header, line",
    [
        ("", "{p},{label},x"),
        ("path,label", "{p},{label}"),
        ("Filename,Class", "{p},{label}"),
        ("label,image,source", "{label},{p},x"),
        ("file_name,category,label", "{p},other,{label}"),  # "label" is the label column, before "category"
    ],
)
def test_a_csv_list_s_header_names_its_columns_and_never_becomes_a_class(tmp_path, header, line):
    make_folder(tmp_path / "img")
    lines = [line.format(p=f"img/{c}/{i}.png", label=c) for c in ("cat", "dog") for i in range(5)]
    (tmp_path / "list.csv").write_text("\n".join(([header] if header else []) + lines) + "\n")
    split = open_split(tmp_path / "list.csv", "train", channels=3, val_fraction=0.0)
    assert split.class_names == ["cat", "dog"] and len(split) == 10 and all(p.is_file() for p in split.paths)


@pytest.mark.parametrize(
    "name, text",
    [
        (
            "list.csv",
            "filename,label\r\n" + "".join(f"img/{c}/{i}.png,{c}\r\n" for c in ("cat", "dog") for i in range(5)),
        ),
        (
            "list.jsonl",
            "".join(
                json.dumps({"file_name": f"img/{c}/{i}.png", "label": c}) + "\r\n"
                for c in ("cat", "dog")
                for i in range(5)
            ),
        ),
    ],
)
def test_a_list_saved_with_a_byte_order_mark_and_windows_line_ends_reads_as_without(tmp_path, name, text):
    """Excel's "CSV UTF-8" starts the file with a byte-order mark, which made the header '\ufefffilename' unknown."""
    make_folder(tmp_path / "img")
    (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + text.encode())
    split = open_split(tmp_path / name, "train", channels=3, val_fraction=0.0)
    assert split.class_names == ["cat", "dog"] and len(split) == 10 and all(p.is_file() for p in split.paths)


def test_a_csv_header_of_unknown_names_is_one_error_not_a_class(tmp_path):
    make_folder(tmp_path / "img")
    (tmp_path / "list.csv").write_text("foo,bar\n" + "".join(f"img/cat/{i}.png,cat\n" for i in range(5)))
    with pytest.raises(DataError, match=r"list.csv:1: 'foo,bar' reads as a header.*'path'.*'label'"):
        open_split(tmp_path / "list.csv", "train", channels=3, val_fraction=0.0)


def test_a_jsonl_list_takes_hugging_face_s_file_name(tmp_path):
    make_folder(tmp_path / "img")
    (tmp_path / "metadata.jsonl").write_text(
        "".join(json.dumps({"file_name": f"img/dog/{i}.png", "label": "dog", "caption": "x"}) + "\n" for i in range(5))
    )
    split = open_split(tmp_path / "metadata.jsonl", "train", channels=3, val_fraction=0.0)
    assert split.class_names == ["dog"] and len(split) == 5 and all(p.is_file() for p in split.paths)


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


# -- consistency checks: each a DataError before any training ---------------------------------------
def test_an_empty_class_folder_is_an_error(tmp_path):
    make_folder(tmp_path)
    (tmp_path / "emu").mkdir()
    with pytest.raises(DataError, match=r"emu: empty class folder"):
        open_split(tmp_path, "train", channels=3, val_fraction=0.2)


def test_a_class_missing_from_val_is_an_error(tmp_path):
    make_folder(tmp_path / "train", classes=("cat", "dog", "emu"))
    make_folder(tmp_path / "val", classes=("cat", "emu"), per_class=2)
    with pytest.raises(DataError, match=r"val: class 'dog' of train/ is missing here"):
        open_split(tmp_path, "val", channels=3)
    make_folder(tmp_path / "test", classes=("cat", "dog", "emu", "fox"), per_class=1)
    with pytest.raises(DataError, match=r"test: class 'fox' is not in train/"):
        open_split(tmp_path, "test", channels=3)


def test_splits_with_other_classes_or_labels_out_of_range(tmp_path):
    from vitkit.data import check_compatible
    from vitkit.data.split import Split

    train = Split(labels=torch.tensor([0, 1, 2]), class_names=["0", "1", "2"], source="train-src")
    check_compatible(train, train.subset(np.array([0, 2])))
    fewer = Split(labels=torch.tensor([0, 1]), class_names=["0", "1"], source="val-src")
    with pytest.raises(DataError, match=r"val-src: class '2' \(label 2\) of train-src is missing here"):
        check_compatible(train, fewer)
    more = Split(labels=torch.tensor([3]), class_names=["0", "1", "2", "3"], source="val-src")
    with pytest.raises(DataError, match=r"class '3' \(label 3\) is not one of the 3 classes"):
        check_compatible(train, more)
    wild = Split(labels=torch.tensor([0, 7]), class_names=["0", "1", "2"], source="val-src")
    with pytest.raises(DataError, match=r"val-src: labels run from 0 to 7, but there are 3 classes"):
        check_compatible(train, wild)


def test_idx_test_split_with_an_extra_label_is_refused_before_training(tmp_path):
    from test_idx import write_idx  # the IDX writer of the neighbouring test module

    write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((20, 8, 8)), False)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.arange(20) % 2, False)
    write_idx(tmp_path / "t10k-images-idx3-ubyte", np.zeros((3, 8, 8)), False)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.array([0, 1, 2]), False)
    from vitkit.train import train
    from vitkit.train.config import load_run_config

    config = load_run_config(
        None,
        [
            f"data.path={tmp_path}",
            "model.name=vit_test",
            "model.in_chans=1",
            "model.image_size=8",
            "train.batch_size=4",
            "train.progress=false",
            "data.val_split=test",
        ],
    )
    with pytest.raises(DataError, match=r"class '2' \(label 2\) is not one of the 2 classes"):
        train(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_unreadable_files_come_back_from_loader_workers_as_one_line(tmp_path):
    from vitkit.data import BadFiles, eval_batches

    make_folder(tmp_path / "train", per_class=3)
    (tmp_path / "train" / "dog" / "1.png").write_bytes(b"broken")
    split = open_split(tmp_path, "train", channels=3, val_fraction=0.0)
    run = lambda bad: list(
        eval_batches(split, 4, torch.device("cpu"), channels=3, size=8, crop_pct=1.0, workers=1, bad=bad)
    )
    with pytest.raises(DataError) as caught:
        run(None)  # default: fail, naming the file
    broken = str(tmp_path / "train" / "dog" / "1.png")
    assert str(caught.value).startswith(broken) and "\n" not in str(caught.value)
    skipping = BadFiles("skip")
    assert sum(len(y) for _, y in run(skipping)) == 5 and list(skipping.files) == [broken]


def test_class_folders_named_in_nfd_are_the_classes_named_in_nfc(tmp_path):
    """macOS writes folder names decomposed (NFD): 'blü café' in val/ was not the class 'blü café' of train/ (NFC), nor of
    a checkpoint, in an error that showed two names alike."""
    import unicodedata

    name = "bü café"
    make_folder(tmp_path / "train", classes=(unicodedata.normalize("NFC", name), "bz"), per_class=3)
    make_folder(
        tmp_path / "val", classes=(unicodedata.normalize("NFD", name), "bz"), per_class=1
    )  # NFD sorts "bu" before "bz"
    train, val = (open_split(tmp_path, s, channels=3) for s in ("train", "val"))
    assert train.class_names == val.class_names == ["bz", unicodedata.normalize("NFC", name)]
    assert len(val) == 2 and all(p.is_file() for p in val.paths)


def test_images_beside_the_class_folders_are_said_to_be_left_out(tmp_path):
    """Images directly in a folder that has class folders belong to no class: they were left out unsaid (a folder of 46
    photos and one class folder of 6 read as a one-class dataset of 6)."""
    make_folder(tmp_path / "data" / "train")
    for i in range(3):
        Image.new("RGB", (8, 8)).save(tmp_path / "data" / "train" / f"loose{i}.png")
    with pytest.warns(
        UserWarning, match=r"train: 3 image files directly in it, in no class folder, left out \(e\.g\. loose0\.png\)"
    ):
        split = open_split(tmp_path / "data", "train", channels=3, val_fraction=0.0)
    assert len(split) == 10 and split.class_names == ["cat", "dog"]


def test_lists_with_several_labels_per_image_read_as_multi_hot_rows_in_csv_and_jsonl_alike(tmp_path):
    """A `labels` column gives each image a set of classes: 'cat;dog' in CSV, a JSON list in JSONL, none allowed; a val
    list lacking a class keeps each image's classes (multi-hot columns moved by name); mixing kinds is one error."""
    from vitkit.data import DataSpec, check_compatible

    make_folder(tmp_path / "images", classes=("a",), per_class=6)
    sets = [["cat", "dog"], ["dog"], [], ["bird", "cat"], ["cat"], ["dog", "bird"]]
    (tmp_path / "train.csv").write_text(
        "path,labels\n" + "".join(f"images/a/{i}.png,{';'.join(s)}\n" for i, s in enumerate(sets[:4]))
    )
    (tmp_path / "val.jsonl").write_text(
        "".join(json.dumps({"path": f"images/a/{i}.png", "labels": sets[i]}) + "\n" for i in (4, 5))
    )
    spec = DataSpec(path=str(tmp_path))
    train, val = (spec.open(s, channels=3, image_size=8) for s in ("train", "val"))
    assert train.multi_label and val.multi_label and train.class_names == val.class_names == ["bird", "cat", "dog"]
    assert train.labels.tolist() == [[0, 1, 1], [0, 0, 1], [0, 0, 0], [1, 1, 0]]
    assert val.labels.tolist() == [[0, 1, 0], [1, 0, 1]]  # val's own classes were bird, cat, dog too: same places
    assert train.class_counts().tolist() == [1, 2, 2]
    assert [train.label_text(y) for y in train.labels] == ["cat+dog", "dog", "(none)", "bird+cat"]  # as inspect titles
    check_compatible(train, val)
    (tmp_path / "val.jsonl").write_text(json.dumps({"path": "images/a/5.png", "labels": ["dog"]}) + "\n")
    only_dog = spec.open("val", channels=3, image_size=8)
    assert only_dog.class_names == train.class_names and only_dog.labels.tolist() == [[0, 0, 1]]
    (tmp_path / "val.jsonl").write_text(json.dumps({"path": "images/a/5.png", "label": "dog"}) + "\n")
    with pytest.raises(DataError, match=r"val.jsonl: one label per image, where .*train.csv gives each image a list"):
        check_compatible(train, spec.open("val", channels=3, image_size=8))
    (tmp_path / "val.jsonl").write_text(json.dumps({"path": "images/a/5.png", "labels": "dog"}) + "\n")
    with pytest.raises(DataError, match=r"val.jsonl:1: expected a list of labels"):
        spec.open("val", channels=3, image_size=8)
    (tmp_path / "val.jsonl").write_text(json.dumps({"path": "images/a/5.png", "labels": ["dog", "dog"]}) + "\n")
    with pytest.raises(DataError, match=r"val.jsonl:1: a label is given twice"):
        spec.open("val", channels=3, image_size=8)


@pytest.mark.parametrize("val_cells", [["red blue", "green"], ["red blue"]])
def test_labels_joined_by_spaces_are_read_as_sets_where_no_cell_holds_a_semicolon(tmp_path, val_cells):
    """Kaggle's multi-label lists join tags with spaces ("clear primary water"): read with ';' alone, each
    combination became a class of its own (7 'classes' from 3 tags). A val list follows train's classes, however
    few of its cells."""
    from vitkit.data import DataSpec

    make_folder(tmp_path / "images", classes=("a",), per_class=8)
    cells = ["red", "blue", "red blue", "green", "blue green", "red green blue"]
    (tmp_path / "train.csv").write_text(
        "path,labels\n" + "".join(f"images/a/{i}.png,{c}\n" for i, c in enumerate(cells))
    )
    (tmp_path / "val.csv").write_text(
        "path,labels\n" + "".join(f"images/a/{6 + i}.png,{c}\n" for i, c in enumerate(val_cells))
    )
    spec = DataSpec(path=str(tmp_path))
    train, val = (spec.open(s, channels=3, image_size=8) for s in ("train", "val"))
    assert train.class_names == val.class_names == ["blue", "green", "red"]
    assert [train.label_text(y) for y in train.labels] == [
        "red",
        "blue",
        "blue+red",
        "green",
        "blue+green",
        "blue+green+red",
    ]
    assert val.labels.tolist()[0] == [1, 0, 1]
    assert train.labels_read == "joined by spaces in the labels column of train.csv, as no cell holds ';'"


def test_multi_word_labels_stay_whole_where_they_are_no_sets_of_other_labels(tmp_path):
    """'ankle boot' is a class, not the set {ankle, boot}; where a cell holds ';', ';' alone joins labels."""
    from vitkit.data import DataSpec

    make_folder(tmp_path / "images", classes=("a",), per_class=6)
    for cells, names in (
        (["ankle boot", "bag", "ankle boot", "t shirt"], ["ankle boot", "bag", "t shirt"]),
        (["red blue;green", "red blue", "green"], ["green", "red blue"]),
    ):
        rows = "".join(f"images/a/{i}.png,{c}\n" for i, c in enumerate(cells))
        (tmp_path / "train.csv").write_text("path,labels\n" + rows)
        train = DataSpec(path=str(tmp_path), val_fraction=0.0).open("train", channels=3, image_size=8)
        assert train.class_names == names and train.labels_read == ""


@pytest.mark.parametrize(("mark", "said"), [("|", "'|'"), (",", "','")])
def test_labels_joined_by_a_bar_or_a_comma_are_read_as_sets(tmp_path, mark, said):
    """MovieLens joins genres with '|'; pandas writes a list joined by commas in a quoted cell: each was one class."""
    import csv

    from vitkit.data import DataSpec

    make_folder(tmp_path / "images", classes=("a",), per_class=4)
    with (tmp_path / "train.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "labels"])
        for i, tags in enumerate((["Action", "Adventure"], ["Drama"], [], ["Action", "Drama"])):
            writer.writerow([f"images/a/{i}.png", mark.join(tags)])
    train = DataSpec(path=str(tmp_path), val_fraction=0.0).open("train", channels=3, image_size=8)
    assert train.class_names == ["Action", "Adventure", "Drama"]
    assert train.labels.tolist() == [[1, 1, 0], [0, 0, 1], [0, 0, 0], [1, 0, 1]]
    assert train.labels_read == f"joined by {said} in the labels column of train.csv, as no cell holds ';'"
