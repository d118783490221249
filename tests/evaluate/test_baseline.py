"""The pixel baseline (issue #58): `vitkit train --data FOLDER` with no model named fitted the default ViT to 1,000 real
icons at 0.612 test top-1 where logistic regression on their pixels got 0.639, and nothing said so. A fitted run now
sets a softmax regression on 16x16 pixels beside its val figure, warns where the model does not beat it, records it
in summary.json and its checkpoints, and `vitkit eval` fits it again for the split it scores."""

import contextlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitkit.evaluate import baseline
from vitkit.evaluate.baseline import compared, compared_lines, drawn, fit, fit_and_score, pixels, skipped_because

# a fitted run, kept tiny: one block, a few steps, one thread (model.* and train.* overrides change the fitted recipe)
FITTED_RUN = ("model.depth=1", "train.threads=1", "train.eval_batch_size=64", "--no-progress")


def halves(root: Path, per_class: int, seed: int, side: int = 12) -> None:
    """root/<left|right>/*.png: noise with the left or the right half bright: a linear model on pixels separates them."""
    rng = np.random.default_rng(seed)
    for label, name in enumerate(("left", "right")):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels_ = rng.integers(0, 60, (side, side, 3), dtype=np.uint8)
            pixels_[:, label * side // 2 : (label + 1) * side // 2] += 180
            Image.fromarray(pixels_).save(root / name / f"{i:02d}.png")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("halves") / "data"
    halves(root / "train", per_class=16, seed=0)
    halves(root / "val", per_class=8, seed=1)
    return root


@pytest.fixture(scope="module")
def learned_nothing(folder, tmp_path_factory):
    """A fitted run of one step (the model has learned next to nothing) on data a linear model separates: (run, output)."""
    from vitkit.cli import main

    out = tmp_path_factory.mktemp("runs") / "nothing"
    # the plain ViT (a small set's fitted hybrid may separate halves in one step), whose warning suggests the hybrid
    plain = ["model.backbone=null", "model.patch_size=4"]
    args = ["train", "--data", str(folder), "--out", str(out), "train.steps=1", *FITTED_RUN, *plain]
    threads, printed = torch.get_num_threads(), io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):  # as vitkit_cmd runs it (a function-scoped fixture)
            assert main(args) == 0
    finally:
        torch.set_num_threads(threads)
    return out, printed.getvalue()


def test_a_fitted_run_prints_the_baseline_and_records_it_in_summary_json(learned_nothing, folder):
    out, printed = learned_nothing
    summary = json.loads((out / "summary.json").read_text())
    b = summary["baseline"]
    assert b["kind"] == "softmax regression on 16x16 pixels" and b["top1"] == 1.0
    assert (b["train_split"], b["train_images"], b["train_split_images"]) == ("train", 32, 32)
    assert (b["scored_split"], b["scored_images"]) == ("val", 16) == (summary["val_split"], summary["val_images"]["n"])
    assert b["train_data"] == f"{folder / 'train'}, all" and b["scored_data"] == f"{folder / 'val'}, all"
    assert 0 <= b["seconds"] < 60 and b["seed"] == 0
    assert b["model_top1"] == summary["final_val_top1"]
    # before the first step, with the data and how many images; at the end, beside the model's figure
    assert (
        f"baseline   softmax regression on 16x16 pixels: val top-1 1.0000 on 16 images ({folder / 'val'}, all), "
        f"fitted on 32 train images ({folder / 'train'}, all) in " in printed
    )
    assert "; off with train.baseline=false" in printed
    assert (
        f"val top-1 {summary['final_val_top1']:.4f} on 16 images ({folder / 'val'}, all); pixel baseline 1.0000 on "
        "the same images (softmax regression on 16x16 pixels, fitted on 32 train images)" in printed
    )
    # every checkpoint records it: eval fits it again; a resume keeps the one the run started with
    assert json.loads((out / "final" / "config.json").read_text())["baseline"]["top1"] == 1.0
    state = next((out / "checkpoints").iterdir()) / "train_state.json"
    assert json.loads(state.read_text())["baseline"]["kind"] == b["kind"]


def test_the_warning_fires_when_the_model_does_not_beat_the_baseline(learned_nothing):
    out, printed = learned_nothing
    b = json.loads((out / "summary.json").read_text())["baseline"]
    assert b["model_top1"] < 1.0 and b["beaten"] is False
    assert b["warning"].startswith(
        f"the model's val top-1 {b['model_top1']:.4f} does not beat the pixel baseline's 1.0000"
    )
    for advice in ('"model.backbone={convs: [32, 64, 128]}"', "augment.randaugment_ops=2", "train.epochs=N"):
        assert advice in b["warning"]
    assert f"warning    {b['warning']}" in printed.splitlines()


def test_eval_fits_the_baseline_on_the_training_split_and_scores_the_split_it_evaluates(learned_nothing, vitkit_cmd):
    out, _ = learned_nothing
    summary = json.loads((out / "summary.json").read_text())
    done = vitkit_cmd("eval", out, "--split", "val", "--json", "--threads", "1")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    b = result["baseline"]
    assert (b["top1"], b["train_images"], b["scored_split"], b["scored_images"]) == (1.0, 32, "val", result["n"])
    assert b["model_top1"] == result["top1"] and b["warning"]  # the same images as the model's figure
    assert b["top1"] == summary["baseline"]["top1"]  # the run's figure, on the same split
    assert (
        "pixel baseline 1.0000 on the same images" in done.stdout
        and "\nwarning    the model's val top-1" in done.stdout
    )
    train = vitkit_cmd("eval", out, "--split", "train", "--json", "--threads", "1")  # another split: scored there
    assert json.loads(train.stdout.strip().splitlines()[-1])["baseline"]["scored_images"] == 32


def test_eval_reads_the_baseline_s_images_on_the_model_s_background(tmp_path, vitkit_cmd):
    """White shapes on a transparent ground: the fit composites them on black, and so did the run's baseline (1.0);
    eval's composited them on white, blank images, and scored 0.5. Eval says, too, where scored images are blank."""
    for split, n in (("train", 12), ("val", 6)):
        for label, name in enumerate(("left", "right")):
            (tmp_path / "data" / split / name).mkdir(parents=True)
            for i in range(n):
                rgba = np.zeros((12, 12, 4), np.uint8)
                rgba[..., :3] = 255
                rgba[:, label * 6 : label * 6 + 6, 3] = 200 + i
                Image.fromarray(rgba, "RGBA").save(tmp_path / "data" / split / name / f"{i}.png")
    out = tmp_path / "run"
    done = vitkit_cmd("train", "--data", tmp_path / "data", "--out", out, "train.steps=1", *FITTED_RUN)
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    scored = vitkit_cmd("eval", out, "--split", "val", "--json", "--threads", "1")
    assert scored.returncode == 0, scored.stderr
    result = json.loads(scored.stdout.strip().splitlines()[-1])
    assert summary["baseline"]["top1"] == result["baseline"]["top1"] == 1.0
    assert "blank_on_background" not in result  # on black, as trained: nothing hidden
    (tmp_path / "white").mkdir()
    shutil.copytree(tmp_path / "data" / "val", tmp_path / "white" / "val")
    for path in (tmp_path / "white" / "val").rglob("*.png"):  # black shapes now: on the model's black, blank
        rgba = np.asarray(Image.open(path)).copy()
        rgba[..., :3] = 0
        Image.fromarray(rgba, "RGBA").save(path)
    other = vitkit_cmd("eval", out, "--data", tmp_path / "white", "--split", "val", "--json", "--threads", "1")
    assert json.loads(other.stdout.strip().splitlines()[-1])["blank_on_background"] == {"images": 12, "transparent": 12}
    assert "note: 12 of 12 partly transparent val images looked at are one flat colour on model.background black" in (
        other.stdout
    )


def test_the_key_turns_it_off_and_a_named_model_has_none_unless_asked(folder, vitkit_cmd, tmp_path):
    runs = {
        "off": ("train.baseline=false",),
        "named": ("model.name=vit_test", "model.image_size=16", "train.batch_size=8"),
        "named_on": ("model.name=vit_test", "model.image_size=16", "train.batch_size=8", "train.baseline=true"),
    }
    for name, extra in runs.items():
        done = vitkit_cmd("train", "--data", folder, "--out", tmp_path / name, "train.steps=1", *FITTED_RUN, *extra)
        assert done.returncode == 0, done.stderr
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        on = name == "named_on"
        assert (summary["baseline"] is not None) == on and ("pixel baseline" in done.stdout) == on, name
        assert ("baseline" in json.loads((tmp_path / name / "final" / "config.json").read_text())) == on
        scored = vitkit_cmd("eval", tmp_path / name, "--split", "val", "--json")
        assert ("baseline" in json.loads(scored.stdout.strip().splitlines()[-1])) == on, name


def test_no_warning_where_the_model_beats_it(folder, tmp_path, monkeypatch, capsys):
    """A baseline the model beats (here one that scored nothing): no warning, in the output or in summary.json."""
    from vitkit.train import loop, train
    from vitkit.train.fit import run_config
    from vitkit.train.requests import TrainRequest

    def weak(train_split, scored, read, classes, *, names, seed):
        record = fit_and_score(train_split, scored, read, classes, names=names, seed=seed)
        return {**record, "top1": 0.0}

    monkeypatch.setattr(loop, "fit_and_score", weak)
    overrides = ("train.steps=1", "model.depth=1", "train.threads=1", "train.progress=false")
    request = TrainRequest(overrides, out=str(tmp_path / "run"), data=str(folder))
    summary = train(run_config(request), request.run_dir)
    b = summary["baseline"]
    assert b["beaten"] is True and b["warning"] is None and b["model_top1"] > 0
    printed = capsys.readouterr().out
    assert "pixel baseline 0.0000 on the same images" in printed and "warning    the model's" not in printed


def test_a_run_whose_figures_are_not_class_accuracy_skips_it_and_says_why(tmp_path, tiny_run, capsys):
    from vitkit.train import train
    from vitkit.train.config import load_run_config

    config = load_run_config(None, [*tiny_run, "train.steps=2", "train.objective=masked_patch", "train.baseline=true"])
    summary = train(config, tmp_path / "mpp")
    assert summary["baseline"] == {"skipped": skipped_because("masked_patch")}
    assert "baseline   masked patch prediction: its val top-1 is of the patches' colours" in capsys.readouterr().out
    assert "mAP and F1" in skipped_because("multi_label") and skipped_because("classification") is None


# -- the baseline itself ------------------------------------------------------------------------
def _blobs(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, 3, 8, 8) uint8 images of 3 classes, each class brighter in its own channel, and their labels."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 3
    images = torch.randint(0, 80, (n, 3, 8, 8), generator=g)
    images[torch.arange(n), labels] += 150
    return images.to(torch.uint8), labels


def test_pixels_average_down_to_16x16_from_any_size():
    small = torch.full((2, 4, 8, 8), 7, dtype=torch.uint8)
    x, y = pixels(
        [(small, torch.tensor([0, 1])), (torch.full((1, 4, 32, 32), 9, dtype=torch.uint8), torch.tensor([1]))]
    )
    assert x.shape == (3, 4 * 16 * 16) and y.tolist() == [0, 1, 1]
    assert x[:2].eq(7).all() and x[2].eq(9).all()


def test_it_separates_what_a_linear_model_separates_and_is_deterministic():
    x, y = pixels([_blobs(60, 0)])
    first, again = fit(x, y, 3), fit(x, y, 3)
    tx, ty = pixels([_blobs(30, 1)])
    assert (first.predict(tx) == ty).all()
    assert torch.equal(first.weight, again.weight) and torch.equal(first.bias, again.bias)
    constant = torch.zeros_like(x[:, :1])  # a pixel that never varies: standardised by 1, not by 0
    assert torch.isfinite(fit(torch.cat([x, constant], 1), y, 3).weight).all()


def test_a_large_split_is_fitted_on_a_seeded_draw(monkeypatch):
    from vitkit.data.split import Split

    images, labels = _blobs(30, 0)
    split = Split(labels, ["a", "b", "c"], images=images, source="blobs", selection="all")
    monkeypatch.setattr(baseline, "MAX_TRAIN", 12)
    assert len(drawn(split, 0, 12)) == 12 and torch.equal(drawn(split, 0, 12).labels, drawn(split, 0, 12).labels)
    assert len(drawn(split, 0, 40)) == 30
    record = fit_and_score(split, split, lambda s: [(s.images, s.labels)], 3, names=("train", "val"), seed=0)
    assert (record["train_images"], record["train_drawn"], record["train_split_images"]) == (12, 12, 30)
    assert record["scored_images"] == 30
    assert "fitted on 12 train images (blobs, all, a seeded draw of 12 of 30)" in baseline.fitted_line(record)


def test_the_warning_is_given_below_the_baseline_and_level_with_it_short_of_one():
    record = {"kind": baseline.KIND, "top1": 0.68, "scored_split": "test", "scored_images": 397}
    record |= {"scored_data": "icons/test, all", "train_images": 900, "train_split": "train"}
    worse = compared(record, 0.612)
    assert worse["beaten"] is False and worse["warning"].startswith(
        "the model's test top-1 0.6120 does not beat the pixel baseline's 0.6800 on the same 397 images"
    )
    assert compared(record, 0.68)["warning"] and compared(record, 0.70)["warning"] is None
    assert compared(record, 0.70)["beaten"] is True
    assert compared({**record, "top1": 1.0}, 1.0)["warning"] is None  # nothing left to beat
    assert "conv-stem" not in compared(record, 0.612, advice="")["warning"]  # a hybrid has a conv stem already
    assert compared_lines(worse)[1] == f"warning    {worse['warning']}"
    assert compared({"skipped": "why"}, 0.5) == {"skipped": "why"}


def test_level_with_the_baseline_is_level_whatever_the_last_bits_of_the_two_figures():
    """Both got 129 of 182 images right; the baseline's top-1 was a float32 mean (0.70879120), a hair under the
    model's exact 129/182, which was then said to beat it, with no warning."""
    record = {"kind": baseline.KIND, "top1": float(torch.tensor(129 / 182, dtype=torch.float32)), "scored_split": "val"}
    record |= {"scored_images": 182, "scored_data": "digits/val, all", "train_images": 719, "train_split": "train"}
    level = compared(record, 129 / 182)
    assert level["beaten"] is False and level["warning"].startswith("the model's val top-1 0.7088 does not beat")
    assert compared(record, 130 / 182)["beaten"] is True


def test_the_baseline_top1_is_the_exact_fraction_of_images_right():
    from vitkit.data.split import Split

    images, labels = _blobs(30, 0)
    train = Split(labels, ["a", "b", "c"], images=images, source="blobs", selection="all")
    labels = labels[:7].clone()
    labels[:2] = (labels[:2] + 1) % 3  # two of seven scored images labelled as another class: 5/7 right
    scored = Split(labels, ["a", "b", "c"], images=images[:7], source="blobs", selection="7")
    record = fit_and_score(train, scored, lambda s: [(s.images, s.labels)], 3, names=("train", "val"), seed=0)
    assert record["top1"] == 5 / 7


def test_eval_says_so_where_the_training_data_is_gone(tmp_path):
    """The checkpoint's training data moved away: no figure, and a line saying why (the model is still scored)."""
    from types import SimpleNamespace

    from vitkit.evaluate.scoring import pixel_baseline
    from vitkit.models import get_config

    meta = {"baseline": {"kind": baseline.KIND, "seed": 0}, "data": {"path": str(tmp_path / "gone"), "splits": {}}}
    request = SimpleNamespace(checkpoint=tmp_path / "run", batch_size=64)
    record = pixel_baseline(request, meta, get_config("vit_test"), None, "val", 1.0, None, 0.5)
    assert record["skipped"].startswith(f"not fitted: its training data cannot be read ({tmp_path / 'gone'}: ")
    assert compared_lines(record) == [f"pixel baseline: {record['skipped']}"]
    assert pixel_baseline(request, {}, get_config("vit_test"), None, "val", 1.0, None, 0.5) is None  # none recorded


@pytest.mark.parametrize(
    ("size", "convs"), [(32, [32, 64, 128]), (224, [32, 64, 128]), (28, [32, 64]), ((28, 32), [32, 64]), (30, None)]
)
def test_the_suggested_stem_fits_the_model_s_size(size, convs):
    """A 28-px plain ViT (Fashion-MNIST's) is told of a stem of 2 stride-2 convolutions, which leave a 7x7 grid: the
    3 a 32-px one is told of leave none at 28; a size neither divides gets no stem, and a model with one, no other."""
    from vitkit.evaluate.baseline import stem_advice
    from vitkit.models.config import ViTConfig

    advice = stem_advice(ViTConfig(image_size=size, patch_size=2))
    said = f'the conv-stem hybrid (model.patch_size=1 "model.backbone={{convs: {convs}}}"), '
    assert advice == ("" if convs is None else said)
    if convs is not None:  # what it suggests is a model that builds
        assert ViTConfig(image_size=size, patch_size=1, backbone={"convs": convs}).backbone.convs == tuple(convs)
    assert stem_advice(ViTConfig(image_size=32, patch_size=1, backbone={"convs": [8, 16]})) == ""


def test_one_scored_image_is_one_image():
    """A flat folder of ten images holds one out: "val top-1 1.0000 on 1 images" was printed."""
    from vitkit.data.split import described

    record = {"kind": baseline.KIND, "top1": 1.0, "scored_split": "val", "scored_images": 1, "seconds": 0.0}
    record |= {"scored_data": "tiny, held out", "train_images": 9, "train_drawn": 9, "train_split_images": 9}
    record |= {"train_split": "train", "train_data": "tiny, the rest"}
    assert "val top-1 1.0000 on 1 image (tiny, held out)" in baseline.fitted_line(record)
    assert compared_lines(compared(record, 1.0))[0].startswith("val top-1 1.0000 on 1 image (tiny, held out);")
    assert described({"n": 1, "source": "tiny", "selection": "all"}) == "1 image (tiny, all)"
