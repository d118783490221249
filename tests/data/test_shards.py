"""Tar shards and Parquet files: found, labelled, split, read, and trained on with the exact resume of folders."""

import io
import json
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image

from vitkit.data import Batches
from vitkit.data.loader import block_order
from vitkit.data.sources import open_sharded, open_split, write_tar_shards
from vitkit.data.sources.folder import read_folder as _read_folder
from vitkit.data.sources.shards import expand_braces, is_sharded
from vitkit.errors import DataError
from vitkit.train import resume_config, train
from vitkit.train.config import load_run_config

CLASSES = ("cat", "dog", "emu")


def jpeg(value: int, size=(20, 14)) -> bytes:
    rng = np.random.default_rng(value)
    pixels = np.clip(rng.integers(0, 40, (size[1], size[0], 3)) + 70 * (value % 3), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def make_folder(root, per_class=8):
    for c, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            (root / name / f"{i}.jpg").write_bytes(jpeg(c + 3 * i))
    return root


def make_parquet(path, labels: list[int], images: list[bytes], row_group_size=5):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    features = {"image": {"_type": "Image"}, "label": {"names": list(CLASSES), "_type": "ClassLabel"}}
    table = pa.table(
        {
            "image": [{"bytes": b, "path": f"{i}.jpg"} for i, b in enumerate(images)],
            "label": pa.array(labels, pa.int64()),
        }
    )
    table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    pq.write_table(table, path, row_group_size=row_group_size)


def test_brace_patterns_expand_with_their_zero_padding():
    assert expand_braces("s-{000..002}.tar") == ["s-000.tar", "s-001.tar", "s-002.tar"]
    assert expand_braces("{a,b}/x-{8..10}.tar") == [
        "a/x-8.tar",
        "a/x-9.tar",
        "a/x-10.tar",
        "b/x-8.tar",
        "b/x-9.tar",
        "b/x-10.tar",
    ]


def test_a_folder_written_as_tar_shards_reads_back_the_same(tmp_path):
    folder = open_split(make_folder(tmp_path / "photos"), "train", channels=3, val_fraction=0.25)
    shards = write_tar_shards(folder, tmp_path / "shards", per_shard=7)
    assert [p.name for p in shards] == ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    pattern = str(tmp_path / "shards" / "shard-{000000..000002}.tar")
    assert is_sharded(pattern) and is_sharded(tmp_path / "shards")
    read = open_sharded(pattern, "train", val_fraction=0.0)
    assert read.class_names == list(CLASSES) and len(read) == len(folder) == 18  # classes.txt names the indices
    by_bytes = {p.read_bytes(): int(y) for p, y in zip(folder.paths, folder.labels)}
    assert {r.read(): int(y) for r, y in zip(read.paths, read.labels)} == by_bytes
    assert str(read.paths[0]).startswith(str(shards[0]) + ":")
    # classes.txt saved again by an editor that adds a byte-order mark: the first class is still "cat"
    names = tmp_path / "shards" / "classes.txt"
    names.write_bytes(b"\xef\xbb\xbf" + names.read_bytes())
    assert open_sharded(pattern, "train", val_fraction=0.0).class_names == list(CLASSES)
    # shards in split folders, classes.txt above them (where it was ignored: the classes became 0, 1, 2)
    (tmp_path / "shards" / "train").mkdir()
    for shard in shards:
        shard.rename(tmp_path / "shards" / "train" / shard.name)
    assert open_sharded(tmp_path / "shards", "train", val_fraction=0.0).class_names == list(CLASSES)


def test_parquet_files_as_hugging_face_writes_them(tmp_path):
    images = [jpeg(i) for i in range(12)]
    make_parquet(tmp_path / "train-00000-of-00001.parquet", [i % 3 for i in range(12)], images)
    make_parquet(tmp_path / "test-00000-of-00001.parquet", [2, 1, 0], images[:3])
    train_split = open_split(tmp_path, "train", channels=3, val_fraction=0.25)
    test_split = open_split(tmp_path, "test", channels=3)
    assert train_split.class_names == list(CLASSES) and len(train_split) == 9 and len(test_split) == 3
    assert test_split.labels.tolist() == [2, 1, 0] and test_split.paths[0].read() == images[0]
    assert len(open_split(tmp_path, "val", channels=3, val_fraction=0.25)) == 3  # held out of train
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "other").mkdir()
    pq.write_table(pa.table({"x": [1]}), tmp_path / "other" / "x.parquet")
    with pytest.raises(DataError, match=r"x\.parquet: no image column"):
        open_split(tmp_path / "other", "train", channels=3, val_fraction=0.5)


def _tar(path, samples: dict[str, str | None]):
    """A WebDataset tar: KEY.jpg and, unless its label is None, KEY.cls."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for i, (key, label) in enumerate(samples.items()):
            for name, data in [(f"{key}.jpg", jpeg(i))] + (
                [(f"{key}.cls", label.encode())] if label is not None else []
            ):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize(
    "labels, classes_txt, words",
    [
        # indices and names mixed with classes.txt: each read against it (they became classes "0", "1", "cat", "dog")
        (["0", "dog", "2", "cat"], True, None),
        (["0", "dog", "2", "cat"], False, "mix class indices ('0' at"),
        (["0", "1", "7", "2"], True, "label class index 7, outside 0 .. 2 the 3 classes of classes.txt"),
        (
            ["cat", "dog", "owl", "emu"],
            True,
            "label class 'owl', not one of the 3 classes of classes.txt (cat, dog, emu)",
        ),
        (
            ["cat", "dog", None, None],
            False,
            "has no .cls or .json label, where other samples have one",
        ),  # a shard without labels
    ],
)
def test_shard_labels_are_read_against_classes_txt_and_a_label_that_fits_no_class_is_named(
    tmp_path, labels, classes_txt, words
):
    """Labels that mixed indices and names, named a class classes.txt lacks, or were missing from one shard among labelled
    ones, each became a class of their own ("0" next to "cat", "owl", ""), silently, and a model trained on them."""
    _tar(tmp_path / "s" / "shard-000000.tar", {f"a{i}": label for i, label in enumerate(labels[:2])})
    _tar(tmp_path / "s" / "shard-000001.tar", {f"b{i}": label for i, label in enumerate(labels[2:])})
    if classes_txt:
        (tmp_path / "s" / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    if words is None:
        split = open_sharded(tmp_path / "s", "train", val_fraction=0.0)
        assert split.class_names == list(CLASSES) and sorted(split.labels.tolist()) == [0, 0, 1, 2]
        return
    with pytest.raises(DataError, match=r"\.tar") as err:  # the sample's shard, and what is wrong with its label
        open_sharded(tmp_path / "s", "train", val_fraction=0.0)
    assert words in str(err.value), str(err.value)


@pytest.mark.parametrize(
    "label, words",
    [
        (
            "7" * 5000,
            "class index 77777777777777777777... is over the limit of 1,000,000",
        ),  # int() refused it: a traceback
        ("1000000000", "class index 1000000000 is over the limit"),  # a list of a billion class names was made
        ("x" * 70_000, "a label of over 65,536 bytes"),
    ],
)
def test_a_label_no_dataset_can_have_is_one_error_not_a_traceback_or_a_billion_classes(
    tmp_path, under_memory_limit, label, words
):
    _tar(tmp_path / "s" / "shard-000000.tar", {"a": "0", "b": label})
    status, detail = under_memory_limit(lambda: open_sharded(tmp_path / "s", "train", val_fraction=0.0), mb=512)
    assert status == "error" and "DataError" in detail and words in detail, (status, detail)


def test_a_json_label_nested_thousands_deep_is_one_error(tmp_path):
    path = tmp_path / "s" / "shard-000000.tar"
    path.parent.mkdir()
    with tarfile.open(path, "w") as tar:
        for name, data in (("a.jpg", jpeg(0)), ("a.json", b'{"label": ' + b"[" * 20_000 + b"]" * 20_000 + b"}")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(DataError, match=r"a\.json: expected a JSON object"):
        open_sharded(tmp_path / "s", "train", val_fraction=0.0)


def test_an_unlabelled_hugging_face_test_split_leaves_the_others_usable_and_a_null_label_is_named(tmp_path):
    """Hugging Face writes an unlabelled test split with label -1: the whole dataset was refused ("labels run from -1 to
    2"), training included. A null label became a class with an empty name."""
    images = [jpeg(i) for i in range(12)]
    make_parquet(tmp_path / "train-00000-of-00001.parquet", [i % 3 for i in range(12)], images)
    make_parquet(tmp_path / "test-00000-of-00001.parquet", [-1, -1, -1], images[:3])
    train_split = open_split(tmp_path, "train", channels=3, val_fraction=0.25)
    assert train_split.class_names == list(CLASSES) and len(train_split) == 9
    with pytest.raises(
        DataError,
        match=r"the test split has no labels \(every label is -1 or null.*eval: --split val; fewshot, knn, linear-probe: --test-split val",
    ):
        open_split(tmp_path, "test", channels=3)
    nulls = tmp_path / "nulls"
    nulls.mkdir()
    make_parquet(nulls / "train-00000-of-00001.parquet", [0, 1, None, 2, 0, 1], images[:6])
    with pytest.raises(DataError, match=r"train-00000-of-00001.parquet:row 2: has no label \(-1 or null; 1 of the 6"):
        open_split(nulls, "train", channels=3, val_fraction=0.0)


def test_a_parquet_label_outside_its_class_label_names_says_where_the_names_come_from(tmp_path):
    """It said "the 3 classes of classes.txt" where no classes.txt exists: the names are the schema's ClassLabel."""
    make_parquet(tmp_path / "train-00000-of-00001.parquet", [0, 1, 7], [jpeg(0), jpeg(1), jpeg(2)])
    with pytest.raises(
        DataError, match=r"row 2: label class index 7, outside 0 .. 2 the 3 classes of the Parquet schema's class names"
    ):
        open_sharded(tmp_path, "train", val_fraction=0.0)


def test_the_summary_names_a_record_that_is_no_image_without_pillow_s_internals(tmp_path):
    """The sizes line said "cannot identify image file <_io.BytesIO object at 0x7f...>" of a Parquet row."""
    from vitkit.data.summary import image_sizes

    make_parquet(tmp_path / "train-00000-of-00001.parquet", [0, 1, 2], [jpeg(0), b"not an image", jpeg(2)])
    sizes = image_sizes(open_split(tmp_path, "train", channels=3, val_fraction=0.0))
    assert sizes["unreadable"] == 1 and sizes["first_unreadable"].endswith("parquet:row 1: not an image Pillow reads")


def test_a_sample_key_twice_in_a_shard_is_one_error(tmp_path):
    """000000027.png twice with different labels: the first was dropped without a word (lists refuse duplicates)."""
    path = tmp_path / "s" / "shard-000000.tar"
    path.parent.mkdir()
    with tarfile.open(path, "w") as tar:
        for name, data in (
            ("a.jpg", jpeg(0)),
            ("a.cls", b"0"),
            ("b.jpg", jpeg(1)),
            ("b.cls", b"1"),
            ("a.jpg", jpeg(2)),
            ("a.cls", b"1"),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(DataError, match=r"shard-000000.tar: sample 'a' has two images \(a.jpg and a.jpg\)"):
        open_sharded(tmp_path / "s", "train", val_fraction=0.0)


def test_the_summary_names_an_unreadable_record_once():
    """A Parquet row whose image is empty was named twice: "f.parquet:row 0: f.parquet:row 0: the image is empty"."""
    from vitkit.data.images import Record
    from vitkit.data.split import Split
    from vitkit.data.summary import image_sizes

    class Row(Record):
        def __init__(self, index, data):
            self.index, self.data = index, data

        def __str__(self):
            return f"f.parquet:row {self.index}"

        def read(self):
            if self.data is None:
                raise DataError(f"{self}: the image is empty (no bytes and no path)")
            return self.data

    split = Split(torch.zeros(2, dtype=torch.long), ["a"], paths=[Row(0, None), Row(1, jpeg(1))], source="f.parquet")
    assert image_sizes(split)["first_unreadable"] == "f.parquet:row 0: the image is empty (no bytes and no path)"


def test_shards_whose_keys_hold_dots_are_one_error_saying_why_no_image_was_found(tmp_path):
    """img.0.v1.jpg is key "img" with extension "0.v1.jpg" (WebDataset's reading): the shards read as no images, and
    `vitkit data` said "none of the 0 images looked at could be read"."""
    import tarfile

    with tarfile.open(tmp_path / "shard-000000.tar", "w") as tar:
        for i in range(3):
            for name, payload in ((f"img.{i}.v1.jpg", jpeg(i)), (f"img.{i}.v1.cls", b"0")):
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    with pytest.raises(DataError, match=r"shard-000000.tar: no images .* up to the first dot.*rename such members"):
        open_split(tmp_path, "train", channels=3)


def test_compressed_tar_shards_are_one_error_saying_to_decompress_them(tmp_path):
    """A folder of .tar.gz shards said "no images found; expected root/<class>/..."; a brace pattern naming them said
    "no such file or directory" though the files were there."""
    import gzip

    folder = open_split(make_folder(tmp_path / "photos"), "train", channels=3, val_fraction=0.0)
    tar = write_tar_shards(folder, tmp_path / "plain", per_shard=100)[0]
    (tmp_path / "packed").mkdir()
    (tmp_path / "packed" / "shard-000000.tar.gz").write_bytes(gzip.compress(tar.read_bytes()))
    for given in (tmp_path / "packed", str(tmp_path / "packed" / "shard-{000000..000000}.tar.gz")):
        with pytest.raises(DataError, match=r"compressed tar shards \(shard-000000.tar.gz\).*gunzip"):
            open_split(given, "train", channels=3)


def test_parquet_files_one_folder_down_are_named_in_the_error(tmp_path):
    """The Hub keeps a dataset's config in a folder of its own (cifar10/plain_text/train-*.parquet): the error said only
    "no images found; expected root/<class>/<image>.jpg", never the Parquet files a folder below holds."""
    (tmp_path / "plain_text").mkdir()
    make_parquet(tmp_path / "plain_text" / "train-00000-of-00001.parquet", [0, 1, 2], [jpeg(i) for i in range(3)])
    with pytest.raises(
        DataError, match=r"no images found.*Parquet files\); .*plain_text holds tar or Parquet shards: give that folder"
    ):
        open_split(tmp_path, "train", channels=3)
    assert len(open_split(tmp_path / "plain_text", "train", channels=3, val_fraction=0.0)) == 3


def test_row_group_windows_keep_an_order_that_depends_only_on_seed_and_epoch():
    blocks = np.repeat(np.arange(40), 5)
    a, b = block_order(blocks, 3, 1, window=4), block_order(blocks, 3, 1, window=4)
    assert (
        torch.equal(a, b)
        and sorted(a.tolist()) == list(range(200))
        and not torch.equal(a, block_order(blocks, 3, 2, window=4))
    )
    assert all(len(set(blocks[a[s : s + 20].numpy()])) <= 4 for s in range(0, 200, 20))  # 20 samples: 4 row groups


def test_a_bad_tar_shard_is_one_clear_error(tmp_path):
    (tmp_path / "x.tar").write_bytes(b"not a tar" * 100)
    with pytest.raises(DataError, match=r"x\.tar: not a readable uncompressed tar shard"):
        open_sharded(tmp_path / "x.tar", "train", val_fraction=0.5)
    tarfile.open(tmp_path / "s-000.tar", "w").close()
    with pytest.raises(DataError, match=r"s-001\.tar: no such shard \(1 of the 2 files"):
        open_sharded(str(tmp_path / "s-{000..001}.tar"), "train")


def test_a_tar_or_archive_of_an_image_folder_is_one_error_saying_to_unpack_it(tmp_path):
    """`tar -cf photos.tar train val` of class folders was read as shards of one class, "unlabeled", its val images
    trained on; a zip or .tar.gz was "cannot read the list (utf-8 codec ...)". Unlabeled shards of plain keys (or keys
    in one folder) stay one class, for masked-patch pre-training."""
    import shutil

    from vitkit.data.sources import open_split

    make_folder(tmp_path / "photos" / "train")
    with tarfile.open(tmp_path / "photos.tar", "w") as tar:
        tar.add(tmp_path / "photos" / "train", arcname="train")
    with pytest.raises(
        DataError, match=r"photos\.tar: a tar of images in folders \(train/.*without .cls or .json labels: unpack it"
    ):
        open_sharded(tmp_path / "photos.tar", "train")
    for fmt, what in (("zip", "a zip archive"), ("gztar", "a gzip-compressed file")):
        archive = shutil.make_archive(str(tmp_path / "photos"), fmt, tmp_path / "photos")
        with pytest.raises(DataError, match=f"{what}, which vitkit does not read; unpack it"):
            open_split(archive, "train", channels=3)
    with tarfile.open(tmp_path / "plain.tar", "w") as tar:
        for key in ("images/0", "images/1"):
            info = tarfile.TarInfo(key + ".jpg")
            info.size = len(data := jpeg(1))
            tar.addfile(info, io.BytesIO(data))
    assert open_sharded(tmp_path / "plain.tar", "train", val_fraction=0.0).class_names == ["unlabeled"]


# -- training on shards: bad records, exact resume with workers and ranks ---------------------------
TRAIN = [
    "model.name=vit_test",
    "model.depth=1",
    "model.image_size=8",
    "train.batch_size=8",
    "train.threads=1",
    "train.progress=false",
    "train.figures=false",
    "train.log_every=1",
    "train.eval_every=1000",
    "train.checkpoint_every=2",
    "train.warmup_steps=0",
    "train.decay=constant",
    "train.lr=3e-3",
    "data.val_fraction=0.2",
    "data.on_error=skip",
    "train.device=cpu",
]


def shards_with_a_bad_record(root):
    """3 tar shards of the folder's 24 JPEGs plus one member that is not an image."""
    folder = _read_folder(make_folder(root / "photos"))
    write_tar_shards(folder, root / "shards", per_shard=9)
    with tarfile.open(root / "shards" / "shard-000001.tar", "a") as tar:
        for name, payload in (("broken.jpg", b"\xff\xd8 not really a jpeg"), ("broken.cls", b"1")):
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return str(root / "shards" / "shard-{000000..000002}.tar")


def losses(out):
    return {
        r["step"]: r["loss"]
        for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
        if r["kind"] == "train"
    }


@pytest.mark.parametrize("kind", ["tar", "parquet"])
def test_training_on_shards_resumes_exactly_with_workers_and_lists_bad_records(tmp_path, kind):
    if kind == "tar":
        path = shards_with_a_bad_record(tmp_path)
    else:
        images = [jpeg(i) for i in range(29)] + [b"\x89PNG broken"]
        make_parquet(tmp_path / "train-00000-of-00001.parquet", [i % 3 for i in range(30)], images, row_group_size=4)
        path = str(tmp_path)
    config = lambda *extra: load_run_config(None, TRAIN + [f"data.path={path}", "train.steps=5", *extra])
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(config("data.workers=0"), straight)
    train(config("data.workers=2"), resumed, stop_at=2)
    train(config("data.workers=2"), resumed, resume=True)
    want, got = losses(straight), losses(resumed)
    assert list(got) == [1, 2, 3, 4, 5] and len(set(want.values())) > 1
    assert got == want  # bit-identical batches: the same losses to the last bit
    listed = json.loads((resumed / "bad_files.json").read_text())
    assert [row["path"] for row in listed["files"]] == [
        row["path"] for row in json.loads((straight / "bad_files.json").read_text())["files"]
    ]
    assert listed["count"] == 1 and (
        "broken.jpg" in listed["files"][0]["path"] or "row 29" in listed["files"][0]["path"]
    )


@pytest.mark.parametrize("kind", ["tar", "parquet", "folder"])
def test_two_gloo_ranks_train_as_one_process_and_resume_on_one(tmp_path, kind):
    """Every rank reads its share of each batch (from tar shards, Parquet row groups or image files), crops drawn
    per image: 2 ranks (stopped at step 2) and 1 process resuming them train exactly as one process straight through."""
    data = make_folder(tmp_path / "photos")
    if kind == "tar":
        write_tar_shards(_read_folder(data), tmp_path / "shards", per_shard=9)
        data = tmp_path / "shards"
    elif kind == "parquet":
        data = tmp_path / "parquet"
        data.mkdir()
        make_parquet(
            data / "train-00000-of-00001.parquet",
            [i % 3 for i in range(24)],
            [jpeg(i) for i in range(24)],
            row_group_size=4,
        )
    args = [*TRAIN, f"data.path={data}", "data.workers=1", "augment.hflip=0"]  # flips are drawn per rank
    one, two = tmp_path / "one", tmp_path / "two"
    train(load_run_config(None, [*args, "train.steps=4"]), one)
    launcher = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "vitkit",
        "train",
    ]
    done = subprocess.run(
        [*launcher, "--out", str(two), *args, "train.steps=2"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    train(resume_config(two, ["train.steps=4"]), two, resume=True)
    want, got = losses(one), losses(two)
    assert list(got) == [1, 2, 3, 4] and len(set(want.values())) > 1
    for step in want:
        assert got[step] == pytest.approx(want[step], abs=1e-5), step


def test_parquet_batches_split_across_ranks_and_resume_with_workers(tmp_path):
    """Row-group windows, 2 ranks x 2 workers: the ranks' shares make up one process's batches; a resume mid-run matches."""
    make_parquet(
        tmp_path / "train-00000-of-00001.parquet",
        [i % 3 for i in range(24)],
        [jpeg(i) for i in range(24)],
        row_group_size=4,
    )
    split = open_split(tmp_path, "train", channels=3, val_fraction=0.0)
    crop = ((0.08, 1.0), (3 / 4, 4 / 3))
    make = lambda **kw: Batches(split, 6, seed=1, device=torch.device("cpu"), channels=3, size=8, crop=crop, **kw)
    one = [(x, y) for _, (x, y) in zip(range(6), make(workers=0).iterate(0, 0))]  # 4 batches an epoch: into epoch 1
    halves = [[x for _, (x, _) in zip(range(6), make(workers=2, rank=r, world=2).iterate(0, 0))] for r in (0, 1)]
    for step, (x, _) in enumerate(one):
        assert torch.equal(torch.cat([halves[0][step], halves[1][step]]), x)
    resumed = [y for _, (_, y) in zip(range(3), make(workers=2).iterate(0, 3))]
    assert all(torch.equal(a, b) for a, b in zip(resumed, [y for _, y in one[3:]]))


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_tar_headers_are_read_as_tarfile_reads_them(tmp_path, fmt):
    """The quick header reader finds the same files at the same offsets as tarfile: long names (ustar prefix,
    GNU long-name members, pax records), non-ASCII names, directories and links left out; a cut shard too."""
    from vitkit.data.sources.tar import _index_tar, _tar_files, _tarfile_members

    names = ["a.jpg", "a.cls", "dir/b.png", "dir/b.json", "d" * 120 + "/c.jpg", "d" * 120 + "/c.cls"]
    if fmt != tarfile.USTAR_FORMAT:
        names += ["ünï/ç.jpg", "ünï/ç.cls", "x" * 150 + ".png", "x" * 150 + ".cls"]
    path = tmp_path / "s.tar"
    with tarfile.open(path, "w", format=fmt) as tar:
        folder = tarfile.TarInfo("dir")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for i, name in enumerate(names):
            payload = (
                b'{"label": 1}'
                if name.endswith(".json")
                else b"2"
                if name.endswith(".cls")
                else bytes([i]) * (700 * i + 3)
            )
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
        link = tarfile.TarInfo("link.jpg")
        link.type, link.linkname = tarfile.SYMTYPE, "a.jpg"
        tar.addfile(link)
    with open(path, "rb") as f:
        found = [m[:3] for m in _tar_files(f, path)]
    assert found == [m[:3] for m in _tarfile_members(path)] and [m[0] for m in found] == names
    images, labels, keys = _index_tar(path)
    assert len(images) == len(names) // 2 and labels == ["2", "1", "2", "2", "2"][: len(images)]
    assert all(m.read() == bytes([names.index(m.name)]) * (700 * names.index(m.name) + 3) for m in images)
    whole = path.read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(whole[: images[-1].offset + 100])  # inside the last image's data
    with pytest.raises(tarfile.ReadError, match="unexpected end of data"):
        list(_tarfile_members(cut))
    with pytest.raises(DataError, match=r"cut\.tar: not a readable uncompressed tar shard \(unexpected end of data\)"):
        _index_tar(cut)


def test_a_header_only_tarfile_reads_is_read_once(tmp_path):
    """A base-256 size field (GNU, for members over 8 GB) hands the rest of the shard to tarfile: no member twice."""
    from vitkit.data.sources.tar import _tar_files, _tarfile_members

    path = tmp_path / "s.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for i in range(3):
            info = tarfile.TarInfo(f"{i}.jpg")
            info.size = 10 + i
            tar.addfile(info, io.BytesIO(bytes(info.size)))
    data = bytearray(path.read_bytes())
    second = 1024  # the second member's header: 512 + one data block after the first
    data[second + 124 : second + 136] = b"\x80" + (11).to_bytes(11, "big")  # the same size, base-256
    data[second + 148 : second + 156] = b" " * 8
    data[second + 148 : second + 155] = b"%06o\0" % sum(data[second : second + 512])
    path.write_bytes(bytes(data))
    with open(path, "rb") as f:
        found = [m[:3] for m in _tar_files(f, path)]
    assert (
        found
        == [m[:3] for m in _tarfile_members(path)]
        == [("0.jpg", 512, 10), ("1.jpg", 1536, 11), ("2.jpg", 2560, 12)]
    )


def test_which_shown_images_a_model_trained_on_is_told_for_files_and_tar_members(tmp_path):
    """inspect counts images against the training split image by image: files and tar members (each a copy of a
    file here: it was told for files only); Parquet rows are not compared by their bytes."""
    from vitkit.data.spec import DataSpec

    folder = make_folder(tmp_path / "photos")
    files = sorted(folder.rglob("*.jpg"))
    spec = DataSpec(path=str(folder), val_fraction=0.25)
    assert sum(spec.training_images_among(files, channels=3)) == 18  # 24 images, 6 held out
    write_tar_shards(open_split(folder, "train", channels=3, val_fraction=0.0), tmp_path / "shards", per_shard=7)
    (tmp_path / "pq").mkdir()
    make_parquet(tmp_path / "pq" / "train-00000-of-00001.parquet", [0, 1, 2], [jpeg(i) for i in range(3)])
    assert (
        DataSpec(path=str(tmp_path / "shards"), val_fraction=0.0).training_images_among(files, channels=3)
        == [True] * 24
    )
    assert DataSpec(path=str(tmp_path / "pq")).training_images_among(files, channels=3) is None


def test_copies_of_training_images_among_tar_shards_are_found_by_their_bytes(tmp_path):
    """Splits of tar shards are kept apart by shard: two test records byte-identical to training records were scored as
    unseen, unsaid (the check looked at files only)."""
    from vitkit.data.summary import copies_of_training_images

    folder = make_folder(tmp_path / "photos")
    write_tar_shards(
        open_split(folder, "train", channels=3, val_fraction=0.0), tmp_path / "shards" / "train", per_shard=10
    )
    held = tmp_path / "held" / "cat"
    held.mkdir(parents=True)
    for name in ("0.jpg", "1.jpg"):
        (held / name).write_bytes((folder / "cat" / name).read_bytes())
    (held / "new.jpg").write_bytes(jpeg(99))
    write_tar_shards(open_split(tmp_path / "held", "train", channels=3, val_fraction=0.0), tmp_path / "shards" / "test")
    splits = {name: open_split(tmp_path / "shards", name, channels=3, val_fraction=0.0) for name in ("train", "test")}
    assert len(splits["test"]) == 3
    copies = copies_of_training_images(splits)
    assert list(copies) == ["test"] and copies["test"]["images"] == 2
    scored, trained = copies["test"]["example"]
    assert ".tar:" in scored and ".tar:" in trained and "test" in scored and "train" in trained


def test_an_unreadable_parquet_row_group_is_read_once_and_warned_about_once(tmp_path, monkeypatch, capsys):
    """A row group pyarrow cannot read (a 1 GB row past memory) was read again for each of its rows, and each row printed
    its own copy of the same warning (90 lines)."""
    from vitkit.data import BadFiles
    from vitkit.data.images import load_pixels
    from vitkit.data.sources import parquet as sharding

    make_parquet(
        tmp_path / "train-00000-of-00001.parquet", [0, 1, 2, 0, 1, 2], [jpeg(i) for i in range(6)], row_group_size=3
    )
    split = open_sharded(tmp_path, "train", val_fraction=0.0)
    reads = []

    class Broken:
        def __init__(self, path):
            reads.append(path)
            raise OSError("malloc of size 1073786432 failed")

    sharding._ROW_GROUPS.clear()
    monkeypatch.setattr(sharding._pyarrow(), "ParquetFile", Broken)
    bad = BadFiles("skip")
    errors = []
    for i, record in enumerate(split.paths[:3]):  # the rows of the first row group
        try:
            load_pixels(record, 3)
        except DataError as err:
            errors.append((i, str(record), str(err)))
    bad.report(errors)
    sharding._ROW_GROUPS.clear()
    assert len(errors) == 3 and len(reads) == 1 and len(bad) == 3
    warned = [line for line in capsys.readouterr().err.splitlines() if "skipping a bad image" in line]
    assert len(warned) == 1 and "cannot read row group 0 (malloc of size 1073786432 failed)" in warned[0]


def test_the_training_plan_names_a_parquet_split_s_images_in_one_parenthesis(tmp_path, capsys, monkeypatch):
    """ "DIR (train) (all but the 0.5 held out by class (seed 0))" was printed for Parquet files named by their split."""
    from vitkit.train import train
    from vitkit.train.config import load_run_config

    (tmp_path / "pq").mkdir()
    make_parquet(
        tmp_path / "pq" / "train-00000-of-00001.parquet", [i % 3 for i in range(12)], [jpeg(i) for i in range(12)]
    )
    import vitkit.plots

    captions, plot = {}, vitkit.plots.plot_run
    monkeypatch.setattr(vitkit.plots, "plot_run", lambda *a, **k: captions.update(k) or plot(*a, **k))
    train(
        load_run_config(
            None,
            [
                f"data.path={tmp_path / 'pq'}",
                "data.val_fraction=0.5",
                "train.steps=1",
                "model.name=vit_test",
                "model.depth=1",
                "train.batch_size=4",
                "train.threads=1",
                "train.progress=false",
            ],
        ),
        tmp_path / "run",
    )
    printed = capsys.readouterr().out
    assert (
        f"images  {tmp_path / 'pq'} (train, all but the 0.5 held out by class (seed 0))" in printed
        and ") (" not in printed
    )
    assert (
        captions["val_data"] == f"6 images, {tmp_path / 'pq'} (train, 0.5 held out by class (seed 0))"
    )  # the figures' captions too


def test_parquet_row_groups_are_kept_by_their_bytes_and_one_too_large_to_read_whole_is_one_error(tmp_path, monkeypatch):
    """Row groups were kept 16 at a time whatever their size (16 GB of 1 GB ones per worker), and pyarrow's default
    writer puts up to a million rows in one row group, read whole: memory grew with the file, not with a batch."""
    from vitkit.data.sources import parquet as sharding

    images = [jpeg(i, size=(40, 30)) for i in range(9)]
    make_parquet(tmp_path / "train-00000-of-00001.parquet", [i % 3 for i in range(9)], images, row_group_size=3)
    split = open_sharded(tmp_path, "train", val_fraction=0.0)
    reads = []
    real = sharding._read_row_group
    monkeypatch.setattr(sharding, "_read_row_group", lambda file, group: reads.append(group) or real(file, group))
    sizes = sorted(sum(map(len, images[k : k + 3])) for k in (0, 3, 6))
    monkeypatch.setattr(sharding, "CACHED_BYTES", sizes[1] + sizes[2])  # room for two row groups, not three
    sharding._ROW_GROUPS.clear()
    for i in (0, 3, 1, 6, 4, 0):  # row groups 0, 1, 0, 2, 1, 0
        assert split.paths[i].read() == images[i]
    assert reads == [0, 1, 2, 1, 0]  # two kept: 2 pushed out 1 (0 was read since), 1 pushed out 0, 0 pushed out 2
    sharding._ROW_GROUPS.clear()
    monkeypatch.setattr(sharding, "MAX_ROW_GROUP_BYTES", 2 * max(map(len, images)))
    with pytest.raises(
        DataError,
        match=r"train-00000-of-00001\.parquet: row group 0 holds .* GiB of images \(3 rows\), over .* row_group_size=100",
    ):
        open_sharded(tmp_path, "train", val_fraction=0.0)


def test_multi_label_shards_tar_json_lists_and_parquet_sequence_of_class_label(tmp_path):
    """Several labels per sample: a tar's KEY.json {"labels": [...]} (names, or indices into classes.txt) and a
    Parquet Sequence(ClassLabel) column read as multi-hot rows; written back as shards they read the same; a sample
    with one label among lists is one error naming it."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    sets = [["dog", "cat"], [], ["emu"], ["cat", "emu", "dog"]]
    (tmp_path / "t").mkdir()
    labelled = [((f"{i}.jpg", jpeg(i)), (f"{i}.json", json.dumps({"labels": s}).encode())) for i, s in enumerate(sets)]
    _tar_members(tmp_path / "t" / "s-0.tar", [member for sample in labelled for member in sample])
    read = open_sharded(tmp_path / "t", "train", val_fraction=0.0)
    hot = [[1, 1, 0], [0, 0, 0], [0, 0, 1], [1, 1, 1]]  # classes sorted: cat, dog, emu
    assert read.multi_label and read.class_names == list(CLASSES) and read.labels.tolist() == hot
    written = write_tar_shards(read, tmp_path / "again", per_shard=3)
    back = open_sharded(tmp_path / "again", "train", val_fraction=0.0)  # KEY.json of indices into classes.txt
    assert back.class_names == list(CLASSES) and len(written) == 2
    assert {r.read(): y.tolist() for r, y in zip(back.paths, back.labels)} == {
        r.read(): y.tolist() for r, y in zip(read.paths, read.labels)
    }
    features = {
        "image": {"_type": "Image"},
        "labels": {"feature": {"names": list(CLASSES), "_type": "ClassLabel"}, "_type": "Sequence"},
    }
    table = pa.table(
        {"image": [{"bytes": jpeg(i), "path": None} for i in range(4)], "labels": [[1, 0], [], [2], [0, 2, 1]]}
    )
    table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    pq.write_table(table, tmp_path / "train-0.parquet")
    parquet = open_sharded(tmp_path / "train-0.parquet", "train", val_fraction=0.0)
    assert parquet.class_names == list(CLASSES) and parquet.labels.tolist() == hot
    _tar_members(tmp_path / "t" / "s-1.tar", [("x.jpg", jpeg(9)), ("x.cls", b"cat")])
    with pytest.raises(DataError, match=r"s-1.tar:x.jpg: has one label \('cat'\), where .* has a list of labels"):
        open_sharded(tmp_path / "t", "train", val_fraction=0.0)


def _tar_members(path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
