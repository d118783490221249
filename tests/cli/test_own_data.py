"""A new user's own image folder (train/<class>/ + val/<class>/, no test/) through every command.

Every command must agree on the data, its splits, the checkpoint and its labels: `test` only ever names
images the model never trained on, the checkpoint's data is every evaluation's default, any checkpoint
path (run directory, final/, step checkpoint, file of any format) is accepted everywhere, and class
names survive every conversion.
"""

import contextlib
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

CLASSES = ("ankle boot", "bag", "coat")
TRAIN_ARGS = (
    "model.name=vit_test",
    "model.image_size=16",
    "model.depth=1",
    "train.steps=12",
    "train.batch_size=8",
    "train.warmup_steps=2",
    "train.log_every=4",
    "train.eval_every=6",
    "train.checkpoint_every=6",
    "train.lr=3e-3",
    "train.threads=1",
    "train.eval_batch_size=64",
    "augment.crop=none",
    "train.figures=false",
    "--no-progress",
)


def make_images(root: Path, per_class: int, seed: int) -> None:
    """root/<class>/*: odd sizes, RGB and grayscale mixed; each class its own brightness pattern."""
    rng = np.random.default_rng(seed)
    for label, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            h, w = int(rng.integers(17, 41)), int(rng.integers(17, 41))
            base = np.zeros((h, w, 3), np.uint8)
            base[..., label] = 220  # class = which channel is bright (in grayscale: how bright)
            noise = rng.integers(0, 30, (h, w, 3), dtype=np.uint8)
            image = Image.fromarray(base + noise)
            if i % 3 == 2:
                image = image.convert("L")
            image.save(root / name / f"{i:03d}.png")


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """(data folder, run directory) of a tiny ViT trained on all of data/train/ (val/ validates; no test/), by
    `vitkit train` in this process (the vitkit_cmd fixture's way, which a module's fixture cannot ask for)."""
    import torch

    from vitkit.cli import main

    root = tmp_path_factory.mktemp("own")
    make_images(root / "data" / "train", per_class=10, seed=0)
    make_images(root / "data" / "val", per_class=4, seed=1)
    args = ["train", "--data", "data", "--out", "runs/photos", *TRAIN_ARGS]  # a relative --data
    before, threads, out, err = os.getcwd(), torch.get_num_threads(), io.StringIO(), io.StringIO()
    os.chdir(root)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(args)
    finally:
        os.chdir(before)
        torch.set_num_threads(threads)
    done = subprocess.CompletedProcess(["vitkit", *args], code, out.getvalue(), err.getvalue())
    assert done.returncode == 0, done.stderr
    return root / "data", root / "runs" / "photos", done


def last_json(done) -> dict:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def named(record: dict) -> dict:
    """A split's record without its digest (a hash of the file names, checked by the tests of the data changing)."""
    assert len(record.get("digest", "")) == 16, record
    return {k: v for k, v in record.items() if k != "digest"}


def one_line_error(done, *words: str) -> str:
    """Exit code 2 and one line on stderr holding every word."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# -- 1. "test" only names images the model never trained on -----------------------------------
def test_eval_refuses_a_test_split_the_data_does_not_have(own, vitkit_cmd, run_cli):
    data, run, _ = own
    line = one_line_error(
        run_cli("eval", run, "--threads", "1"), "test", "train, val", "--split val"
    )  # the console script
    assert str(data) in line
    result = last_json(vitkit_cmd("eval", run, "--split", "val", "--json", "--threads", "1"))
    assert (result["data"], result["split"], result["n"]) == (str(data), "val", 12)  # the real val/, 3 classes x 4
    result = last_json(vitkit_cmd("eval", run, "--split", "train", "--json", "--threads", "1"))
    assert (result["split"], result["n"]) == ("train", 30)  # all of train/: nothing was held out of it


def test_linear_probe_refuses_test_and_scores_val(own, vitkit_cmd, tmp_path):
    data, run, _ = own
    one_line_error(
        vitkit_cmd("linear-probe", run, "--threads", "1", "--out", tmp_path / "a"), "test", "--test-split val"
    )
    result = last_json(
        vitkit_cmd(
            "linear-probe", run, "--test-split", "val", "--l2", "1e-2", "--threads", "1", "--out", tmp_path / "b"
        )
    )
    assert (result["data"], result["split"], result["n"]) == (str(data), "val", 12)
    # l2 is not picked on the val images it is scored on, but on a held-out share of train/ (10% of 30)
    assert named(result["picked_on"]) == {
        "source": str(data / "train"),
        "selection": "0.1 held out by class (seed 0)",
        "n": 3,
    }
    assert named(result["fitted_on"]) == {
        "source": str(data / "train"),
        "selection": "all but the 0.1 held out by class (seed 0)",
        "n": 27,
    }
    assert "fitted on 27 images" in (tmp_path / "b" / "linear_probe.md").read_text()
    # the accuracy l2 was picked by is not named val_top1 beside "split": "val" (it is of the 3 held-out train images)
    assert (
        "val_top1" not in json.dumps(result)
        and 0 <= result["picking_top1"] <= 1
        and set(result["runs"][0]) == {"l2", "picking_top1"}
    )
    # a share that holds out no image (a traceback from the solver), or none at all (silently 0.1): one error each
    one_line_error(
        vitkit_cmd(
            "linear-probe",
            run,
            "--test-split",
            "val",
            "--val-fraction",
            "0.005",
            "--threads",
            "1",
            "--out",
            tmp_path / "c",
        ),
        "no images to pick l2 on",
        "raise --val-fraction",
    )
    one_line_error(
        vitkit_cmd(
            "linear-probe", run, "--test-split", "val", "--val-fraction", "0", "--threads", "1", "--out", tmp_path / "c"
        ),
        "--val-fraction 0",
        "above 0",
    )


@pytest.mark.parametrize("command", ["knn", "fewshot"])
def test_features_fitted_and_scored_on_one_split_are_refused(own, vitkit_cmd, tmp_path, command):
    """fewshot --train-split val --test-split val drew its shots from the very images it scored, and said nothing."""
    _, run, _ = own
    one_line_error(
        vitkit_cmd(command, run, "--train-split", "val", "--test-split", "val", "--out", tmp_path),
        "--train-split and --test-split are both val",
        "choose two splits",
    )


def test_knn_says_when_k_is_more_than_the_training_features(own, vitkit_cmd, tmp_path):
    _, run, _ = own
    result = last_json(
        vitkit_cmd("knn", run, "--test-split", "val", "--k", "3,50", "--threads", "1", "--out", tmp_path)
    )
    assert set(result["top1"]) == {"3", "50"} and result["n_train"] == 30
    table = (tmp_path / "knn.md").read_text()
    assert "| 50 (all 30) |" in table and "| 3 |" in table


def test_a_figure_on_the_images_that_picked_a_sweeps_model_says_so(own, vitkit_cmd, tmp_path):
    data, run, _ = own
    sweep = tmp_path / "sweep"
    last_json(
        vitkit_cmd(
            "finetune",
            "--from",
            run,
            "--lr",
            "0.003,0.01",
            "--steps",
            "2",
            "--batch-size",
            "8",
            "--out",
            sweep,
            "--no-progress",
            "train.threads=1",
            "train.warmup_steps=1",
            "train.eval_batch_size=64",
        )
    )
    picked = json.loads((sweep / "sweep.json").read_text())["best"]["run"]
    assert (
        f"by final top-1 on the val split: 12 images ({data / 'val'}, all)." in (sweep / "sweep.md").read_text()
    )  # which, how many
    other = ({"lr_0.003", "lr_0.01"} - {picked}).pop()
    for checkpoint, split, warned in [
        (sweep, "val", True),
        (sweep / picked, "val", True),
        (sweep, "train", False),
        (sweep / other, "val", False),
    ]:
        done = vitkit_cmd("eval", checkpoint, "--split", split, "--json", "--threads", "1")
        assert last_json(done)["picked_on_this_split"] is warned, (checkpoint, split)
        assert ("note: these val images picked this model's learning rate among 2 runs" in done.stdout) is warned
    done = vitkit_cmd(
        "eval", sweep, "--data", data / "val", "--json", "--threads", "1"
    )  # the same images as one folder: "all"
    assert (
        last_json(done)["picked_on_this_split"]
        and "note: these images picked this model's learning rate" in done.stdout
    )
    scored = last_json(
        vitkit_cmd("knn", sweep, "--test-split", "val", "--k", "3", "--threads", "1", "--out", tmp_path / "knn")
    )
    assert (
        scored["picked_on_this_split"] and "Note: these val images picked" in (tmp_path / "knn" / "knn.md").read_text()
    )
    baseline = last_json(
        vitkit_cmd(
            "knn",
            sweep,
            "--test-split",
            "val",
            "--k",
            "3",
            "--random-init",
            "0",
            "--threads",
            "1",
            "--out",
            tmp_path / "r",
        )
    )
    assert not baseline["picked_on_this_split"]  # random weights: nothing was picked
    # the picked model converted, or copied out of the sweep, still says so (it said nothing: the pick lived in sweep.json)
    assert vitkit_cmd("convert", sweep, tmp_path / "picked.safetensors").returncode == 0
    shutil.copytree(sweep / picked / "final", tmp_path / "copied")
    # a converted model names its data by the folder's name only (no local path): the data is named
    for checkpoint, named in ((tmp_path / "picked.safetensors", ["--data", data]), (tmp_path / "copied", [])):
        done = vitkit_cmd("eval", checkpoint, *named, "--split", "val", "--json", "--threads", "1")
        assert (
            last_json(done)["picked_on_this_split"] and "picked this model's learning rate among 2 runs" in done.stdout
        )
    shutil.copytree(sweep, tmp_path / "kept")
    sweep.rename(tmp_path / "moved")  # the note names the sweep.json that is there now (it named the old path)
    done = vitkit_cmd("eval", tmp_path / "moved", "--split", "val", "--json", "--threads", "1")
    assert f"among 2 runs ({tmp_path / 'moved' / 'sweep.json'})" in done.stdout
    shutil.rmtree(tmp_path / "moved" / picked)
    shutil.rmtree(tmp_path / "moved" / other)
    (tmp_path / "moved" / "sweep.json").unlink()
    done = vitkit_cmd("eval", tmp_path / "copied", "--split", "val", "--json", "--threads", "1")
    assert f"among 2 runs ({sweep / 'sweep.json'}, no longer there)" in done.stdout
    (tmp_path / "kept").rename(sweep)
    unfinished = tmp_path / "unfinished"  # a sweep cut before its first run finished holds only its plan
    unfinished.mkdir()
    shutil.copy(sweep / "finetune.json", unfinished)
    one_line_error(
        vitkit_cmd("eval", unfinished, "--split", "val"), "a fine-tuning sweep that has not finished", "vitkit finetune"
    )


def test_a_data_path_given_through_dot_dot_is_recorded_without_it(own, vitkit_cmd, tmp_path):
    data, _, _ = own
    last_json(
        vitkit_cmd(
            "train",
            "--data",
            f"../{data.parent.name}/data",
            "--out",
            tmp_path / "run",
            *TRAIN_ARGS,
            "train.steps=1",
            cwd=data.parent,
        )
    )
    recorded = json.loads((tmp_path / "run" / "final" / "config.json").read_text())["data"]["path"]
    assert recorded == str(data) and ".." not in recorded  # it holds without the directory it was given from


def test_resume_refuses_data_that_changed_since_the_checkpoint(own, vitkit_cmd, tmp_path):
    data, _, _ = own
    shutil.copytree(data, tmp_path / "data")
    args = [a for a in TRAIN_ARGS if not a.startswith("train.steps=")]
    last_json(vitkit_cmd("train", "--data", tmp_path / "data", "--out", tmp_path / "run", *args, "train.steps=6"))
    added = tmp_path / "data" / "train" / "bag" / "extra.png"
    shutil.copy(next((tmp_path / "data" / "train" / "bag").glob("*.png")), added)
    line = one_line_error(
        vitkit_cmd("train", "--resume", tmp_path / "run", "train.steps=12", "--no-progress"),
        "the train split changed",
        "30 images",
        "31 images",
        "model.init=",
    )
    assert str(tmp_path / "data" / "train") in line
    added.unlink()  # as it was: the resume goes on
    assert (
        last_json(vitkit_cmd("train", "--resume", tmp_path / "run", "train.steps=12", "--no-progress"))["steps"] == 12
    )


def test_a_held_out_val_cut_again_from_changed_data_is_refused_by_every_evaluation(own, vitkit_cmd, tmp_path):
    """A folder with train/ only: val is a seeded cut of it. Once images are added, the same seed cuts other images,
    some of them trained on; eval and the frozen-feature commands scored those as "val" without a word before."""
    data, _, _ = own
    shutil.copytree(data / "train", tmp_path / "data" / "train")
    last_json(vitkit_cmd("train", "--data", tmp_path / "data", "--out", tmp_path / "run", *TRAIN_ARGS, "train.steps=2"))
    before = last_json(vitkit_cmd("eval", tmp_path / "run", "--split", "val", "--json", "--threads", "1"))
    assert (before["n"], before["images"]["selection"]) == (3, "0.1 held out by class (seed 0)")
    for i in range(6):
        shutil.copy(data / "val" / "coat" / "000.png", tmp_path / "data" / "train" / "coat" / f"new{i}.png")
    for command, extra in (
        ("eval", ("--split", "val")),
        ("knn", ("--test-split", "val", "--k", "3", "--out", tmp_path / "knn")),
        ("linear-probe", ("--test-split", "val", "--l2", "1e-2", "--out", tmp_path / "probe")),
    ):
        line = one_line_error(
            vitkit_cmd(command, tmp_path / "run", *extra, "--threads", "1"),
            "the val split is cut from the training images",
            "3 images",
            "4 images",
            "trained on",
        )
        assert str(tmp_path / "data" / "train") in line
    one_line_error(
        vitkit_cmd("eval", tmp_path / "run", "--split", "val", "--val-fraction", "0.3", "--data", tmp_path / "data"),
        "0.3 held out",
        "--val-fraction at 0.1",
    )
    for i in range(6):
        (tmp_path / "data" / "train" / "coat" / f"new{i}.png").unlink()  # as it was: the same 3 images again
    assert (
        last_json(vitkit_cmd("eval", tmp_path / "run", "--split", "val", "--json", "--threads", "1"))["top1"]
        == before["top1"]
    )
    moved = tmp_path / "data" / "train" / "coat" / "000.png"  # the same count, one image renamed: another cut
    moved.rename(moved.with_name("zzz.png"))
    one_line_error(
        vitkit_cmd("eval", tmp_path / "run", "--split", "val", "--threads", "1"),
        "the val split is cut from the training images",
    )


def test_eval_scores_other_data_by_class_name_and_refuses_classes_the_model_lacks(own, vitkit_cmd, tmp_path):
    data, run, _ = own
    shutil.copytree(data / "val" / "coat", tmp_path / "coats" / "val" / "coat")  # one class of three, the model's last
    shutil.copytree(data / "train" / "coat", tmp_path / "coats" / "train" / "coat")
    by_name = last_json(
        vitkit_cmd("eval", run, "--data", tmp_path / "coats", "--split", "val", "--json", "--threads", "1")
    )
    own = last_json(vitkit_cmd("eval", run, "--split", "val", "--json", "--threads", "1"))
    wanted = own["per_class"]["coat"]
    assert by_name["n"] == 4 and by_name["top1"] == wanted  # label 0 of that folder is the model's class 2
    # the run's own val figure is not replaced by one of other data (it was: both RUN/eval/confusion_val.png)
    assert Path(own["confusion_png"]).name == "confusion_val.png" and Path(by_name["confusion_png"]).name.startswith(
        "confusion_val_coats_"
    )
    assert by_name["per_class"] == {"ankle boot": None, "bag": None, "coat": wanted}
    assert (
        by_name["per_class_n"] == {"ankle boot": 0, "bag": 0, "coat": 4}
        and sum(own["per_class_n"].values()) == own["n"]
    )
    text = vitkit_cmd("eval", run, "--data", tmp_path / "coats", "--split", "val", "--threads", "1").stdout
    assert (
        f"  coat        {wanted:.4f}  (4 images)" in text and "  bag         -       (no images)" in text
    )  # each figure: how many
    shutil.copytree(data / "val" / "bag", tmp_path / "other" / "val" / "handbag")
    shutil.copytree(data / "train" / "bag", tmp_path / "other" / "train" / "handbag")
    one_line_error(
        vitkit_cmd("eval", run, "--data", tmp_path / "other", "--split", "val"),
        "'handbag'",
        "ankle boot, bag, coat",
        "--labels-by-index",
    )
    assert (
        last_json(
            vitkit_cmd("eval", run, "--data", tmp_path / "other", "--split", "val", "--labels-by-index", "--json")
        )["n"]
        == 4
    )


def test_eval_of_a_folder_without_splits_scores_every_image_in_it(own, vitkit_cmd, tmp_path):
    """--data of one folder of class folders (someone's own held-out photos): all of its images by default, not the 10%
    slice "val" holds out of it, nor an error that it has no test split; --split val still means that slice."""
    data, run, _ = own
    every = last_json(vitkit_cmd("eval", run, "--data", data / "val", "--json", "--threads", "1"))
    assert (every["split"], every["n"], every["images"]["selection"]) == ("all", 12, "all")
    assert (
        every["top1"] == last_json(vitkit_cmd("eval", run, "--split", "val", "--json", "--threads", "1"))["top1"]
    )  # the same 12
    assert (
        last_json(vitkit_cmd("eval", run, "--data", data / "val", "--split", "val", "--json", "--threads", "1"))["n"]
        == 1
    )
    one_line_error(vitkit_cmd("eval", run, "--data", data, "--split", "all"), "--split all:", "has splits")


def test_eval_stops_at_an_unreadable_image_or_scores_without_it_saying_so(own, vitkit_cmd, tmp_path):
    _, run, _ = own
    make_images(tmp_path / "held" / "photos", per_class=2, seed=3)
    (tmp_path / "held" / "photos" / "bag" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    one_line_error(vitkit_cmd("eval", run, "--data", tmp_path / "held" / "photos"), "broken.png", "--skip-unreadable")
    done = vitkit_cmd(
        "eval", run, "--data", tmp_path / "held" / "photos", "--skip-unreadable", "--json", "--threads", "1"
    )
    result = last_json(done)
    assert (result["n"], result["images"]["n"]) == (6, 7) and result["unreadable"][0]["path"].endswith("broken.png")
    assert "(6 images: " in done.stdout and ", 1 unreadable skipped; " in done.stdout
    assert "top-5" not in done.stdout  # 3 classes: top-5 is 1 whatever the model does, so it is not printed


@pytest.mark.parametrize("command", ["knn", "fewshot", "linear-probe"])
def test_frozen_feature_commands_skip_unreadable_images_when_asked_and_say_so(own, vitkit_cmd, tmp_path, command):
    """One broken file stopped fewshot, knn and linear-probe with no way round it (train skips such files by default)."""
    data, run, _ = own
    shutil.copytree(data, tmp_path / "data")
    (tmp_path / "data" / "train" / "bag" / "000.png").write_bytes(
        b"\x89PNG\r\n\x1a\n not really"
    )  # 10 a class, one broken
    extra = {"knn": ("--k", "3"), "fewshot": ("--shots", "9", "--seeds", "1"), "linear-probe": ("--l2", "1e-2")}[
        command
    ]
    args = (command, run, "--data", tmp_path / "data", "--test-split", "val", *extra, "--threads", "1")
    one_line_error(vitkit_cmd(*args, "--out", tmp_path / "a"), "000.png", "--skip-unreadable leaves such files out")
    result = last_json(vitkit_cmd(*args, "--skip-unreadable", "--out", tmp_path / "b"))
    assert [u["path"] for u in result["unreadable"]] == [str(tmp_path / "data" / "train" / "bag" / "000.png")]
    report = (tmp_path / "b" / f"{command.replace('-', '_')}.md").read_text()
    assert "; 1 unreadable image of the other splits it read left out" in report  # of train, not the scored split
    if command == "knn":
        assert result["n_train"] == 29 and "the 29 readable of 30 images" in report
    if (
        command == "fewshot"
    ):  # 9 shots of 10 images a class: where the broken one is drawn, bag is drawn again without it
        assert 27 <= result["n_train_features"] <= 29 and 0 <= result["shots"]["9"]["mean"] <= 1  # readable ones only


def test_a_report_on_other_data_is_written_beside_the_one_on_the_runs_own_data(own, vitkit_cmd, tmp_path):
    """knn (fewshot, linear-probe) with --data of other images replaced RUN/knn/, the report on the run's own data."""
    data, run, _ = own
    shutil.copytree(run, tmp_path / "run")
    shutil.copytree(data, tmp_path / "other")
    args = ("--test-split", "val", "--k", "3", "--threads", "1")
    last_json(vitkit_cmd("knn", tmp_path / "run", *args))
    first = (tmp_path / "run" / "knn" / "knn.json").read_text()
    assert last_json(vitkit_cmd("knn", tmp_path / "run", "--data", tmp_path / "other", *args))["data"] == str(
        tmp_path / "other"
    )
    assert (tmp_path / "run" / "knn" / "knn.json").read_text() == first
    assert [p.parent.name.startswith("knn_other_") for p in (tmp_path / "run").glob("knn_*/knn.json")] == [True]


def test_eval_says_which_scored_images_are_copies_of_training_images(own, vitkit_cmd, tmp_path):
    """A copy of a training image in test/ was scored as unseen, unsaid (splits are kept apart by folder)."""
    data, run, _ = own
    for folder in sorted((data / "train").iterdir()):
        (tmp_path / "d" / "test" / folder.name).mkdir(parents=True)
        first = sorted(folder.iterdir())[0]
        shutil.copy(first, tmp_path / "d" / "test" / folder.name / f"copy{first.suffix}")
    shutil.copytree(data / "train", tmp_path / "d" / "train")
    done = vitkit_cmd("eval", run, "--data", tmp_path / "d", "--split", "test", "--json", "--threads", "1")
    assert last_json(done)["copies_of_training_images"] == 3
    assert "note: 3 of these test images are byte-identical to images the model trained on" in done.stdout
    clean = last_json(vitkit_cmd("eval", run, "--split", "val", "--json", "--threads", "1"))
    assert "copies_of_training_images" not in clean
    # the frozen-feature commands scored them unsaid
    for command in (["knn", "--k", "1"], ["fewshot", "--shots", "1", "--seeds", "1"]):
        done = vitkit_cmd(
            *command[:1], run, "--data", tmp_path / "d", "--test-split", "test", "--threads", "1", *command[1:]
        )
        assert (
            last_json(done)["copies_of_training_images"] == 3
            and "3 of these test images are byte-identical" in done.stdout
        )
    done = vitkit_cmd("knn", run, "--data", data, "--test-split", "val", "--k", "1", "--threads", "1")
    assert "copies_of_training_images" not in last_json(done)
    from vitkit.evaluate.provenance import (
        copies_note,  # a scored file that is itself a training image: named once ("x = x" before)
    )

    note = copies_note({"images": 1, "example": ["a/x.png", "a/x.png"]}, "val")
    # fewshot, knn and linear-probe reports put it above their table: "the figures above" was wrong there
    assert "(e.g. a/x.png, itself a training image)" in note and note.endswith("counts as unseen in these figures")


@pytest.mark.parametrize(
    "command",
    [["knn", "--k", "1"], ["fewshot", "--shots", "1"], ["linear-probe"], ["finetune", "--lr", "0.01", "--steps", "1"]],
)
def test_an_out_that_cannot_hold_the_results_is_refused_before_any_work(own, vitkit_cmd, tmp_path, command):
    """A file as --out was found after all the feature work ("afile: File exists", 14-48 s later), and finetune printed its
    data line first ("Not a directory")."""
    _, run, _ = own
    (tmp_path / "afile").write_text("mine")
    args = [
        command[0],
        *(["--from"] if command[0] == "finetune" else []),
        run,
        *command[1:],
        "--out",
        tmp_path / "afile" / "x",
    ]
    done = vitkit_cmd(*args)
    assert done.stdout == "" and (tmp_path / "afile").read_text() == "mine"
    one_line_error(done, f"{tmp_path / 'afile'}: is a file, not a directory", "choose another --out")


def test_info_says_how_many_training_images_were_unreadable_and_left_out(own, vitkit_cmd, tmp_path):
    """vitkit info said a model trained on 31 images where one of them could not be read and was skipped (30)."""
    data, _, _ = own
    shutil.copytree(data, tmp_path / "data")
    (tmp_path / "data" / "train" / "bag" / "zz.png").write_bytes(b"not an image")
    last_json(vitkit_cmd("train", "--data", "data", "--out", "run", *TRAIN_ARGS, "train.steps=2", cwd=tmp_path))
    done = vitkit_cmd("info", tmp_path / "run")
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if "train images" in line)
    assert f"31 images ({tmp_path / 'data' / 'train'}, all); 1 unreadable, left out (30 trained on)" in line, line
    assert "unreadable" not in next(line for line in done.stdout.splitlines() if "val images" in line)


def test_fewshot_draws_every_shot_from_readable_images(own, vitkit_cmd, tmp_path):
    """A draw that took an unreadable image scored with one shot fewer for that class (the table still said 9 shots),
    and n_train_features counted the unreadable image as a feature."""
    data, run, _ = own
    shutil.copytree(data, tmp_path / "data")
    (tmp_path / "data" / "train" / "bag" / "000.png").write_bytes(b"not an image")  # bag: 9 readable of 10
    args = (
        "fewshot",
        run,
        "--data",
        tmp_path / "data",
        "--test-split",
        "val",
        "--seeds",
        "3",
        "--skip-unreadable",
        "--threads",
        "1",
    )
    result = last_json(vitkit_cmd(*args, "--shots", "9", "--out", tmp_path / "a"))
    assert result["n_train_features"] == 29  # bag's 9 readable images in every draw, the others' 10 between the seeds
    done = vitkit_cmd(
        *args, "--shots", "10", "--out", tmp_path / "b"
    )  # the one warning of the skipped image, then one error
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert (
        "class 'bag' has 9 readable training images, fewer than 10 shots; ask for fewer --shots"
        in done.stderr.strip().splitlines()[-1]
    )


def test_train_warns_of_val_images_that_are_copies_of_training_images(own, vitkit_cmd, tmp_path):
    """A val/ holding copies of training images (a finetune's lr was picked on one made all of them) trained unsaid,
    where `vitkit data` warns of it."""
    data, _, _ = own
    shutil.copytree(data, tmp_path / "data")
    shutil.copy(data / "train" / "coat" / "003.png", tmp_path / "data" / "val" / "coat" / "again.png")
    done = vitkit_cmd("train", "--data", "data", "--out", "run", *TRAIN_ARGS, "train.steps=2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (
        "warning    1 val image is byte-identical to training images (e.g. "
        f"{tmp_path / 'data' / 'val' / 'coat' / 'again.png'} = {tmp_path / 'data' / 'train' / 'coat' / '003.png'})"
    ) in done.stdout


def test_finetune_fits_its_length_and_crop_to_the_data_and_compares_with_the_model_it_started_from(
    own, vitkit_cmd, tmp_path
):
    """A finetune of a run on 1,400 small images planned 10,000 steps of 512 with an Inception crop down to 5% of a
    32-px image, said the val/ folder was "held out as it was: val_fraction 0.1", and never said it made the model
    worse than the one it started from."""
    data, run, _ = own
    done = vitkit_cmd(
        "finetune", "--from", run, "--image-size", "24", "--out", tmp_path / "ft", "--no-progress", "train.threads=1"
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"validated on {data / 'val'} as it was" in out and "held out as it was" not in out
    assert "fitted to 30 training images" in out and "(5 epochs)" in out
    plan = next(line for line in out.splitlines() if line.startswith("training   steps"))
    steps, batch = int(plan.split(" of ")[1].split(",")[0]), int(plan.split("batch ")[1].split(",")[0])
    assert steps * batch <= 5 * 30 < (steps + 1) * batch  # a few epochs' worth, not the paper's 10k steps
    assert "augment    padded random crop, shifts of up to 1 px" in out  # no Inception crop of 17-40 px images
    sweep = last_json(done)
    start = sweep["started_from"]
    assert start["images"] == 12 and start["image_size"] == [16, 16]
    closing = f"val top-1 {sweep['best']['final_val_top1']:.4f} on 12 images ({data / 'val'}, all), was {start['val_top1']:.4f}"
    assert closing in out, out


def test_the_closing_line_warns_when_fine_tuning_made_the_model_worse():
    from vitkit.train.finetune import compared_with_start

    result = {
        "best": {"final_val_top1": 0.698},
        "val_images": {"source": "data/val", "selection": "all", "n": 397},
        "started_from": {"val_top1": 0.856, "images": 397, "image_size": [32, 32]},
    }
    worse = compared_with_start(result, "runs/digits")
    assert worse[0] == "val top-1 0.6980 on 397 images (data/val, all), was 0.8560 (runs/digits at 32 px)"
    assert worse[1].startswith("warning    fine-tuning made it worse: 0.6980 against 0.8560 for runs/digits")
    result["best"]["final_val_top1"] = 0.91
    assert len(compared_with_start(result, "runs/digits")) == 1  # better: no warning
    result["started_from"] = None  # other classes: nothing to compare with, and said so
    assert "nothing to compare with" in compared_with_start(result, "runs/digits")[0]


def test_a_fine_tuned_model_knows_the_images_it_was_pre_trained_on(own, vitkit_cmd, tmp_path):
    """A model fine-tuned from a run on data/train scored copies of data/train in its new test/ as unseen: its
    checkpoint recorded the fine-tuning data alone."""
    data, run, _ = own
    make_images(tmp_path / "b" / "train", per_class=8, seed=5)
    make_images(tmp_path / "b" / "val", per_class=2, seed=6)
    for folder in sorted((data / "train").iterdir()):  # test/: one image of each class the pre-training saw
        (tmp_path / "b" / "test" / folder.name).mkdir(parents=True)
        shutil.copy(sorted(folder.iterdir())[0], tmp_path / "b" / "test" / folder.name / "seen.png")
    done = vitkit_cmd(
        "finetune",
        "--from",
        run,
        "--data",
        tmp_path / "b",
        "--image-size",
        "16",
        "--lr",
        "0.01",
        "--steps",
        "1",
        "--batch-size",
        "8",
        "--out",
        tmp_path / "ft",
        "--no-progress",
        "train.warmup_steps=1",
        "train.threads=1",
        "augment.crop=none",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "ft" / "final" / "config.json").read_text())["pretrained_on"][0]["path"] == str(data)
    done = vitkit_cmd("eval", tmp_path / "ft", "--split", "test", "--json", "--threads", "1")
    assert last_json(done)["copies_of_training_images"] == 3
    assert (
        "note: 3 of these test images are byte-identical to images the model, or the checkpoint it was fine-tuned from, trained on"
        in done.stdout
    )
    done = vitkit_cmd("inspect", tmp_path / "ft", "--images", tmp_path / "b" / "test", "--out", tmp_path / "insp")
    assert done.returncode == 0 and "3 of them in this model's training data" in done.stdout.splitlines()[0]
    assert (
        f"pre-trained on {data}, split train"
        in json.loads((tmp_path / "insp" / "inspection.json").read_text())["training_data"]
    )


def test_an_out_inside_the_data_folder_is_refused_in_words_that_say_so(own, vitkit_cmd):
    """train --data DIR --out DIR/run failed with "DIR/run: empty class folder", blaming a folder the user never made."""
    data, _, _ = own
    before = sorted(p.name for p in data.iterdir())
    one_line_error(
        vitkit_cmd("train", "--data", data, "--out", data / "run", *TRAIN_ARGS),
        "is inside the data folder",
        "choose an --out outside it",
    )
    assert sorted(p.name for p in data.iterdir()) == before


def test_splits_that_changed_since_training_are_said_and_unreadable_files_are_counted_where_they_are(
    own, vitkit_cmd, tmp_path
):
    """A training image moved into val/ after training was scored as held out with no word (the record's digests said
    the splits had changed; only --resume looked), and knn put the training split's unreadable files on the scored one."""
    data, _, _ = own
    shutil.copytree(data, tmp_path / "data")
    last_json(vitkit_cmd("train", "--data", "data", "--out", "run", *TRAIN_ARGS, "train.steps=2", cwd=tmp_path))
    (tmp_path / "data" / "train" / "bag" / "000.png").rename(tmp_path / "data" / "val" / "bag" / "moved.png")
    done = vitkit_cmd("eval", tmp_path / "run", "--split", "val", "--json", "--threads", "1")
    changed = last_json(done)["changed_since_training"]
    assert sorted(changed) == ["train", "val"] and (changed["train"]["then"]["n"], changed["train"]["now"]["n"]) == (
        30,
        29,
    )
    assert (
        f"note: the train split changed since the checkpoint was trained (30 images ({tmp_path / 'data' / 'train'}, all) then, "
        "29 images"
    ) in done.stdout and "note: the val split changed since" in done.stdout
    done = vitkit_cmd(
        "inspect", tmp_path / "run", "--split", "val", "--out", tmp_path / "insp"
    )  # it said "none of them trained on"
    assert done.returncode == 0 and "not checked against its training data" in done.stdout.splitlines()[0]
    assert (
        "changed since the checkpoint was trained"
        in json.loads((tmp_path / "insp" / "inspection.json").read_text())["training_data"]
    )
    (tmp_path / "data" / "train" / "bag" / "bad.png").write_bytes(b"not an image")
    done = vitkit_cmd(
        "knn",
        tmp_path / "run",
        "--test-split",
        "val",
        "--k",
        "1",
        "--threads",
        "1",
        "--skip-unreadable",
        "--out",
        tmp_path / "knn",
    )
    assert sorted(last_json(done)["changed_since_training"]) == ["train", "val"]
    report = (tmp_path / "knn" / "knn.md").read_text()
    assert (
        f"(13 images: {tmp_path / 'data' / 'val'}, all); 1 unreadable image of the other splits it read left out"
        in report
    )
    assert "The train split changed since the checkpoint was trained" in report
    # the data moved away: --data names other images to score (it was refused: "pass --data PATH", with --data given), and
    # the copy check cannot be done, which is said (it was left out unsaid)
    (tmp_path / "data").rename(tmp_path / "moved")
    done = vitkit_cmd("eval", tmp_path / "run", "--data", tmp_path / "moved" / "val", "--json", "--threads", "1")
    assert last_json(done)["copies_of_training_images"] is None and last_json(done)["n"] == 13
    assert "note: these images were not checked for copies of the images the model trained on (" in done.stdout
    done = vitkit_cmd("inspect", tmp_path / "run", "--images", tmp_path / "moved" / "val", "--out", tmp_path / "insp2")
    assert done.returncode == 0 and "pass --data" not in (tmp_path / "insp2" / "inspection.json").read_text()


@pytest.mark.parametrize("target", [None, "m.safetensors", "m.npz"])
def test_info_shows_the_class_names_and_the_images_a_checkpoint_was_trained_on(own, vitkit_cmd, tmp_path, target):
    data, run, _ = own
    path = run
    if target:
        assert vitkit_cmd("convert", run, tmp_path / target).returncode == 0
        path = tmp_path / target
    done = vitkit_cmd("info", path)
    assert done.returncode == 0, done.stderr
    assert "class_names          3: ankle boot, bag, coat" in done.stdout
    # the run records where its images are; a converted checkpoint (an export) names the split only
    where = data / "train" if target is None else "train"
    assert f"train images         30 images ({where}, all)" in done.stdout
    assert json.loads(vitkit_cmd("info", path, "--json").stdout)["metadata"]["data"]["splits"]["val"]["n"] == 12


def test_the_checkpoint_records_exactly_which_images_trained_it(own):
    data, run, _ = own
    recorded = json.loads((run / "final" / "config.json").read_text())["data"]
    assert recorded["path"] == str(data) and Path(recorded["path"]).is_absolute()  # --data was relative
    assert (recorded["train_split"], recorded["val_split"], recorded["split_seed"]) == ("train", "val", 0)
    assert named(recorded["splits"]["train"]) == {"source": str(data / "train"), "selection": "all", "n": 30}
    assert named(recorded["splits"]["val"]) == {"source": str(data / "val"), "selection": "all", "n": 12}
    summary = json.loads((run / "summary.json").read_text())  # the run's final figures say which images they are on
    assert summary["val_images"] == recorded["splits"]["val"] and summary["val_split"] == "val"


# -- 2. the checkpoint's data is every evaluation's default -------------------------------------
@pytest.mark.parametrize("command", ["fewshot", "knn"])
def test_frozen_feature_commands_default_to_the_checkpoints_data(own, vitkit_cmd, tmp_path, command):
    data, run, _ = own
    extra = ("--shots", "2", "--seeds", "1") if command == "fewshot" else ("--k", "3")
    one_line_error(
        vitkit_cmd(command, run, *extra, "--threads", "1", "--out", tmp_path / "a"),
        "test",
        "train, val",
        "--test-split val",
    )
    one_line_error(
        vitkit_cmd(
            command,
            run,
            *extra,
            "--data",
            data / "train",
            "--val-fraction",
            "0",
            "--threads",
            "1",
            "--out",
            tmp_path / "a",
        ),
        "has no 'test' split (it has train)",
        "--val-fraction 0.1",
        "--test-split val",
    )
    result = last_json(
        vitkit_cmd(command, run, *extra, "--test-split", "val", "--threads", "1", "--out", tmp_path / "b")
    )
    assert (result["data"], result["split"], result["n"]) == (str(data), "val", 12)
    train = {
        "source": str(data / "train"),
        "selection": "all",
        "n": 30,
    }  # the images it fits on (or votes among) are named too
    assert named(result["shots_from" if command == "fewshot" else "memory_bank"]) == train
    assert f"30 images ({data / 'train'}, all)" in (tmp_path / "b" / f"{command}.md").read_text()


def test_fewshot_runs_the_paper_shots_the_smallest_class_has_images_for(own, vitkit_cmd, tmp_path):
    """10 training images per class: the default 1/5/10/25 shots run 1, 5 and 10 and say why 25 is left out, where it was
    one error before ("class 0 has 10 training images"); a count asked for that no class can give is one error naming it."""
    _, run, _ = own
    done = vitkit_cmd("fewshot", run, "--test-split", "val", "--seeds", "1", "--threads", "1", "--out", tmp_path / "d")
    result = last_json(done)
    assert list(result["shots"]) == ["1", "5", "10"] and (result["shots_left_out"], result["fewest_per_class"]) == (
        [25],
        10,
    )
    assert "vitkit fewshot: 25 shots left out: class 'ankle boot' has 10 images in " in done.stdout
    assert (
        "25 shots left out: the smallest class has 10 training images." in (tmp_path / "d" / "fewshot.md").read_text()
    )
    one_line_error(
        vitkit_cmd("fewshot", run, "--test-split", "val", "--shots", "5,11", "--threads", "1", "--out", tmp_path / "e"),
        "class 'ankle boot' has 10 images in ",
        "fewer than 11 shots",
        "--shots",
    )


# -- 4. relative data paths, moved data ---------------------------------------------------------
def test_eval_from_another_directory_and_after_the_data_moved(own, vitkit_cmd, tmp_path):
    data, run, _ = own
    assert last_json(vitkit_cmd("eval", run, "--split", "val", "--json", "--threads", "1", cwd=tmp_path))["n"] == 12
    moved = tmp_path / "moved"
    shutil.copytree(data, moved)
    shutil.copytree(run, tmp_path / "run")
    (tmp_path / "run" / "final" / "config.json").write_text(
        (tmp_path / "run" / "final" / "config.json").read_text().replace(str(data), str(tmp_path / "gone"))
    )
    one_line_error(
        vitkit_cmd("eval", tmp_path / "run", "--split", "val", "--threads", "1"), str(tmp_path / "gone"), "--data"
    )
    result = last_json(
        vitkit_cmd("eval", tmp_path / "run", "--split", "val", "--data", moved, "--json", "--threads", "1")
    )
    assert (result["data"], result["n"]) == (str(moved), 12)


def test_eval_writes_its_figure_beside_the_model_not_into_it(own, vitkit_cmd):
    _, run, _ = own
    before = sorted(p.name for p in (run / "final").iterdir())
    result = last_json(vitkit_cmd("eval", run, "--split", "val", "--json", "--threads", "1"))
    assert Path(result["confusion_png"]).is_file() and Path(result["confusion_png"]).parent != run / "final"
    assert sorted(p.name for p in (run / "final").iterdir()) == before


# -- 6. one checkpoint resolver ------------------------------------------------------------------
def test_every_command_accepts_a_run_directory_its_final_and_a_step_checkpoint(own, vitkit_cmd, tmp_path):
    data, run, _ = own
    step = sorted((run / "checkpoints").iterdir())[-1]
    image = next((data / "val" / "bag").iterdir())
    for ckpt in (run, run / "final", step):
        assert last_json(vitkit_cmd("info", ckpt, "--json"))["format"] == "vitkit"
        assert "bag" in vitkit_cmd("predict", ckpt, image, "--threads", "1").stdout
    done = vitkit_cmd("export", step, "--format", "torchscript", "--out", tmp_path / "step.pt", "--threads", "1")
    assert done.returncode == 0 and "step.pt.json" in done.stdout, (
        done.stderr
    )  # class names and preprocessing beside it
    assert json.loads((tmp_path / "step.pt.json").read_text())["class_names"] == list(CLASSES)
    assert vitkit_cmd("convert", run / "final", tmp_path / "final.npz").returncode == 0
    done = vitkit_cmd(
        "inspect",
        run,
        "--images",
        data / "val",
        "--out",
        tmp_path / "inspect",
        "--num-images",
        "6",
        "--show",
        "3",
        "--threads",
        "1",
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads((tmp_path / "inspect" / "inspection.json").read_text())["shown"]
    assert [Path(s["image"]).parent.name for s in shown] == list(
        CLASSES
    )  # spread over the classes, not the first one's images
    assert all(s["label"].startswith(f"true: {Path(s['image']).parent.name}\npred: ") for s in shown)


def test_load_pretrained_accepts_a_run_directory(own):
    import vitkit

    _, run, _ = own
    model = vitkit.load_pretrained(run)
    assert model.config.num_classes == len(CLASSES)
    assert vitkit.load_pretrained(sorted((run / "checkpoints").iterdir())[-1]).config == model.config


# -- 3. metadata travels with the weights --------------------------------------------------------
@pytest.mark.parametrize("target", ["vitkit_dir", "model.safetensors", "model.pth", "model.npz", "hf_dir"])
def test_convert_round_trip_keeps_class_names_and_logits(own, vitkit_cmd, tmp_path, target):
    import torch

    import vitkit

    data, run, _ = own
    to = ("--to", "hf") if target == "hf_dir" else ()
    assert vitkit_cmd("convert", run, tmp_path / target, *to).returncode == 0
    back = tmp_path / "back"
    done = vitkit_cmd("convert", tmp_path / target, back)
    assert done.returncode == 0 and "class names ankle boot, bag, coat" in done.stdout, done.stdout
    image = sorted((data / "val" / "coat").iterdir())[0]
    for ckpt in (tmp_path / target, back):  # the converted file itself and the way back
        top = json.loads(vitkit_cmd("predict", ckpt, image, "--json").stdout)["top"]
        assert sorted(t["label"] for t in top) == sorted(CLASSES)
    recorded = json.loads((back / "config.json").read_text())
    # an export names its data by folder, never by this machine's path
    assert recorded["class_names"] == list(CLASSES) and recorded["data"]["folder"] == data.name
    assert "path" not in recorded["data"] and str(data) not in (back / "config.json").read_text()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        tol = (
            1e-3 if target.endswith(".npz") else 1e-5
        )  # .npz loads with Flax's tanh-GELU and LayerNorm eps (documented)
        torch.testing.assert_close(vitkit.load_pretrained(back)(x), vitkit.load_pretrained(run)(x), atol=tol, rtol=tol)


# -- 5. train --data fits the data and says what it will do ---------------------------------------
def test_train_on_a_folder_fits_the_model_to_the_images_and_states_the_plan(own, vitkit_cmd, tmp_path):
    data, _, fixture_run = own
    assert "val           12 images" in fixture_run.stdout  # every run states its data before training
    done = vitkit_cmd(
        "train",
        "--data",
        data,
        "--out",
        tmp_path / "fit",
        "train.steps=2",
        "train.eval_every=2",
        "train.log_every=1",
        "train.threads=1",
        "train.warmup_steps=4",
        "--no-progress",
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert (
        "scanned 30 of 30 images: median" in out and "colour -> 24x24 px, 3 channels" in out
    )  # odd sizes 17..40 px, mixed modes
    for line in (
        " at 24x24, 3 channels, conv stem 32-32-64-64-128-128 (stride 4), patch 1 (36 tokens), width 96, depth 0",
        "a conv net: a deep conv stem (6 convolutions, 2 of stride 2: a 6x6 map) average-pooled into the head, no "
        "transformer block",
        "GFLOPs/image",
        f"data       {data}: 3 classes (ankle boot, bag, coat)",
        f"train         30 images  {data / 'train'} (all)",
        "on cpu, 1 thread",
        "estimated  0:0",
        "step 1/2: loss ",
        "warning    train.warmup_steps=4 is more than train.steps=2: the learning rate only warms up (to 0.0015 at the last step)",
        # every augmentation that is on, with its strength and the key that turns it off; then those that are off
        "augment    padded random crop, shifts of up to 1 px (4% of 24 px): position varies; augment.pad=0 for none",
        "  smooth   0.1 (label smoothing): target 0.933 on the label",
        "RandAugment (augment.randaugment_ops=2), mixup (augment.mixup=0.2), cutmix (augment.cutmix=1), random erasing",
        "timed over 5 passes at start, the median",
        "mirror images at ",
    ):
        assert line in out, (line, out)
    # the fit's flip (by the images' mirror skill) is the one the augment lines say is on
    flips = "  hflip    0.5: " in out
    assert ("  flips      flips (a pixel model" in out) == flips and ("  off      hflip (" in out) == (not flips), out
    assert "ETA 0:00:0" in out  # the printed step lines carry the running rate's ETA
    model = json.loads((tmp_path / "fit" / "final" / "config.json").read_text())["model"]
    assert model["in_chans"] == 3 and model["classifier"] == "gap" and model["depth"] == 0  # a conv net
    # a small set gets the deep conv stem, which Hugging Face's ViT cannot hold: one line says what can
    hf = vitkit_cmd("convert", tmp_path / "fit", tmp_path / "fit_hf", "--to", "hf")
    assert hf.returncode == 2 and "model.backbone=null" in hf.stderr and len(hf.stderr.strip().splitlines()) == 1
    preview = vitkit_cmd(
        "data", data, "--samples", "4", "--out", tmp_path / "preview"
    )  # what that model sees: its size and channels
    assert preview.returncode == 0, preview.stderr
    assert "vitkit data: no model given, so fitted to the data" in preview.stdout
    assert np.load(tmp_path / "preview" / "samples.npy").shape == (4, 3, 24, 24)
    gray = tmp_path / "gray"
    shutil.copytree(data, gray)
    for png in gray.rglob("*.png"):
        Image.open(png).convert("L").save(png)
    done = vitkit_cmd(
        "train", "--data", gray, "--out", tmp_path / "gray_run", "train.steps=1", "train.threads=1", "--no-progress"
    )
    assert done.returncode == 0 and "grayscale -> " in done.stdout and "1 channel," in done.stdout, done.stdout


# -- 7. smaller things ---------------------------------------------------------------------------
def test_predict_takes_a_folder_and_stops_quietly_when_the_pipe_closes(own):
    import subprocess
    import sys

    data, run, _ = own
    script = Path(sys.executable).with_name("vitkit")
    done = subprocess.run(
        f"'{script}' predict '{run}' '{data / 'val'}' --threads 1 | head -n 1",
        shell=True,
        capture_output=True,
        text=True,
    )
    assert done.stdout.strip() == str(data / "val" / "ankle boot" / "000.png")  # a folder: its images, sorted
    assert done.stderr == "", done.stderr  # no BrokenPipeError traceback
