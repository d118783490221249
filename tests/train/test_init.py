"""model.init: a run started from a checkpoint takes that checkpoint's architecture as its model, under the user's
model.* overrides, with the length and batch fitted to the data; a key of it that does not fit the images is named."""

import json

import numpy as np
import yaml
from PIL import Image

import vitkit
from vitkit.train.config import TrainConfig

QUICK = ("--no-progress", "train.steps=1", "train.threads=1")


def image_folder(root, side: int = 20) -> None:
    """root/{train,val}/{dark,light}/*.png: 12 and 3 colour images of `side` px a class."""
    rng = np.random.default_rng(0)
    for split, count in (("train", 12), ("val", 3)):
        for k, name in enumerate(("dark", "light")):
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 40, (side, side, 3)) + 180 * k
                pixels[..., k] = 250  # colour: one channel brighter than the others
                Image.fromarray(pixels.astype(np.uint8)).save(root / split / name / f"{i}.png")


def saved(run) -> tuple[dict, dict]:
    """(the model config a run's final checkpoint holds, the train section of its run.yaml)."""
    model = json.loads((run / "final" / "config.json").read_text())["model"]
    return model, yaml.safe_load((run / "run.yaml").read_text())["train"]


def test_a_run_from_ones_own_fitted_model_keeps_its_architecture(tmp_path, vitkit_cmd):
    """`train --data FOLDER model.init=RUN`, RUN fitted to the same folder, built the built-in default model (one
    channel, width 192) and was refused, its batch of 128 too for 24 images; it now starts from RUN's architecture,
    with what the fit gives the data (the batch, the length) and the overrides on top."""
    image_folder(tmp_path / "data")
    first = vitkit_cmd("train", "--data", tmp_path / "data", "--out", tmp_path / "first", *QUICK)
    assert first.returncode == 0, first.stderr
    again = vitkit_cmd(
        "train",
        "--data",
        tmp_path / "data",
        "--out",
        tmp_path / "again",
        *QUICK,
        f"model.init={tmp_path / 'first'}",
        "model.drop_path=0.1",
    )
    assert again.returncode == 0, again.stderr
    said = next(line for line in again.stdout.splitlines() if line.startswith("vitkit train: "))
    assert f"the model of model.init={tmp_path / 'first'} as saved (16x16 px, 3 channels)" in said
    assert "1 step of 24 images fitted to the data" in said and "model.in_chans" not in said
    assert "every weight from" in again.stdout
    (theirs, their_train), (ours, our_train) = saved(tmp_path / "first"), saved(tmp_path / "again")
    assert ours == {**theirs, "drop_path": 0.1} and theirs["drop_path"] == 0.0
    # the fitted model of 16-px images (a conv net: the deep stem, no block), not the built-in default
    assert (ours["width"], ours["depth"], ours["in_chans"], len(ours["backbone"]["convs"])) == (96, 0, 3, 6)
    assert our_train["batch_size"] == their_train["batch_size"] == 24
    # trained weights: the run's default rate, not the from-scratch fit's
    assert our_train["lr"] == TrainConfig().lr != their_train["lr"]


def test_a_checkpoint_that_does_not_fit_the_images_says_which_key_and_why(tmp_path, vitkit_cmd):
    """A one-channel checkpoint at 8 px on colour images of 20 px: the run keeps its channels and size and says so in
    its one line; a key the overrides set is theirs, and not named."""
    image_folder(tmp_path / "data")
    vitkit.save_pretrained(
        vitkit.create_model("vit_test", depth=1, in_chans=1, image_size=8, patch_size=2), tmp_path / "gray"
    )
    for out, extra in (("kept", ()), ("sized", ("model.image_size=16",))):
        done = vitkit_cmd(
            "train",
            "--data",
            tmp_path / "data",
            "--out",
            tmp_path / out,
            *QUICK,
            f"model.init={tmp_path / 'gray'}",
            *extra,
        )
        assert done.returncode == 0, done.stderr
        said = [line for line in done.stdout.splitlines() if line.startswith("vitkit train: ")]
        assert len(said) == 1
        assert "model.in_chans=1 (its patch embedding's): the colour images are read with 1 channel" in said[0]
        resized = "model.image_size=8 is 0.4x the images' 20 px, so each is resized by that much"
        assert (resized in said[0]) == (not extra), said[0]
        model, _ = saved(tmp_path / out)
        assert (model["in_chans"], model["width"], model["patch_size"]) == (1, 32, [2, 2])
        assert model["image_size"] == ([16, 16] if extra else [8, 8])
