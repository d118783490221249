"""`vitkit data`: the dataset summary, the training-batch preview (equal to what training consumes) and --to-shards."""

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitkit.train import loop as training
from vitkit.train.config import load_run_config

RUN = [
    "model.name=vit_test",
    "model.depth=1",
    "train.batch_size=8",
    "train.steps=1",
    "train.threads=1",
    "train.progress=false",
    "train.eval_every=1",
    "augment.hflip=0.5",
    "augment.randaugment_ops=1",
    "data.val_fraction=0.25",
    "data.workers=0",
]


def photos(root, per_class=6):
    rng = np.random.default_rng(0)
    for c, name in enumerate(("ant", "bee", "cat")):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            size = (30 + 7 * i, 20 + 3 * c)  # varied sizes, none square
            Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(
                root / name / f"{i}.jpg", quality=90
            )
    return root


def what_training_consumes(config, monkeypatch, out) -> np.ndarray:
    """The first micro-batch's model input in a real `train`, un-normalised back to [0, 255]."""
    seen = []
    real = training.train_transform

    def spy(images, size, cfg, mean, std, g, *background):
        x = real(images, size, cfg, mean, std, g, *background)
        seen.append(x * torch.tensor(std)[:, None, None] + torch.tensor(mean)[:, None, None])
        return x

    monkeypatch.setattr(training, "train_transform", spy)
    training.train(config, out)
    return seen[0].numpy() * 255


@pytest.mark.parametrize("source", ["folder", "synthetic"])  # crops cut by the loader from the files / on the device
def test_samples_are_exactly_what_training_consumes(tmp_path, vitkit_cmd, monkeypatch, source):
    data = (
        [f"data.path={photos(tmp_path / 'photos')}"]
        if source == "folder"
        else ["data.name=synthetic", "data.synthetic_size=32"]
    )
    args = [*RUN, *data, f"model.image_size={16 if source == 'folder' else 32}"]
    done = vitkit_cmd("data", *args, "--samples", "5", "--out", tmp_path / "preview", "--json")
    assert done.returncode == 0, done.stderr
    samples = np.load(tmp_path / "preview" / "samples.npy")
    assert samples.dtype == np.uint8 and samples.shape == (
        5,
        3,
        args[-1].endswith("16") and 16 or 32,
        samples.shape[-1],
    )
    with Image.open(tmp_path / "preview" / "samples.png") as png:  # a header line says which images these are
        header = np.asarray(png.convert("L"))[:14]
    assert (
        (header > 250).mean() > 0.6
        and header.min() < 128
        and "the first 5 images of the first training batch of" in done.stdout
    )
    consumed = what_training_consumes(load_run_config(None, args), monkeypatch, tmp_path / "run")[:5]
    assert np.abs(consumed - samples).max() <= 0.5 + 1e-3  # the same pixels, rounded to uint8
    assert samples.std() > 10


def icons(root, per_class=6):
    """16x16 RGBA icons: transparent (each pixel storing a random colour, as icon files do) but for an opaque red
    square whose place tells the class."""
    rng = np.random.default_rng(1)
    for c, name in enumerate(("left", "right")):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            rgba = rng.integers(0, 256, (16, 16, 4), dtype=np.uint8)
            rgba[..., 3] = 0
            rgba[4:12, 2 + 6 * c : 8 + 6 * c] = (255, 0, 0, 255)
            Image.fromarray(rgba, "RGBA").save(root / name / f"{i}.png")
    return root


@pytest.mark.parametrize("background", [None, [0, 0.5, 1]])
def test_a_padded_crop_of_a_transparent_image_is_the_background_to_its_border(
    tmp_path, vitkit_cmd, monkeypatch, background
):
    """Icons were composited on white when decoded and then padded with black: training images got black borders
    that evaluation images never have. Decoding and the padded crop now both use model.background (white by
    default), in `vitkit data --samples` and in what training consumes."""
    args = [*RUN, f"data.path={icons(tmp_path / 'icons')}", "model.image_size=16", "augment.randaugment_ops=0"]
    args += ["augment.crop=pad", "augment.pad=3", "data.val_fraction=0.25"]
    args += [f"model.background={background}"] if background else []
    colour = np.array([0, 128, 255] if background else [255, 255, 255])
    done = vitkit_cmd("data", *args, "--samples", "6", "--out", tmp_path / "preview", "--json")
    assert done.returncode == 0, done.stderr
    samples = np.load(tmp_path / "preview" / "samples.npy").astype(np.float64)
    consumed = what_training_consumes(load_run_config(None, args), monkeypatch, tmp_path / "run")[:6]
    for pixels in (samples, consumed):
        red = np.abs(pixels - np.array([255, 0, 0])[None, :, None, None]).max(1) <= 0.5
        rest = np.abs(pixels - colour[None, :, None, None]).max(1)
        # every pixel is the red square or the background: the transparent ones and the padded border alike
        assert (red | (rest <= 0.5)).all(), np.unique(pixels.transpose(0, 2, 3, 1).reshape(-1, 3).round(), axis=0)
        assert 0 < red.sum() < red.size / 2
    # the crops were shifted: the border is in them
    assert any((np.abs(s - colour[:, None, None]).max(0) <= 0.5)[[0, -1]].all(1).any() for s in samples)


def test_the_summary_counts_classes_splits_sizes_and_channels(tmp_path, run_cli, vitkit_cmd):
    root = photos(tmp_path / "photos")
    Image.new("L", (64, 48), 90).save(root / "cat" / "gray.png")
    done = run_cli("data", root, "--json", "data.val_fraction=0.25")  # the console script
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["format"] == "image folder" and summary["class_names"] == ["ant", "bee", "cat"]
    train, val = summary["splits"]["train"], summary["splits"]["val"]
    assert train["images"] + val["images"] == 19 and sum(train["per_class"].values()) == train["images"]
    sizes = summary["sizes"]
    assert sizes["images"] == train["images"] and sizes["width"][0] >= 30 and sizes["width"][2] <= 65
    assert set(sizes["modes"]) <= {"RGB", "L"} and sum(sizes["modes"].values()) == train["images"]
    assert "width" in done.stdout and "channels" in done.stdout
    for name in list((root / "ant").iterdir()) + list((root / "bee").iterdir()) + list((root / "cat").iterdir()):
        name.unlink()
    exif = Image.Exif()
    exif[0x0112] = 6  # stored on its side: decoded upright as 20 x 300
    Image.new("RGB", (300, 20), (90, 20, 20)).save(root / "cat" / "turned.jpg", exif=exif)
    Image.new("RGB", (20, 300), (90, 20, 20)).save(root / "ant" / "tall.jpg")
    Image.new("RGB", (20, 300), (90, 20, 20)).save(root / "bee" / "tall.jpg")
    done = vitkit_cmd("data", root, "--json", "data.val_fraction=0")  # in-process: the same entry point
    sizes = json.loads(done.stdout.strip().splitlines()[-1])["sizes"]
    assert (sizes["width"], sizes["height"]) == ([20, 20.0, 20], [300, 300.0, 300])  # as training decodes them


def test_to_shards_writes_every_image_of_a_folder_without_splits(tmp_path, vitkit_cmd):
    """A folder of class folders is one set: all 18 images as shard-*.tar, not the 14 left after data.val_fraction's hold-out."""
    from vitkit.data.sources import open_sharded

    root = photos(tmp_path / "photos")
    done = vitkit_cmd("data", root, "--to-shards", tmp_path / "shards", "--per-shard", "5", "data.val_fraction=0.25")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "shards").iterdir()) == [
        "classes.txt",
        *(f"shard-00000{i}.tar" for i in range(4)),
    ]
    again = open_sharded(tmp_path / "shards", "train", val_fraction=0.0)
    assert len(again) == 18 and again.class_names == ["ant", "bee", "cat"]
    assert f"wrote 18 images (all of {root}) as 4 tar shard(s)" in done.stdout


def test_copies_of_training_images_in_val_or_test_are_named(tmp_path, vitkit_cmd):
    """Splits are kept apart by folder: a copy of a training image in test/ was scored as an unseen image, unsaid."""
    root = tmp_path / "photos"
    photos(root / "train")
    photos(root / "test", per_class=2)  # the same seed: test/ant/0-1 are copies of train/ant/0-1
    rng = np.random.default_rng(9)
    for name in ("ant", "bee", "cat"):
        (root / "val" / name).mkdir(parents=True)
        Image.fromarray(rng.integers(0, 255, (20, 30, 3), dtype=np.uint8)).save(
            root / "val" / name / "new.jpg", quality=90
        )
    done = vitkit_cmd("data", root, "--json")
    assert done.returncode == 0, done.stderr
    copies = json.loads(done.stdout.strip().splitlines()[-1])["copies_of_training_images"]
    assert list(copies) == ["test"] and copies["test"]["images"] == 2
    assert Path(copies["test"]["example"][1]).read_bytes() == Path(copies["test"]["example"][0]).read_bytes()
    assert "warning  2 test images are byte-identical to training images" in done.stdout


def test_copies_among_images_in_memory_are_found_by_pixels_and_parquet_is_said_to_be_unchecked(tmp_path, vitkit_cmd):
    """IDX arrays and Parquet rows were never compared with the training images, and the JSON said
    "copies_of_training_images": {} of them, which reads as none found."""
    from vitkit.data import Split
    from vitkit.data.summary import copies_of_training_images

    rng = np.random.default_rng(0)
    train = torch.from_numpy(rng.integers(0, 255, (20, 1, 8, 8), dtype=np.uint8))
    test = torch.cat([torch.from_numpy(rng.integers(0, 255, (3, 1, 8, 8), dtype=np.uint8)), train[[7, 2]]])
    splits = {
        name: Split(torch.zeros(len(x), dtype=torch.long), ["a"], images=x)
        for name, x in (("train", train), ("test", test))
    }
    assert copies_of_training_images(splits) == {"test": {"images": 2, "example": ["test image 3", "train image 7"]}}
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    root = tmp_path / "pq"
    root.mkdir()

    def png() -> bytes:
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(buffer, "PNG")
        return buffer.getvalue()

    for split in ("train", "test"):
        pq.write_table(
            pa.table({"image": [{"bytes": png(), "path": None} for _ in range(4)], "label": [0, 1, 0, 1]}),
            root / f"{split}-00000-of-00001.parquet",
        )
    done = vitkit_cmd("data", root, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["copies_of_training_images"] is None
    assert "copies   of training images in the other splits: not checked (Parquet rows" in done.stdout


def test_an_image_over_the_pixel_limit_is_named_with_training_s_limit_and_header_counts_say_what_they_are(
    tmp_path, vitkit_cmd
):
    """vitkit data quoted Pillow's own limit (178,956,970 pixels, "could be decompression bomb DOS attack") where
    training says 89,478,485, and called its header count "unreadable" where training finds more (damaged bodies)."""
    import struct
    import zlib

    root = tmp_path / "photos"
    photos(root / "train")

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    for side in (12_000, 20_000):  # over vitkit's limit; over Pillow's own (twice it): headers only, a few bytes
        ihdr = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
        png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
        (root / "train" / "ant" / f"bomb{side}.png").write_bytes(png)
    done = vitkit_cmd("data", root)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("sizes"))
    assert "2 unreadable from their header" in line and "pixels is over the limit of 89,478,485" in line
    assert "178956970" not in done.stdout and "DOS" not in done.stdout


def test_to_shards_writes_each_split_a_folder_has_as_that_split_and_never_into_shards(tmp_path, vitkit_cmd):
    """train/ (6 a class), val/ and test/ (2 a class) become train-*, val-* and test-* shards that read back as the same
    splits; --split writes one; a folder already holding shards is one error and is left as it was."""
    from vitkit.data.sources import open_sharded

    root = tmp_path / "photos"
    photos(root / "train")
    photos(root / "val", per_class=2)
    photos(root / "test", per_class=2)
    done = vitkit_cmd("data", root, "--to-shards", tmp_path / "shards", "--json")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "shards").iterdir()) == [
        "classes.txt",
        "test-000000.tar",
        "train-000000.tar",
        "val-000000.tar",
    ]
    sets = json.loads(done.stdout.strip().splitlines()[-1])["shards"]["sets"]
    assert {k: v["images"] for k, v in sets.items()} == {"train": 18, "val": 6, "test": 6}
    for split, n in (("train", 18), ("val", 6), ("test", 6)):
        again = open_sharded(
            tmp_path / "shards", split, val_fraction=0.1
        )  # a val of their own: nothing held out of train
        assert len(again) == n and again.class_names == ["ant", "bee", "cat"]
    assert vitkit_cmd("data", root, "--split", "val", "--to-shards", tmp_path / "val").returncode == 0
    assert sorted(p.name for p in (tmp_path / "val").iterdir()) == ["classes.txt", "val-000000.tar"]
    before = (tmp_path / "shards" / "train-000000.tar").read_bytes()
    refused = vitkit_cmd("data", tmp_path / "shards", "--to-shards", tmp_path / "shards")
    assert (
        refused.returncode == 2
        and refused.stderr.count("\n") == 1
        and "already holds shards (test-000000.tar" in refused.stderr
    )
    assert (tmp_path / "shards" / "train-000000.tar").read_bytes() == before
    (tmp_path / "mine").mkdir()  # someone's own classes.txt was replaced by the shards' names, exit 0
    (tmp_path / "mine" / "classes.txt").write_text("my\nown\n")
    refused = vitkit_cmd("data", root, "--to-shards", tmp_path / "mine")
    assert refused.returncode == 2 and "already holds classes.txt" in refused.stderr
    assert (
        sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["classes.txt"]
        and "own" in (tmp_path / "mine" / "classes.txt").read_text()
    )
    (tmp_path / "a file").write_text("")  # was: the whole summary printed, then "File exists"
    refused = vitkit_cmd("data", root, "--to-shards", tmp_path / "a file")
    assert (
        refused.returncode == 2 and refused.stdout == "" and "is a file; name a new or empty folder" in refused.stderr
    )


def test_to_shards_leaves_unreadable_files_out_and_names_them(tmp_path, vitkit_cmd):
    """An empty and a truncated JPEG were copied into the shards, where they surfaced at training time as
    "train-000001.tar:000000009.jpg: empty file", their own names lost."""
    from vitkit.data.sources import open_sharded

    root = photos(tmp_path / "photos")
    (root / "ant" / "empty.jpg").write_bytes(b"")
    jpeg = tmp_path / "whole.jpg"
    Image.new("RGB", (64, 48), (200, 30, 30)).save(jpeg, quality=90)
    (root / "bee" / "cut.jpg").write_bytes(jpeg.read_bytes()[:300])
    done = vitkit_cmd("data", root, "--to-shards", tmp_path / "shards", "--json")
    assert done.returncode == 0, done.stderr
    shards = json.loads(done.stdout.strip().splitlines()[-1])["shards"]
    assert sorted(Path(u["path"]).name for u in shards["unreadable"]) == ["cut.jpg", "empty.jpg"]
    assert (
        f"skipping a bad image: {root / 'ant' / 'empty.jpg'}: empty file" in done.stderr
        and "(2 unreadable left out)" in done.stdout
    )
    assert len(open_sharded(tmp_path / "shards", "train", val_fraction=0.0)) == shards["images"] == 18
    refused = vitkit_cmd("data", root, "--to-shards", tmp_path / "strict", "data.on_error=fail")
    assert refused.returncode == 2 and (
        "empty.jpg: empty file (0 bytes)" in refused.stderr or "cut.jpg: cannot read" in refused.stderr
    )
    assert not list((tmp_path / "strict").glob("*.tar*")) and not list((tmp_path / "strict").glob(".*.tmp"))
    # a list naming a file that is gone (it stopped the command, a half shard left) and one that is no image
    (tmp_path / "notes.jpg").write_text("not a photo")
    rows = [f"{p},{p.parent.name}" for p in sorted(root.rglob("?.jpg"))] + [
        f"{tmp_path / 'gone.jpg'},ant",
        f"{tmp_path / 'notes.jpg'},bee",
    ]
    (tmp_path / "list.csv").write_text("\n".join(rows) + "\n")
    done = vitkit_cmd("data", tmp_path / "list.csv", "--to-shards", tmp_path / "listed", "--json")
    assert done.returncode == 0, done.stderr
    assert f"{tmp_path / 'gone.jpg'}: image file not found" in done.stderr
    assert (
        f"{tmp_path / 'notes.jpg'}: not an image (or in a format Pillow cannot read)" in done.stderr
        and "BytesIO" not in done.stderr
    )


def test_a_stopped_to_shards_leaves_no_folder_and_a_marked_one_is_not_read_but_replaced(tmp_path, monkeypatch, capsys):
    """Stopped after the train split, the folder read as train shards with a val held out of them. The folder is staged
    and renamed into place whole, so a stop leaves none; a folder still marked unfinished (written by the library, or
    by an earlier vitkit) is refused by readers, and `--to-shards` into it replaces it whole."""
    from vitkit.cli import main
    from vitkit.data import sources as shards
    from vitkit.errors import DataError

    root = tmp_path / "photos"
    photos(root / "train")
    photos(root / "val", per_class=2)
    real = shards.write_tar_shards

    def stopped_at_val(split, out, **kw):
        if kw.get("prefix") == "val":
            raise KeyboardInterrupt
        return real(split, out, **kw)

    monkeypatch.setattr(shards, "write_tar_shards", stopped_at_val)
    assert main(["data", str(root), "--to-shards", str(tmp_path / "shards")]) == 130  # "vitkit data: interrupted"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photos"]  # no folder, no staging left beside it
    monkeypatch.setattr(shards, "write_tar_shards", real)
    real(shards.open_split(root, "train", channels=3), tmp_path / "shards", prefix="train", finish=False)
    capsys.readouterr()
    assert main(["data", str(tmp_path / "shards")]) == 2
    assert "its shards are incomplete" in capsys.readouterr().err
    with pytest.raises(DataError, match="run that command again"):
        shards.open_sharded(tmp_path / "shards", "train")
    assert main(["data", str(root), "--to-shards", str(tmp_path / "shards")]) == 0  # an unfinished folder: replaced
    assert sorted(p.name for p in (tmp_path / "shards").iterdir()) == [
        "classes.txt",
        "train-000000.tar",
        "val-000000.tar",
    ]
    assert len(shards.open_sharded(tmp_path / "shards", "val")) == 6


def test_samples_without_out_is_one_clear_error(capsys):
    from vitkit.cli import main

    assert main(["data", "--samples", "4", "data.name=synthetic"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out DIR" in err


def test_sample_labels_are_drawn_beyond_ascii():
    """Pillow's default font drew 'blü café' with a missing-glyph box where each 'ü' and 'é' should be."""
    from vitkit.data.summary import sample_grid

    pixels = np.zeros((1, 3, 16, 16), np.uint8)
    drawn = {
        label: np.asarray(sample_grid(pixels, [label])) for label in ("blü", "bl\u0378", "blu")
    }  # U+0378: no character
    assert not np.array_equal(drawn["blü"], drawn["bl\u0378"]) and not np.array_equal(drawn["blü"], drawn["blu"])


def test_samples_of_a_split_smaller_than_a_batch_are_drawn_from_one_batch_of_all_of_it(tmp_path, vitkit_cmd):
    """--split val --samples 4 of a 6-image val split failed: "6 training images are fewer than one batch of 8"."""
    photos(tmp_path / "data" / "train", per_class=6)
    photos(tmp_path / "data" / "val", per_class=2)
    done = vitkit_cmd(
        "data",
        tmp_path / "data",
        "--split",
        "val",
        "--samples",
        "4",
        "--out",
        tmp_path / "preview",
        "train.batch_size=8",
    )
    assert done.returncode == 0, done.stderr
    assert "a batch of all 6 (the split holds fewer than train.batch_size=8)" in done.stdout
    assert np.load(tmp_path / "preview" / "samples.npy").shape[0] == 4


@pytest.mark.parametrize("failing", ["shard", "classes.txt"])
def test_a_full_disk_during_to_shards_names_the_file_it_was_writing(tmp_path, monkeypatch, vitkit_cmd, failing):
    """A write that fails on a full disk raises OSError without a file name: the message said "a file: No space left
    on device"."""
    import errno
    import tarfile

    root = tmp_path / "photos"
    photos(root / "train")
    out = tmp_path / "shards"

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    if failing == "shard":
        monkeypatch.setattr(tarfile.TarFile, "addfile", full)
        named = out / "train-000000.tar"
    else:
        real = Path.write_text
        monkeypatch.setattr(Path, "write_text", lambda p, *a, **k: full() if p.name == failing else real(p, *a, **k))
        named = out / "classes.txt"
    done = vitkit_cmd("data", root, "--to-shards", out)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"vitkit data: error: {named}: No space left on device"), lines
    assert "a file" not in lines[0]
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["photos"]  # no half shard, no scratch left


def test_kaggle_s_layout_reads_by_the_folder_and_every_command_says_how(tmp_path, run_cli, vitkit_cmd):
    """labels.csv (id,breed) beside train/<id>.jpg, as Dog Breed Identification ships: `data` and `train` take the
    folder, say which columns and files they read, and the run evaluates on the images it held out."""
    root, rng = tmp_path / "dog-breed", np.random.default_rng(0)
    (root / "train").mkdir(parents=True)
    lines = ["id,breed"]
    for i in range(24):
        Image.fromarray(rng.integers(0, 255, (18, 21, 3), dtype=np.uint8)).save(root / "train" / f"{i:03x}ab.jpg")
        lines.append(f"{i:03x}ab,{('pug', 'beagle')[i % 2]}")
    (root / "labels.csv").write_text("\n".join(lines) + "\n")
    said = "labels.csv: 'id' the image, 'breed' its label; images below train/, each file the listed name + '.jpg'"
    done = run_cli("data", root)
    assert done.returncode == 0, done.stderr
    assert "CSV list (labels.csv, the one list in the folder)" in done.stdout and f"read     {said}" in done.stdout
    out = tmp_path / "run"
    done = vitkit_cmd("train", "--data", root, "--out", out, *RUN)
    assert done.returncode == 0, done.stderr
    assert f"  read     {said}" in done.stdout and "classes (beagle, pug)" in done.stdout
    done = vitkit_cmd("eval", out, "--split", "val", "--json")
    scored = json.loads(done.stdout.strip().splitlines()[-1])["images"]
    assert done.returncode == 0 and scored["n"] == 6 and scored["source"] == str(root / "labels.csv")


def test_a_list_whose_images_are_all_elsewhere_stops_before_training_in_one_line(tmp_path, run_cli):
    root = photos(tmp_path / "photos")
    (tmp_path / "list.csv").write_text("path,label\n" + "".join(f"{i}.jpg,ant\n" for i in range(6)))
    done = run_cli("train", "--data", tmp_path / "list.csv", "--out", tmp_path / "run", *RUN)
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "none of the 6 images looked at is found" in done.stderr and str(tmp_path) in done.stderr
    assert root.is_dir() and not (tmp_path / "run").exists()


def test_a_split_the_data_lacks_is_said_once_in_the_summary_and_the_flag_where_one_is_asked_for(tmp_path, vitkit_cmd):
    root = photos(tmp_path / "photos")
    done = vitkit_cmd("data", root, "data.val_fraction=0")
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    assert lines["val"].endswith("has no separate 'val' split; set data.val_fraction in (0, 1) to hold one out)")
    assert lines["test"].endswith("has no 'test' split (it has train))") and "--" not in lines["test"]
    done = vitkit_cmd("data", root, "--split", "test")
    assert done.returncode == 2 and done.stderr.strip().endswith("; choose one with --split train")
