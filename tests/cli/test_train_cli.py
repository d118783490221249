"""The real `vitkit` entry point: train, eval, predict, errors as one line with exit code 2."""

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitkit.cli import main
from vitkit.data.sources import open_split
from vitkit.data.sources.idx import default_dir, find_idx

FAST = [
    "model.name=vit_test",
    "model.depth=1",
    "train.batch_size=16",
    "train.threads=1",
    "train.warmup_steps=2",
    "train.log_every=2",
    "train.eval_every=4",
    "train.checkpoint_every=4",
    "augment.crop=pad",
    "train.figures=false",  # the tests of the figures turn them on
]


def make_folder(root, size=16, per_class=12):
    rng = np.random.default_rng(0)
    for c, name in enumerate(("circle", "square")):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 60, (size, size, 3)) + 150 * c
            Image.fromarray(pixels.astype(np.uint8)).save(root / name / f"{i}.png")


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory):
    """One short run on a folder of 24 images (6 held out), trained once for the tests that only read it: (the data,
    the run, the title of each figure the run drew)."""
    from vitkit import plots

    root = tmp_path_factory.mktemp("folder_run")
    make_folder(root / "data")
    titles = {}
    save = plots._save
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            plots, "_save", lambda fig, path: titles.setdefault(path.name, fig.axes[0].get_title()) and save(fig, path)
        )
        args = ["train", "--data", root / "data", "--out", root / "run", "train.steps=4", "data.val_fraction=0.25"]
        assert (
            main([*map(str, args), "--no-progress", *FAST, "train.lr=3e-3", "augment.hflip=0", "train.figures=true"])
            == 0
        )
    return root / "data", root / "run", titles


def test_training_curves_name_the_images_they_were_drawn_from(folder_run):
    data, _, titles = folder_run
    train, val = (
        f"18 images, {data} (all but the 0.25 held out by class (seed 0))",
        f"6 images, {data} (0.25 held out by class (seed 0))",
    )
    assert titles["loss.png"] == f"Loss\ntrain: {train}\nvalidation: {val}"
    assert titles["accuracy.png"] == f"Accuracy\nvalidation: {val}"


def test_image_folder_end_to_end(folder_run, capsys, monkeypatch):
    """train (the module's run), then eval and predict of it through the same entry point."""
    from vitkit import plots

    data, out, _ = folder_run
    titles = {}  # every figure says which images it was drawn from, and how many
    save = plots._save
    monkeypatch.setattr(
        plots, "_save", lambda fig, path: titles.setdefault(path.name, fig.axes[0].get_title()) and save(fig, path)
    )
    assert main(["eval", str(out), "--data", str(data), "--split", "val", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert titles["confusion_val.png"] == f"Confusion matrix\nval of {data}: 6 images; {result['precision']}"
    assert result["n"] == 6 and 0.0 <= result["top1"] <= result["top5"] == 1.0
    assert set(result["per_class"]) == {"circle", "square"}
    assert Path(result["confusion_png"]).is_file()
    image = data / "square" / "0.png"
    assert main(["predict", str(out), str(image), "--json"]) == 0
    top = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["top"]
    assert sorted(t["label"] for t in top) == ["circle", "square"]
    assert abs(sum(t["prob"] for t in top) - 1.0) < 1e-5
    assert main(["predict", str(out), str(image)]) == 0
    text = capsys.readouterr().out
    assert "square" in text and "%" in text


def test_a_model_override_changes_the_recipe_fitted_to_a_folder_instead_of_discarding_it(tmp_path, capsys):
    """model.depth=1 with --data gave the built-in 28-px default (patch 4, width 192, batch 128, lr 1e-3), not the
    fitted model one block deep; model.name still replaces the fit."""
    make_folder(tmp_path / "data")
    assert (
        main(
            [
                "train",
                "--data",
                str(tmp_path / "data"),
                "--out",
                str(tmp_path / "a"),
                "train.steps=1",
                "--no-progress",
                "train.threads=1",
                "model.depth=1",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "fitted to the data" in printed and "width 96, depth 1:" in printed
    assert (
        main(
            [
                "train",
                "--data",
                str(tmp_path / "data"),
                "--out",
                str(tmp_path / "b"),
                "train.steps=1",
                "--no-progress",
                "train.threads=1",
                "model.name=vit_test",
                "model.depth=1",
                "train.batch_size=8",
            ]
        )
        == 0
    )
    assert "fitted to the data" not in capsys.readouterr().out
    # data.path=DIR names the data as --data does (docs/data.md's example): the colour photos trained the 28-px grayscale default
    assert (
        main(
            [
                "train",
                f"data.path={tmp_path / 'data'}",
                "--out",
                str(tmp_path / "c"),
                "train.steps=1",
                "--no-progress",
                "train.threads=1",
                "model.depth=1",
            ]
        )
        == 0
    )
    assert "fitted to the data" in (printed := capsys.readouterr().out) and "3 channels" in printed


@pytest.mark.parametrize("override", ["model.bogus=1", "train.bogus=1", "trian.lr=1"])
def test_a_misspelt_key_with_a_folder_is_one_error_before_the_fit_scans_it(tmp_path, capsys, override):
    """The fit's scan line was printed before the unknown-key error: two messages for one mistake."""
    make_folder(tmp_path / "data")
    assert main(["train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "a"), override]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "unknown" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "a").exists()


def test_the_fit_to_a_folder_is_reported_by_rank_0_only(tmp_path, capsys, monkeypatch):
    """Under torchrun every process printed the fit's line."""
    from vitkit.train.config import load_run_config
    from vitkit.train.fit import fit_to_data

    make_folder(tmp_path / "data", per_class=8)  # under 10 a class: no mirror-image fit, which is not what is tested
    data = load_run_config(None, [("data.path", str(tmp_path / "data"))]).data
    for rank, said in (("1", False), ("0", True)):
        monkeypatch.setenv("RANK", rank)
        fitted = fit_to_data(data)
        assert ("fitted to the data" in capsys.readouterr().out) is said and fitted["model.name"] == "vit_mini4_32"


def test_a_new_run_into_a_folder_holding_a_run_s_file_names_is_refused(tmp_path, capsys):
    """--out a folder of one's own holding a summary.json: the run replaced it, exit 0."""
    make_folder(tmp_path / "data")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "summary.json").write_text('{"mine": 1}')
    assert (
        main(
            [
                "train",
                "--data",
                str(tmp_path / "data"),
                "--out",
                str(tmp_path / "mine"),
                "train.steps=1",
                "--no-progress",
                "train.threads=1",
            ]
        )
        == 2
    )
    assert "holds summary.json, which a run writes, and is not a vitkit run" in capsys.readouterr().err
    assert (tmp_path / "mine" / "summary.json").read_text() == '{"mine": 1}' and not (
        tmp_path / "mine" / "run.yaml"
    ).exists()


def test_resume_through_cli(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "data.name=synthetic", "train.steps=4", "--no-progress", *FAST]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps"] == 4
    assert (out / "final" / "model.safetensors").is_file()
    assert main(["train", "--resume", str(out), "train.steps=6"]) == 0
    printed = capsys.readouterr().out
    assert json.loads(printed.strip().splitlines()[-1])["steps"] == 6
    assert f"resuming from step 4 ({out / 'checkpoints' / 'step_0000004'})" in printed and "steps 5-6 of 6" in printed
    assert (out / "checkpoints" / "step_0000006").is_dir()


def test_a_length_in_epochs_follows_the_training_images_and_is_kept_on_resume(tmp_path, capsys):
    """train.epochs sets the steps from the split's size (24 images, 6 held out: 18; 18 x 2.5 / 16 -> 3 steps), run.yaml
    keeps the epochs, not the steps, and a later layer's train.steps replaces them."""
    make_folder(tmp_path / "data")
    out = tmp_path / "run"
    fast = [o for o in FAST if not o.startswith("train.eval_every")]
    assert (
        main(
            [
                "train",
                "--data",
                str(tmp_path / "data"),
                "--out",
                str(out),
                "train.epochs=2.5",
                "data.val_fraction=0.25",
                "--no-progress",
                *fast,
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps"] == 3
    recorded = (out / "run.yaml").read_text()
    assert "epochs: 2.5" in recorded and "\n  steps:" not in recorded
    assert main(["train", "--resume", str(out), "train.epochs=5", "--no-progress"]) == 0  # 18 x 5 / 16 -> 6
    assert "steps 4-6 of 6 (train.epochs=5), batch 16" in capsys.readouterr().out
    assert main(["train", "--resume", str(out), "train.steps=8", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps"] == 8
    assert "epochs: null" in (out / "run.yaml").read_text()
    # fitted to the data (no model given): the fitted recipe takes the user's length, warmup a tenth of it
    assert (
        main(
            [
                "train",
                "--data",
                str(tmp_path / "data"),
                "--out",
                str(tmp_path / "fitted"),
                "train.epochs=4",
                "--no-progress",
                "train.threads=1",
                "train.checkpoint_every=100",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert (
        "4 epochs = 4 steps of 22 images" in printed and json.loads(printed.strip().splitlines()[-1])["steps"] == 4
    )  # 2 held out
    assert "warning    train.warmup_steps" not in printed  # the warmup follows the length
    # and the user's batch size: the note counts the steps the run will take
    assert (
        main(
            [
                "train",
                "--data",
                str(tmp_path / "data"),
                "--out",
                str(tmp_path / "fitted11"),
                "train.epochs=4",
                "train.batch_size=11",
                "--no-progress",
                "train.threads=1",
                "train.checkpoint_every=100",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "4 epochs = 8 steps of 11 images" in printed and json.loads(printed.strip().splitlines()[-1])["steps"] == 8


def test_a_run_on_a_subset_of_the_training_images_records_it_and_the_fitted_recipe_fits_it(tmp_path, capsys):
    """data.train_images=10 of the 18 training images: the fitted recipe's batch fits the 10, the checkpoint records them,
    and `vitkit data` shows the same cut."""
    make_folder(tmp_path / "data")
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--data",
                str(tmp_path / "data"),
                "--out",
                str(out),
                "data.train_images=10",
                "data.val_fraction=0.25",
                "train.steps=2",
                "--no-progress",
                "train.threads=1",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    # train.steps=2 is the user's, and the fitted recipe's warmup follows it (no "warms up ... never reaches" warning)
    assert "scanned 10 of 10 images" in printed and "  length     2 steps of 10 images" in printed
    assert "warning    train.warmup_steps" not in printed
    # the fitted model is a (small-data: hybrid) ViT of its own shape, not the registry's vit_mini4_32 it starts from
    assert json.loads(printed.strip().splitlines()[-1])["model"] == "hybrid ViT"
    assert "model      hybrid ViT at 16x16" in printed
    assert (
        "10 images  "
        + str(tmp_path / "data")
        + " (first 10 of a seeded order (seed 0) of all but the 0.25 held out by class (seed 0))"
        in printed
    )
    record = json.loads((out / "final" / "config.json").read_text())["data"]
    assert record["train_images"] == 10 and record["splits"]["train"]["n"] == 10 and record["splits"]["val"]["n"] == 6
    assert main(["data", str(tmp_path / "data"), "data.train_images=10", "data.val_fraction=0.25"]) == 0
    assert "train    10 images, " in (text := capsys.readouterr().out) and "first 10 of a seeded order" in text


def test_a_decompression_bomb_in_ones_own_folder_is_skipped_by_the_fitted_recipe_and_named_by_vitkit_data(
    tmp_path, capsys, monkeypatch
):
    """An image over Pillow's pixel limit (here lowered to 2,000 so that 60x60 is over it) made the fitted recipe's scan end in
    a traceback; now the scan counts it, the batch is one the 24 readable images fill, and training skips and lists it."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    for split in ("train", "val"):
        make_folder(tmp_path / "data" / split)
    Image.new("RGB", (60, 60)).save(tmp_path / "data" / "train" / "circle" / "bomb.png")
    assert (
        main(
            [
                "train",
                "--data",
                str(tmp_path / "data"),
                "--out",
                str(tmp_path / "run"),
                "train.steps=2",
                "--no-progress",
                "train.threads=1",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "scanned 24 of 25 images (1 unreadable)" in printed and "2 steps of 24 images" in printed
    bad = json.loads((tmp_path / "run" / "bad_files.json").read_text())
    assert bad["count"] == 1 and bad["files"][0]["path"].endswith("bomb.png")
    assert main(["data", str(tmp_path / "data")]) == 0
    assert (
        "the 24 readable of all 25 images: " in (printed := capsys.readouterr().out)
        and "; 1 unreadable from their header (first " in printed
        and "bomb.png: " in printed
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--out", "{tmp}/x", "data.train_images=0"], "data.train_images"),
        (
            ["train", "--out", "{tmp}/x", "train.epochs=2", "train.steps=5"],
            "train.steps=5 and train.epochs=2.0 both set the training length",
        ),
        (["train", "--out", "{tmp}/x", "train.epochs=0"], "train.epochs: expected a value in (0, inf)"),
        (["train", "--out", "{tmp}/x", "train.lrr=1"], "train.lrr: unknown key"),
        (["train", "--out", "{tmp}/x", "train.steps=abc"], "train.steps: expected int"),
        (["train", "--out", "{tmp}/x", "--data", "{tmp}/missing"], "no such file"),
        (["train", "data.name=synthetic"], "--out"),
        (["eval", "{tmp}"], "neither a vitkit checkpoint or run directory"),
    ],
)
def test_user_errors_are_one_line(tmp_path, capsys, args, message):
    assert (
        main([a.format(tmp=tmp_path) for a in args]) == 2
    )  # in-process: the same entry point, without a new interpreter
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()  # nothing was started


def test_missing_default_data_says_how_to_install(tmp_path, monkeypatch, vitkit_cmd):
    monkeypatch.setenv("VITKIT_DATA", str(tmp_path / "none"))
    done = vitkit_cmd("train", "--out", tmp_path / "run", "train.steps=1")
    assert done.returncode == 2 and "apt-get install dataset-fashion-mnist" in done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(
    find_idx(default_dir(), "train", "images") is None,
    reason="Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)",
)
def test_short_real_fashion_mnist_run(tmp_path, capsys):
    """A few steps of the demo recipe on real Fashion-MNIST: the loss falls, eval runs on the held-out split."""
    out = tmp_path / "run"
    config = Path(__file__).resolve().parents[2] / "configs" / "fashion_mnist.yaml"
    assert (
        main(
            [
                "train",
                "--config",
                str(config),
                "--out",
                str(out),
                "--no-progress",
                "train.steps=24",
                "train.batch_size=64",
                "train.warmup_steps=4",
                "train.log_every=4",
                "train.eval_every=24",
                "train.checkpoint_every=24",
                "model.depth=1",
                "data.val_fraction=0.01",
            ]
        )
        == 0
    )
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if r["kind"] == "train"]
    assert losses[-1] < losses[0] - 0.1
    capsys.readouterr()
    assert main(["eval", str(out), "--split", "val", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["n"] == 600 and result["top1"] > 0.2  # chance is 0.1
    assert "Ankle boot" in result["per_class"]
    assert len(open_split(None, "test", channels=1)) == 10_000


def test_a_fitted_run_evaluates_four_times_without_a_second_evaluation_just_before_the_end():
    """938 fitted steps evaluated every 234: at 936 and again at the final 938, two lines for one model."""
    from vitkit.data.scan import ImageScan
    from vitkit.train.fit import fitted_to_data

    for steps in (24, 100, 750, 938, 1001, 4999, 5000):
        changes, _ = fitted_to_data(ImageScan(64, 600, 28, 28, 1), 600, steps=steps)
        every = changes["train.eval_every"]
        scheduled = list(range(every, steps + 1, every))
        assert len(scheduled) <= 4 and steps - scheduled[-1] in (0, *range(every // 2, every)), (steps, every)
