"""`vitkit predict` on a mix of good and bad image files: one line per bad file, the good ones still answered."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from vitkit.checkpoint.native import MULTI_LABEL
from vitkit.cli import main


@pytest.fixture
def checkpoint(tmp_path):
    model = vitkit.create_model("vit_test", num_classes=3)
    torch.nn.init.normal_(model.head.weight)  # a trained head: a new one is all zeros, and refused
    return vitkit.save_pretrained(model, tmp_path / "ckpt", extra={"class_names": ["ant", "bee", "cat"]})


@pytest.fixture
def images(tmp_path):
    good = tmp_path / "good.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(good)
    data = good.read_bytes()
    broken = tmp_path / "bad.png"
    broken.write_bytes(data[: len(data) // 2])
    also_good = tmp_path / "also good.jpg"
    Image.new("L", (9, 9), 128).save(also_good)
    text = tmp_path / "notes.jpg"
    text.write_text("not a photo")
    return good, broken, also_good, text, tmp_path / "missing.png"


def test_bad_files_exit_2_one_line_each_good_files_still_print(checkpoint, images, run_cli):
    good, broken, also_good, text, missing = images
    done = run_cli("predict", checkpoint, good, broken, also_good, text, missing)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 3
    for line, path, why in zip(lines, (broken, text, missing), ("truncated or corrupt", "not an image", "not found")):
        assert line.startswith(f"vitkit predict: error: {path}:") and why in line
    printed = [line for line in done.stdout.splitlines() if not line.startswith(" ")]
    assert printed == [str(good), str(also_good), "(2 images; fp32)"]  # the last: how many, and what ran
    assert done.stdout.count("%") == 6  # top 3 of 3 classes for each good image


def test_json_lines_for_the_good_files(checkpoint, images, capsys):
    good, broken, *_ = images
    assert main(["predict", str(checkpoint), str(broken), str(good), "--json"]) == 2
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["image"] for r in rows] == [str(good)] and abs(sum(t["prob"] for t in rows[0]["top"]) - 1) < 1e-5
    assert rows[0]["precision"] == "fp32"  # what ran
    assert err.strip().startswith(f"vitkit predict: error: {broken}:") and len(err.strip().splitlines()) == 1


def test_batches_give_each_image_what_it_gets_alone(checkpoint, images, capsys):
    good, broken, also_good, *_ = images
    files = [str(good), str(broken), str(also_good), str(good), str(also_good)]
    answers = {}
    for size in ("1", "2", "32"):
        assert main(["predict", str(checkpoint), *files, "--json", "--batch-size", size]) == 2  # the broken one
        answers[size] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["image"] for r in answers["2"]] == [
        str(good),
        str(also_good),
        str(good),
        str(also_good),
    ]  # in order, around the bad file
    for size in ("2", "32"):
        for alone, batched in zip(answers["1"], answers[size]):
            assert [t["label"] for t in alone["top"]] == [t["label"] for t in batched["top"]]
            assert max(abs(a["prob"] - b["prob"]) for a, b in zip(alone["top"], batched["top"])) < 1e-5


def test_all_good_exits_0(checkpoint, images, capsys):
    assert main(["predict", str(checkpoint), str(images[0])]) == 0
    assert capsys.readouterr().err == ""


def test_predict_at_reduced_precision_says_the_same(checkpoint, images, capsys):
    from vitkit.inference import precision

    if precision.native_bf16() is None:
        pytest.skip("this CPU has no native bf16")
    good = str(images[0])
    assert main(["predict", str(checkpoint), good, "--json"]) == 0
    fp32 = json.loads(capsys.readouterr().out)
    assert main(["predict", str(checkpoint), good, "--json", "--precision", "bf16"]) == 0
    bf16 = json.loads(capsys.readouterr().out)
    assert [t["label"] for t in bf16["top"]][:1] == [t["label"] for t in fp32["top"]][:1]
    assert abs(bf16["top"][0]["prob"] - fp32["top"][0]["prob"]) < 0.05


def test_int8_calibrates_on_calibration_data_where_the_checkpoint_records_none(checkpoint, images, tmp_path, capsys):
    """predict --precision int8 of a checkpoint without (or with moved) training data said to pass --data, a flag
    predict does not have; --calibration-data names the images to calibrate on."""
    pytest.importorskip("torchao")
    good = str(images[0])
    assert main(["predict", str(checkpoint), good, "--precision", "int8"]) == 2
    assert "--calibration-data PATH" in capsys.readouterr().err
    assert main(["predict", str(checkpoint), good, "--calibration-data", str(tmp_path)]) == 2  # fp32 calibrates nothing
    assert "--precision int8" in capsys.readouterr().err
    rng = np.random.default_rng(1)
    for name in ("ant", "bee", "cat"):
        (tmp_path / "calib" / name).mkdir(parents=True)
        for i in range(4):
            Image.fromarray(rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(
                tmp_path / "calib" / name / f"{i}.png"
            )
    assert (
        main(
            [
                "predict",
                str(checkpoint),
                good,
                "--json",
                "--precision",
                "int8",
                "--calibration",
                "8",
                "--calibration-data",
                str(tmp_path / "calib"),
            ]
        )
        == 0
    )
    answer = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (
        answer["precision"].startswith("int8")
        and f"8 calibration images of {tmp_path / 'calib'}" in answer["precision"]
    ), answer
    # no calibration images: every observer empty, every image called the same class at equal odds, exit 0
    assert (
        main(
            [
                "predict",
                str(checkpoint),
                good,
                "--precision",
                "int8",
                "--calibration",
                "0",
                "--calibration-data",
                str(tmp_path / "calib"),
            ]
        )
        == 2
    )
    assert (
        "calibration: int8 needs a positive number of calibration images (--calibration N), got 0"
        in capsys.readouterr().err
    )


def test_a_model_without_a_trained_head_is_refused_in_one_line(checkpoint, images, tmp_path, run_cli, vitkit_cmd):
    """A Hugging Face ViTModel (no head) gave predict and Classifier.load an IndexError traceback; a head that
    `convert --num-classes` made new printed the same probability for every class, exit 0. The first refusal runs
    the real command; the others call its main() in this process (an uncaught error fails the test there too)."""
    good, *_ = images
    backbone = vitkit.save_pretrained(vitkit.create_model("vit_test", num_classes=0), tmp_path / "backbone")
    assert vitkit_cmd("convert", checkpoint, tmp_path / "five", "--num-classes", "5").returncode == 0
    runs = iter([run_cli, *[vitkit_cmd] * 3])
    for path, why in (
        (backbone, "has no classification head"),
        (tmp_path / "five", "its classification head is all zeros"),
    ):
        for command in (["predict", path, good], ["eval", path, "--data", tmp_path]):
            done = next(runs)(*command)
            assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
            assert (
                len(done.stderr.strip().splitlines()) == 1
                and why in done.stderr
                and "vitkit finetune --from" in done.stderr
            )
        with pytest.raises(vitkit.CheckpointError, match=why):
            vitkit.Classifier.load(path)


def test_a_quoted_pattern_is_expanded_and_one_matching_nothing_is_said(checkpoint, images, tmp_path, capsys):
    """'DIR/*.png' in quotes reached vitkit as it was typed, and was refused as a file not found."""
    good, *_ = images
    Image.open(good).save(tmp_path / "more.png")
    assert main(["predict", str(checkpoint), str(tmp_path / "[gm]*.png"), "--json"]) == 0
    assert [json.loads(line)["image"] for line in capsys.readouterr().out.splitlines()] == [
        str(good),
        str(tmp_path / "more.png"),
    ]
    assert main(["predict", str(checkpoint), str(tmp_path / "*.gif")]) == 2
    assert f"{tmp_path / '*.gif'}: image file not found" in capsys.readouterr().err


def test_transparent_images_blank_on_the_model_s_background_are_said_to_be(tmp_path, images, capsys):
    """Black glyphs on a transparent ground, given to a model whose background is black: confident answers about blank
    images, and nothing said."""
    model = vitkit.create_model("vit_test", num_classes=3, background=0.0)
    torch.nn.init.normal_(model.head.weight)
    ckpt = vitkit.save_pretrained(model, tmp_path / "black", extra={"class_names": ["ant", "bee", "cat"]})
    glyph = np.zeros((16, 16, 4), np.uint8)
    glyph[4:12, 6:9, 3] = 255
    Image.fromarray(glyph, "RGBA").save(tmp_path / "glyph.png")
    assert main(["predict", str(ckpt), str(tmp_path / "glyph.png"), str(images[0])]) == 0
    err = capsys.readouterr().err
    assert err.startswith("vitkit predict: note: 1 of 1 partly transparent images looked at are one flat colour on ")
    assert f"(e.g. {tmp_path / 'glyph.png'})" in err
    on_white = vitkit.create_model("vit_test", num_classes=3, background=1.0)  # where the glyph shows
    torch.nn.init.normal_(on_white.head.weight)
    white = vitkit.save_pretrained(on_white, tmp_path / "white", extra={"class_names": ["ant", "bee", "cat"]})
    assert main(["predict", str(white), str(tmp_path / "glyph.png")]) == 0
    assert capsys.readouterr().err == ""


def test_csv_holds_each_readable_image_s_answer_and_reads_back_as_data(checkpoint, images, tmp_path, capsys):
    from vitkit.data.sources import open_split

    good, broken, also_good, *_ = images
    out = tmp_path / "answers" / "preds.csv"
    assert main(["predict", str(checkpoint), str(good), str(broken), str(also_good), "--top", "2", "--json"]) == 2
    top = {r["image"]: r["top"] for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert (
        main(["predict", str(checkpoint), str(good), str(broken), str(also_good), "--top", "2", "--csv", str(out)]) == 2
    )
    printed, err = capsys.readouterr()
    assert printed.strip() == f"wrote {out}: 2 images, top classes and probabilities (fp32)" and str(broken) in err
    lines = out.read_text().splitlines()
    assert lines[0] == "image,label,prob,label_2,prob_2" and len(lines) == 3
    for line in lines[1:]:
        image, *rest = line.split(",")
        assert rest[0::2] == [t["label"] for t in top[image]]
        assert np.allclose([float(v) for v in rest[1::2]], [t["prob"] for t in top[image]], atol=1e-6)
    # as written, with absolute paths: a list of images vitkit reads as data, labelled by the answers
    listed = open_split(out, "train", channels=3, val_fraction=0.0)
    assert [str(p) for p in listed.paths] == [str(good), str(also_good)]
    assert [listed.class_names[i] for i in listed.labels] == [
        top[str(good)][0]["label"],
        top[str(also_good)][0]["label"],
    ]


def test_csv_of_a_multi_label_model_joins_its_labels_by_semicolons(tmp_path, images, capsys):
    model = vitkit.create_model("vit_test", num_classes=3)
    torch.nn.init.normal_(model.head.weight, std=3.0)
    ckpt = vitkit.save_pretrained(
        model, tmp_path / "multi", extra={"class_names": ["ant", "bee", "cat"], "problem_type": MULTI_LABEL}
    )
    good = images[0]
    assert main(["predict", str(ckpt), str(good), "--threshold", "1e-9", "--csv", str(tmp_path / "m.csv")]) == 0
    header, row = (tmp_path / "m.csv").read_text().splitlines()
    image, labels, probs = row.split(",")
    assert header == "image,labels,probs" and image == str(good)
    assert sorted(labels.split(";")) == ["ant", "bee", "cat"] and len(probs.split(";")) == 3


def test_csv_and_json_are_one_or_the_other(checkpoint, images, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["predict", str(checkpoint), str(images[0]), "--json", "--csv", str(tmp_path / "p.csv")])
    assert stop.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    assert not (tmp_path / "p.csv").exists()
