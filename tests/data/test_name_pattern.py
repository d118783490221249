"""data.name_pattern: classes in the names of images without class folders (fastai's from_name_re), as Oxford-IIIT
Pet ships them: images/Abyssinian_12.jpg, images/american_bulldog_10.jpg beside annotations/."""

import pytest
from PIL import Image

from vitkit.data.sources import open_split
from vitkit.data.sources.lists import Labelling
from vitkit.errors import DataError

BREEDS = ("Abyssinian", "american_bulldog", "american_pit_bull_terrier")
PATTERN = r"^(.*)_\d+\."


def pets(root, per_breed=4):
    """Oxford-IIIT Pet's layout: images/<Breed>_<n>.jpg and annotations/ (lists, no images)."""
    (root / "images").mkdir(parents=True)
    (root / "annotations").mkdir()
    (root / "annotations" / "list.txt").write_text("#Image CLASS-ID SPECIES BREED ID\n")
    for b, breed in enumerate(BREEDS):
        for i in range(1, per_breed + 1):
            Image.new("RGB", (10 + i, 8), (60 * b, 20 * i, 0)).save(root / "images" / f"{breed}_{i}.jpg")
    return root / "images"


def test_the_pattern_s_first_group_is_each_image_s_class(tmp_path):
    images = pets(tmp_path)
    split = open_split(images, "train", channels=3, val_fraction=0.0, labelling=Labelling(name_pattern=PATTERN))
    assert split.class_names == sorted(BREEDS)
    assert [split.class_names[i] for i in split.labels] == [p.name.rsplit("_", 1)[0] for p in split.paths]
    assert split.read_as == f"images/: 3 classes from the file names by data.name_pattern='{PATTERN}'"
    val = open_split(images, "val", channels=3, val_fraction=0.25, labelling=Labelling(name_pattern=PATTERN))
    assert len(val) == 3 and sorted(val.class_names[i] for i in val.labels) == sorted(BREEDS)  # one of each


def test_split_folders_of_loose_images_read_val_on_train_s_classes(tmp_path):
    for split, n in (("train", 3), ("val", 1)):
        (tmp_path / split).mkdir()
        for breed in BREEDS[: 3 if split == "train" else 2]:
            for i in range(n):
                Image.new("RGB", (8, 8)).save(tmp_path / split / f"{breed}_{i}.jpg")
    val = open_split(tmp_path, "val", channels=3, labelling=Labelling(name_pattern=PATTERN))
    assert val.class_names == sorted(BREEDS) and val.labels.tolist() == [0, 1]


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        (r"^(.*_\d+\.", r"data.name_pattern: '\^\(\.\*_\\d\+\\\.' is no regular expression"),
        (r"^.*_\d+\.", r"has no group; put \( \) around the class in a name"),
        (r"^([a-z_]+)_\d+\.", r"names no class in 4 of its 12 images \(e.g. Abyssinian_1.jpg\); fix the pattern"),
    ],
)
def test_a_pattern_that_is_wrong_or_misses_a_name_is_one_error(tmp_path, pattern, says):
    images = pets(tmp_path)
    with pytest.raises(DataError, match=says):
        open_split(images, "train", channels=3, labelling=Labelling(name_pattern=pattern))


def test_data_labelled_otherwise_refuses_the_pattern(tmp_path):
    for name in ("cat", "dog"):
        (tmp_path / "f" / name).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(tmp_path / "f" / name / "cat_1.jpg")
    with pytest.raises(
        DataError,
        match=r"data.name_pattern=.* names the classes in file names, but this data is class folders \(cat, dog\); drop the key",
    ):
        open_split(tmp_path / "f", "train", channels=3, labelling=Labelling(name_pattern=PATTERN))
    (tmp_path / "list.csv").write_text("path,label\nf/cat/cat_1.jpg,cat\nf/dog/cat_1.jpg,dog\n")
    with pytest.raises(DataError, match=r"but this data is a list, which labels its images; drop the key"):
        open_split(tmp_path / "list.csv", "train", channels=3, labelling=Labelling(name_pattern=PATTERN))


def test_a_folder_of_loose_images_beside_a_folder_without_images_names_the_one_to_give(tmp_path, vitkit_cmd):
    images = pets(tmp_path / "pets")
    done = vitkit_cmd("data", tmp_path / "pets")
    assert done.returncode == 2
    assert (
        f"read as class folders, but only images/ of its 2 folders holds images (annotations/ none): give {images} as "
        "the data if those are the images"
    ) in done.stderr
    said = vitkit_cmd("data", images)
    assert said.returncode == 0
    assert (
        "note     one class ('unlabeled': images without class folders): their names start with 3 classes "
        f"(Abyssinian, american_bulldog, american_pit_bull_terrier) and a number: data.name_pattern='{PATTERN}' reads "
        "them so"
    ) in said.stdout


def test_a_run_on_the_pattern_records_it_for_eval(tmp_path, vitkit_cmd, tiny_run):
    images = pets(tmp_path / "pets", per_breed=8)
    out = tmp_path / "run"
    args = [*tiny_run, "data.name=auto", "model.in_chans=3", "train.steps=2", f"data.name_pattern={PATTERN}"]
    assert vitkit_cmd("train", "--data", images, "--out", out, *args).returncode == 0
    scored = vitkit_cmd("eval", out, "--split", "val", "--threads", "1")
    assert scored.returncode == 0, scored.stderr
    assert "american_pit_bull_terrier" in scored.stdout
