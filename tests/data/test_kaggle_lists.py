"""Lists laid out as Kaggle's competitions and Roboflow's exports ship them: an id column without the file's suffix,
images in a folder beside the list, a label column of any name, one-hot class columns, the list beside folders that hold
no class folders or in each split folder."""

import csv
import json

import pytest
from PIL import Image

from vitkit.data.sources import available_splits, data_root, is_flat, open_split
from vitkit.data.sources.folder import classes_in_names
from vitkit.data.split import MissingSplit
from vitkit.data.summary import image_sizes
from vitkit.errors import DataError

CLASSES = ("beagle", "pug", "collie")


def write_images(folder, names, suffix=".jpg"):
    folder.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        Image.new("RGB", (20 + i % 3, 18), (30 * i % 255, 90, 10)).save(folder / f"{name}{suffix}")


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([header, *rows])


def dog_breeds(root, n=12):
    """Dog Breed Identification's layout: labels.csv (id,breed), train/<id>.jpg, test/ of unlabelled images."""
    ids = [f"{i:04x}e9c1" for i in range(n)]
    write_images(root / "train", ids)
    write_images(root / "test", ["t0", "t1"])
    write_csv(root / "labels.csv", ["id", "breed"], [[d, CLASSES[i % 3]] for i, d in enumerate(ids)])
    return ids


def test_an_id_column_names_files_without_their_suffix_in_a_folder_beside_the_list(tmp_path):
    ids = dog_breeds(tmp_path)
    split = open_split(tmp_path / "labels.csv", "train", channels=3, val_fraction=0.0)
    assert [p.name for p in split.paths] == [f"{d}.jpg" for d in ids]
    assert all(p.parent == tmp_path / "train" and p.is_file() for p in split.paths)
    assert split.class_names == sorted(CLASSES)
    assert [split.class_names[i] for i in split.labels] == [CLASSES[i % 3] for i in range(len(ids))]
    assert (
        split.read_as
        == "labels.csv: 'id' the image, 'breed' its label; images below train/, each file the listed name + '.jpg'"
    )


def test_a_folder_whose_folders_name_no_classes_is_read_as_the_one_list_in_it(tmp_path):
    dog_breeds(tmp_path)
    assert data_root(tmp_path) == tmp_path / "labels.csv"
    assert is_flat(tmp_path) and available_splits(tmp_path, 0.25) == ["train", "val"]
    train = open_split(tmp_path, "train", channels=3, val_fraction=0.25)
    val = open_split(tmp_path, "val", channels=3, val_fraction=0.25)
    assert train.class_names == sorted(CLASSES) and len(train) + len(val) == 12
    assert not set(train.paths) & set(val.paths)


def test_class_folders_still_win_over_a_list_beside_them(tmp_path):
    for name in ("cat", "dog"):
        write_images(tmp_path / name, ["a", "b"], ".png")
    write_csv(tmp_path / "notes.csv", ["path", "label"], [["cat/a.png", "dog"]])
    assert data_root(tmp_path) == tmp_path
    assert open_split(tmp_path, "train", channels=3, val_fraction=0.0).class_names == ["cat", "dog"]


def test_two_lists_labelling_the_images_are_one_error_naming_both(tmp_path):
    ids = dog_breeds(tmp_path)
    write_csv(tmp_path / "relabelled.csv", ["image_id", "label"], [[d, "x"] for d in ids])
    with pytest.raises(
        DataError,
        match=r"labels.csv and relabelled.csv both list its images with labels; give one as the data \(--data .*labels.csv\)",
    ):
        open_split(tmp_path, "train", channels=3)


def test_a_submission_of_probabilities_beside_the_labels_is_not_taken_for_a_list(tmp_path):
    dog_breeds(tmp_path)
    write_csv(tmp_path / "sample_submission.csv", ["id", *CLASSES], [["t0", "0.33", "0.33", "0.34"]])
    assert data_root(tmp_path) == tmp_path / "labels.csv"


@pytest.mark.parametrize("one, zero", [("1.0", "0.0"), ("1", "0")])
def test_one_hot_columns_are_the_classes(tmp_path, one, zero):
    names = [f"ISIC_{i:07d}" for i in range(9)]
    write_images(tmp_path / "Training_Input", names)
    rows = [[n] + [one if c == i % 3 else zero for c in range(3)] for i, n in enumerate(names)]
    write_csv(tmp_path / "GroundTruth.csv", ["image", "MEL", "NV", "BCC"], rows)
    split = open_split(tmp_path, "train", channels=3, val_fraction=0.0)
    assert not split.multi_label and split.class_names == ["BCC", "MEL", "NV"]
    assert [split.class_names[i] for i in split.labels] == [("MEL", "NV", "BCC")[i % 3] for i in range(9)]
    assert "one-hot columns MEL, NV, BCC" in split.read_as and "below Training_Input/" in split.read_as


def test_one_hot_rows_with_several_ones_or_none_are_sets_of_labels(tmp_path):
    write_images(tmp_path / "images", ["a", "b", "c"], ".png")
    rows = [["a.png", "1", "1", "0"], ["b.png", "0", "0", "0"], ["c.png", "0", "1", "1"]]
    write_csv(tmp_path / "train.csv", ["image_id", "healthy", "rust", "scab"], rows)
    split = open_split(tmp_path / "train.csv", "train", channels=3, val_fraction=0.0)
    assert split.multi_label and split.class_names == ["healthy", "rust", "scab"]
    assert split.labels.tolist() == [[1, 1, 0], [0, 0, 0], [0, 1, 1]]


def test_a_list_none_of_whose_images_is_found_is_one_error_before_any_image_is_read(tmp_path):
    write_images(tmp_path / "elsewhere", ["a", "b"])
    write_csv(tmp_path / "train.csv", ["path", "label"], [["x.jpg", "cat"], ["y.jpg", "dog"]])
    with pytest.raises(
        DataError,
        match=r"train.csv: none of the 2 images looked at is found \(e.g. .*x.jpg\); .*relative to its folder",
    ):
        open_split(tmp_path / "train.csv", "train", channels=3, val_fraction=0.0)


def test_a_list_whose_images_are_found_as_written_is_read_as_written(tmp_path):
    write_images(tmp_path / "img", ["a", "b"])
    write_images(tmp_path / "copy", ["a", "b"])
    # b is missing as written: the list is still read as written (training skips what it cannot read)
    write_csv(tmp_path / "list.csv", ["path", "label"], [["img/a.jpg", "cat"], ["img/c.jpg", "dog"]])
    split = open_split(tmp_path / "list.csv", "train", channels=3, val_fraction=0.0)
    assert split.paths == [tmp_path / "img" / "a.jpg", tmp_path / "img" / "c.jpg"] and split.read_as == ""


def test_images_found_in_two_folders_alike_are_one_error(tmp_path):
    write_images(tmp_path / "a", ["x", "y"])
    write_images(tmp_path / "b", ["x", "y"])
    write_csv(tmp_path / "list.csv", ["id", "label"], [["x", "cat"], ["y", "dog"]])
    with pytest.raises(DataError, match=r"found both below a/ and below b/"):
        open_split(tmp_path / "list.csv", "train", channels=3, val_fraction=0.0)


def test_a_split_none_of_whose_images_reads_names_why(tmp_path):
    (tmp_path / "a").mkdir()
    for name in ("x.png", "y.png"):
        (tmp_path / "a" / name).write_bytes(b"not an image")
    split = open_split(tmp_path / "a", "train", channels=3, val_fraction=0.0)
    with pytest.raises(DataError, match=r"none of the 2 images looked at could be read \(.*x.png: not an image"):
        image_sizes(split)


def test_a_test_list_without_labels_is_no_test_split_and_says_so(tmp_path):
    """APTOS' layout: train.csv (id_code,diagnosis), test.csv (id_code only), train_images/ and test_images/."""
    ids = [f"{i:06x}" for i in range(8)]
    write_images(tmp_path / "train_images", ids, ".png")
    write_images(tmp_path / "test_images", ["aa", "bb"], ".png")
    write_csv(tmp_path / "train.csv", ["id_code", "diagnosis"], [[d, i % 2] for i, d in enumerate(ids)])
    write_csv(tmp_path / "test.csv", ["id_code"], [["aa"], ["bb"]])
    assert len(open_split(tmp_path, "train", channels=3, val_fraction=0.25)) == 6
    with pytest.raises(MissingSplit, match=r"no labelled 'test' split \(test.csv names images without labels") as err:
        open_split(tmp_path, "test", channels=3, val_fraction=0.25)
    assert err.value.available == ["train", "val"]
    with pytest.raises(DataError, match=r"test.csv: names images \('id_code'\) without labels"):
        open_split(tmp_path / "test.csv", "train", channels=3)


def test_images_in_two_folders_beside_the_list_are_found_in_either(tmp_path):
    """HAM10000's layout: image ids in one list, the images in HAM10000_images_part_1/ and _part_2/."""
    ids = [f"ISIC_{i:07d}" for i in range(10)]
    write_images(tmp_path / "HAM10000_images_part_1", ids[:5])
    write_images(tmp_path / "HAM10000_images_part_2", ids[5:])
    rows = [[d, ("nv", "mel")[i % 2]] for i, d in enumerate(ids)]
    write_csv(tmp_path / "labels.csv", ["image_id", "dx"], rows)
    split = open_split(tmp_path / "labels.csv", "train", channels=3, val_fraction=0.0)
    assert all(p.is_file() and p.stem == d for p, d in zip(split.paths, ids))
    assert "below HAM10000_images_part_1/ and HAM10000_images_part_2/" in split.read_as


def test_a_header_naming_the_images_and_several_other_columns_asks_which_is_the_label(tmp_path):
    write_images(tmp_path / "img", ["a"])
    write_csv(tmp_path / "meta.csv", ["lesion_id", "image_id", "dx", "age"], [["L1", "img/a.jpg", "nv", "40"]])
    with pytest.raises(
        DataError,
        match=r"meta.csv:1: 'image_id' names the images; which of the other 3 columns \(lesion_id, dx, age\) is the label\?",
    ):
        open_split(tmp_path / "meta.csv", "train", channels=3, val_fraction=0.0)


def test_split_folders_each_labelled_by_a_list_in_it_as_roboflow_exports_them(tmp_path):
    """Roboflow's multi-label export: train/, valid/, test/, each with its images and a _classes.csv of one-hot columns
    whose names follow a comma and a space."""
    for split, n in (("train", 6), ("valid", 3), ("test", 3)):
        names = [f"img_{i}_jpg.rf.{split}.jpg" for i in range(n)]
        write_images(tmp_path / split, [name[:-4] for name in names])
        lines = ["filename, cat, dog"] + [
            f"{name}, {int(i % 2 == 0)}, {int(i % 2 == 1)}" for i, name in enumerate(names)
        ]
        (tmp_path / split / "_classes.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "README.roboflow.txt").write_text("exported\n")
    assert data_root(tmp_path) == tmp_path and available_splits(tmp_path, 0.1) == ["train", "val", "test"]
    train, val = (open_split(tmp_path, s, channels=3) for s in ("train", "val"))
    assert train.class_names == ["cat", "dog"] and [train.class_names[i] for i in train.labels] == ["cat", "dog"] * 3
    assert len(val) == 3 and val.source == str(tmp_path / "valid" / "_classes.csv")
    assert "one-hot columns cat, dog" in train.read_as


def test_a_list_written_on_windows_names_its_files_with_backslashes(tmp_path):
    write_images(tmp_path / "images" / "cat", ["a", "b"])
    (tmp_path / "list.csv").write_text("path,label\r\nimages\\cat\\a.jpg,cat\r\nimages\\cat\\b.jpg,dog\r\n")
    split = open_split(tmp_path / "list.csv", "train", channels=3, val_fraction=0.0)
    assert split.paths == [tmp_path / "images" / "cat" / "a.jpg", tmp_path / "images" / "cat" / "b.jpg"]
    assert split.read_as == "list.csv: '\\' in paths read as '/'"


def test_a_caption_beside_each_image_is_no_label(tmp_path):
    """Hugging Face's imagefolder of captions (file_name,text): a column with another value on every line is no class."""
    names = [f"{i:03d}" for i in range(25)]
    write_images(tmp_path / "img", names)
    write_csv(
        tmp_path / "captions.csv", ["file_name", "text"], [[f"img/{n}.jpg", f"a photo number {n}"] for n in names]
    )
    with pytest.raises(
        DataError, match=r"'file_name' names the images, but 'text' holds another value on every line \(a caption"
    ):
        open_split(tmp_path / "captions.csv", "train", channels=3, val_fraction=0.0)


def test_images_named_by_class_without_class_folders_get_a_hint_to_read_them_so(tmp_path, vitkit_cmd):
    """Kaggle's Dogs vs. Cats: train/cat.0.jpg, train/dog.1.jpg ...: one class as a folder, and the error says how."""
    write_images(tmp_path / "dvc" / "train", [f"{('cat', 'dog')[i % 2]}.{i}" for i in range(12)])
    done = vitkit_cmd("train", "--data", tmp_path / "dvc", "--out", tmp_path / "run", "model.name=vit_test")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert (
        "their names start with 2 classes (cat, dog) and a number: data.name_pattern='^(.*)\\.\\d+\\.' reads them so"
        in done.stderr
    )
    assert classes_in_names([tmp_path / f"{i}.jpg" for i in range(5)]) == ""  # numbers are no classes
    assert classes_in_names([tmp_path / "a.1.jpg", tmp_path / "a.2.jpg"]) == ""  # one class
    assert classes_in_names([tmp_path / "cat.1.jpg", tmp_path / "dog_2.jpg"]) == ""  # one image a class
    assert classes_in_names([tmp_path / "cat_fluffy.jpg", tmp_path / "cat_tabby.jpg"]) == ""  # no number


def test_one_class_stops_a_fitted_run_before_its_recipe_is_said(tmp_path, vitkit_cmd):
    write_images(tmp_path / "loose", [f"{i}" for i in range(12)])
    done = vitkit_cmd("train", "--data", tmp_path / "loose", "--out", tmp_path / "run")
    assert done.returncode == 2 and done.stdout == "" and "one class ('unlabeled')" in done.stderr
    # unlabelled images still pre-train, and vitkit data still shows them
    assert vitkit_cmd("data", tmp_path / "loose", "--samples", "2", "--out", tmp_path / "p").returncode == 0


def test_integer_labels_take_their_names_from_a_file_beside_the_list(tmp_path):
    """Cassava's label_num_to_disease_map.json, or classes.txt as beside tar shards: label i named; a file that misses
    a label, or names two alike, names none."""
    write_images(tmp_path / "train_images", [f"{i}" for i in range(6)])
    write_csv(tmp_path / "train.csv", ["image_id", "label"], [[f"{i}.jpg", i % 3] for i in range(6)])
    names = {"0": "Cassava Bacterial Blight (CBB)", "1": "Cassava Brown Streak Disease (CBSD)", "2": "Healthy"}
    (tmp_path / "label_num_to_disease_map.json").write_text(json.dumps(names))
    split = open_split(tmp_path / "train.csv", "train", channels=3, val_fraction=0.0)
    assert [split.class_names[i] for i in split.labels] == [names[str(i % 3)] for i in range(6)]
    assert split.read_as.endswith("class names from label_num_to_disease_map.json")
    (tmp_path / "label_num_to_disease_map.json").write_text(json.dumps({"0": "a", "1": "b"}))
    (tmp_path / "classes.txt").write_text("red\ngreen\nblue\n")
    split = open_split(tmp_path / "train.csv", "train", channels=3, val_fraction=0.0)
    assert [split.class_names[i] for i in split.labels] == ["red", "green", "blue"] * 2
    (tmp_path / "classes.txt").write_text("red\nred\nblue\n")
    assert open_split(tmp_path / "train.csv", "train", channels=3, val_fraction=0.0).class_names == ["0", "1", "2"]
