"""data.label_column: a list's column of the labels where its header's names do not tell it (HAM10000's
`lesion_id,image_id,dx,...`), and HAM10000's folder, whose two image folders would read as two classes."""

import csv
import io
import json
import struct
import tarfile

import numpy as np
import pytest
from PIL import Image

from vitkit.data.sources import open_split
from vitkit.data.sources.lists import Labelling
from vitkit.data.split import grouped_split
from vitkit.errors import DataError
from vitkit.train.finetune_setup import checkpoint_data

DX = ("nv", "mel", "bkl")


def ham10000(root, n=18):
    """HAM10000's layout: HAM10000_metadata.csv (lesion_id,image_id,dx,...) beside HAM10000_images_part_1/ and
    _part_2/, which hold the images named by their ids."""
    ids = [f"ISIC_{24306 + i:07d}" for i in range(n)]
    for part, chunk in ((1, ids[: n // 2]), (2, ids[n // 2 :])):
        folder = root / f"HAM10000_images_part_{part}"
        folder.mkdir(parents=True)
        for i, name in enumerate(chunk):
            Image.new("RGB", (12, 9), (40 * i % 255, 80, 120)).save(folder / f"{name}.jpg")
    with open(root / "HAM10000_metadata.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["lesion_id", "image_id", "dx", "dx_type", "age", "sex"])
        writer.writerows([[f"HAM_{i // 2:07d}", d, DX[i % 3], "histo", 45.0, "male"] for i, d in enumerate(ids)])
    return root / "HAM10000_metadata.csv", ids


def test_label_column_names_the_column_of_the_labels(tmp_path):
    listed, ids = ham10000(tmp_path)
    split = open_split(listed, "train", channels=3, val_fraction=0.0, labelling=Labelling(label_column="DX"))
    assert split.class_names == sorted(DX)
    assert [split.class_names[i] for i in split.labels] == [DX[i % 3] for i in range(len(ids))]
    assert [p.stem for p in split.paths] == ids
    assert split.read_as.startswith("HAM10000_metadata.csv: 'image_id' the image, 'dx' its label (data.label_column)")
    # without the key, the question names the key
    with pytest.raises(DataError, match=r"is the label\? name it with data.label_column=COLUMN"):
        open_split(listed, "train", channels=3, val_fraction=0.0)


def test_a_column_the_list_lacks_or_its_image_column_is_one_error_naming_its_columns(tmp_path):
    listed, _ = ham10000(tmp_path)
    with pytest.raises(DataError, match=r"metadata.csv:1: no column 'diagnosis' \(data.label_column\); its names: "):
        open_split(listed, "train", channels=3, val_fraction=0.0, labelling=Labelling(label_column="diagnosis"))
    with pytest.raises(DataError, match=r"data.label_column=image_id names its image column"):
        open_split(listed, "train", channels=3, val_fraction=0.0, labelling=Labelling(label_column="image_id"))


def test_class_folders_that_a_list_beside_them_names_are_said_with_how_to_read_the_list(tmp_path):
    """HAM10000's folder read as a folder: its two image folders are two classes, which is said, with the command
    that reads the metadata instead; the key given with the folder names the list to give."""
    listed, _ = ham10000(tmp_path)
    with pytest.warns(UserWarning) as said:
        split = open_split(tmp_path, "train", channels=3, val_fraction=0.0)
    assert split.class_names == ["HAM10000_images_part_1", "HAM10000_images_part_2"]
    assert [str(w.message) for w in said] == [
        f"{tmp_path}: its 2 folders (HAM10000_images_part_1, HAM10000_images_part_2) are read as the classes, and "
        "HAM10000_metadata.csv beside them names their images (lesion_id, image_id, dx, dx_type, age, sex); to label "
        f"them by it, --data {listed} data.label_column=COLUMN"
    ]
    with pytest.raises(DataError, match=rf"is class folders; give the list as the data \(--data {listed}\)"):
        open_split(tmp_path, "train", channels=3, val_fraction=0.0, labelling=Labelling(label_column="dx"))


def test_class_folders_without_a_list_naming_their_images_are_read_without_a_word(tmp_path, recwarn):
    for name in ("cat", "dog"):
        (tmp_path / name).mkdir()
        Image.new("RGB", (8, 8)).save(tmp_path / name / "a.png")
    (tmp_path / "notes.csv").write_text("path,label\nelsewhere/b.png,cat\n")
    assert open_split(tmp_path, "train", channels=3, val_fraction=0.0).class_names == ["cat", "dog"]
    assert not [w for w in recwarn if "beside them names" in str(w.message)]


def test_a_labels_column_named_by_the_key_holds_sets_where_a_cell_joins_labels(tmp_path):
    """ChestX-ray14's `Image Index,Finding Labels` ("Effusion|Mass"); a JSONL key whose values are lists."""
    folder = tmp_path / "images"
    folder.mkdir()
    findings = ["Effusion|Mass", "No Finding", "Mass", "Effusion"]
    for i in range(4):
        Image.new("RGB", (8, 8)).save(folder / f"{i:08d}_000.png")
    with open(tmp_path / "entries.csv", "w", newline="") as f:
        csv.writer(f).writerows(
            [["image", "Finding Labels", "Patient Age"]]
            + [[f"images/{i:08d}_000.png", findings[i], 50] for i in range(4)]
        )
    split = open_split(
        tmp_path / "entries.csv",
        "train",
        channels=3,
        val_fraction=0.0,
        labelling=Labelling(label_column="finding labels"),
    )
    assert split.class_names == ["Effusion", "Mass", "No Finding"]
    assert split.labels.tolist() == [[1, 1, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0]]
    lines = [json.dumps({"file_name": f"images/{i:08d}_000.png", "findings": findings[i].split("|")}) for i in range(4)]
    (tmp_path / "entries.jsonl").write_text("\n".join(lines) + "\n")
    split = open_split(
        tmp_path / "entries.jsonl", "train", channels=3, val_fraction=0.0, labelling=Labelling(label_column="findings")
    )
    assert split.labels.tolist() == [[1, 1, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0]]


def test_lists_by_split_read_the_named_column_in_each(tmp_path):
    listed, ids = ham10000(tmp_path / "ham")
    rows = list(csv.reader(listed.read_text().splitlines()))
    for name, part in (("train", rows[1:13]), ("val", rows[13:])):
        with open(tmp_path / "ham" / f"{name}.csv", "w", newline="") as f:
            csv.writer(f).writerows([rows[0], *part])
    listed.unlink()
    val = open_split(tmp_path / "ham", "val", channels=3, labelling=Labelling(label_column="dx"))
    assert len(val) == len(ids) - 12 and val.class_names == sorted(DX)


def test_data_labelled_its_own_way_refuses_the_key(tmp_path):
    for name, array in (
        ("train-images-idx3-ubyte", np.zeros((4, 8, 8), np.uint8)),
        ("train-labels-idx1-ubyte", np.arange(4, dtype=np.uint8)),
    ):
        header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
        (tmp_path / name).write_bytes(header + array.tobytes())
    with pytest.raises(DataError, match=r"data.label_column=dx names a list's column, but this data is IDX files"):
        open_split(tmp_path, "train", channels=1, labelling=Labelling(label_column="dx"))


def test_a_run_on_the_key_records_it_and_eval_reads_the_list_so_again(tmp_path, vitkit_cmd, tiny_run):
    listed, _ = ham10000(tmp_path / "ham", n=24)
    out = tmp_path / "run"
    args = [*tiny_run, "data.name=auto", "model.in_chans=3", "train.steps=2", "data.label_column=dx"]
    args += ["data.group_column=lesion_id", "data.val_fraction=0.25"]
    done = vitkit_cmd("train", "--data", listed, "--out", out, *args)
    assert done.returncode == 0, done.stderr
    assert "'dx' its label (data.label_column)" in done.stdout
    scored = vitkit_cmd("eval", out, "--split", "val", "--json", "--threads", "1")
    assert scored.returncode == 0, scored.stderr
    result = json.loads(scored.stdout.strip().splitlines()[-1])
    assert result["n"] == 6 and result["split"] == "val"
    path, cut = checkpoint_data(str(out), [])
    assert path == str(listed) and (cut["data.label_column"], cut["data.group_column"]) == ("dx", "lesion_id")


def test_a_parquet_file_reads_the_class_label_column_the_key_names(tmp_path):
    """CIFAR-100 as Hugging Face writes it: img, fine_label, coarse_label (both ClassLabel); the first by default."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    fine, coarse = ["apple", "bee", "oak"], ["fruit", "insect", "tree"]
    features = {
        "img": {"_type": "Image"},
        "fine_label": {"names": fine, "_type": "ClassLabel"},
        "coarse_label": {"names": coarse, "_type": "ClassLabel"},
    }
    images = []
    for i in range(6):
        buffer = io.BytesIO()
        Image.new("RGB", (8, 8), (40 * i, 0, 0)).save(buffer, "PNG")
        images.append({"bytes": buffer.getvalue(), "path": f"{i}.png"})
    table = pa.table(
        {"img": images, "fine_label": [i % 3 for i in range(6)], "coarse_label": [2 - i % 3 for i in range(6)]}
    )
    table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    pq.write_table(table, tmp_path / "train-00000-of-00001.parquet")
    assert open_split(tmp_path, "train", channels=3, val_fraction=0.0).class_names == fine
    split = open_split(
        tmp_path, "train", channels=3, val_fraction=0.0, labelling=Labelling(label_column="Coarse_Label")
    )
    assert split.class_names == coarse and split.labels.tolist() == [2 - i % 3 for i in range(6)]
    with pytest.raises(
        DataError,
        match=r"no column 'superclass' beside the images \(data.label_column\); its columns: img, fine_label, coarse_label",
    ):
        open_split(tmp_path, "train", channels=3, val_fraction=0.0, labelling=Labelling(label_column="superclass"))


def test_tar_shards_refuse_the_key(tmp_path):
    with tarfile.open(tmp_path / "train-000.tar", "w") as tar:
        for name, data in (("a.jpg", b"x"), ("a.cls", b"0")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(DataError, match=r"names a list's column, but this data is tar shards"):
        open_split(tmp_path, "train", channels=3, labelling=Labelling(label_column="dx"))


def test_a_group_column_holds_out_whole_groups_and_a_cut_by_image_that_splits_them_is_warned_of(tmp_path):
    """HAM10000's lesion_id: images of one lesion in train and val score val on near-copies of training images."""
    listed, _ = ham10000(tmp_path, n=40)
    lesions = {row[1]: row[0] for row in csv.reader(listed.read_text().splitlines()[1:])}
    with pytest.warns(
        UserWarning,
        match=r"(\d+) of the 4 held-out val images share their lesion_id with a training image .*; data.group_column=lesion_id holds out whole groups",
    ):
        open_split(listed, "val", channels=3, val_fraction=0.1, labelling=Labelling(label_column="dx"))
    cut = {}
    for split in ("train", "val"):
        cut[split] = open_split(
            listed,
            split,
            channels=3,
            val_fraction=0.25,
            labelling=Labelling(label_column="dx", group_column="LESION_ID"),
        )
    train, val = ({lesions[p.stem] for p in cut[s].paths} for s in ("train", "val"))
    assert train and val and not train & val and len(cut["train"]) + len(cut["val"]) == 40
    assert cut["val"].selection == "0.25 held out by class, whole lesion_id groups (seed 0)"
    assert cut["train"].read_as.endswith("; 20 'lesion_id' groups (data.group_column)")
    with pytest.raises(DataError, match=r"metadata.csv:1: no column 'patient' \(data.group_column\)"):
        open_split(listed, "train", channels=3, labelling=Labelling(label_column="dx", group_column="patient"))


def test_grouped_split_keeps_groups_whole_and_each_seed_cuts_the_same(tmp_path):
    groups = np.array([f"g{i // 3}" for i in range(60)])
    strata = np.array([i // 3 % 2 for i in range(60)])
    train, val = grouped_split(groups, strata, 0.2, seed=1)
    assert not set(groups[train]) & set(groups[val]) and sorted([*train, *val]) == list(range(60))
    assert len(val) == 12 and np.bincount(strata[val]).tolist() == [6, 6]
    assert [a.tolist() for a in grouped_split(groups, strata, 0.2, seed=1)] == [train.tolist(), val.tolist()]
    assert grouped_split(groups, None, 0.2, seed=2)[1].tolist() != val.tolist()


def test_a_jsonl_list_groups_by_its_key_and_a_group_an_image_says_nothing(tmp_path, recwarn):
    folder = tmp_path / "img"
    folder.mkdir()
    for i in range(12):
        Image.new("RGB", (8, 8), (20 * i, 0, 0)).save(folder / f"{i}.png")
    rows = [{"file_name": f"img/{i}.png", "label": "ab"[i % 2], "patient_id": i // 4} for i in range(12)]
    (tmp_path / "list.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    val = open_split(
        tmp_path / "list.jsonl", "val", channels=3, val_fraction=0.34, labelling=Labelling(group_column="patient_id")
    )
    assert len({int(p.stem) // 4 for p in val.paths}) == len(val) // 4 and len(val) % 4 == 0
    rows = [{**r, "patient_id": i} for i, r in enumerate(rows)]
    (tmp_path / "list.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    open_split(tmp_path / "list.jsonl", "val", channels=3, val_fraction=0.34)
    assert not [w for w in recwarn if "group_column" in str(w.message)]


def test_a_list_s_own_val_rows_or_val_list_sharing_a_patient_with_train_is_warned_of(tmp_path):
    """ChestX-ray14's Patient ID: a split column or per-split lists that put one patient in train and val."""
    (tmp_path / "img").mkdir()
    rows = []
    for i in range(8):
        Image.new("RGB", (8, 8), (30 * i, 0, 0)).save(tmp_path / "img" / f"{i}.png")
        rows.append([f"img/{i}.png", "ab"[i % 2], i // 2, "val" if i in (3, 6) else "train"])
    with open(tmp_path / "all.csv", "w", newline="") as f:
        csv.writer(f).writerows([["path", "label", "Patient ID", "split"], *rows])
    with pytest.warns(
        UserWarning,
        match=r"all.csv: 2 of the 2 val or test images share their Patient ID with a training image .*; mark each Patient ID's images with one split",
    ):
        open_split(tmp_path / "all.csv", "val", channels=3)
    (tmp_path / "lists").mkdir()
    for name, part in (("train", [r for r in rows if r[3] == "train"]), ("val", [r for r in rows if r[3] == "val"])):
        with open(tmp_path / "lists" / f"{name}.csv", "w", newline="") as f:
            csv.writer(f).writerows([["path", "label", "patient_id"], *[[f"../{r[0]}", r[1], r[2]] for r in part]])
    with pytest.warns(
        UserWarning,
        match=r"val.csv: 2 of the 2 val or test images share their patient_id .*; move each patient_id's images into one list",
    ):
        open_split(tmp_path / "lists", "val", channels=3)
