"""`vitkit finetune`, `fewshot`, `linear-probe` and `knn` through the CLI (the console script on Fashion-MNIST)."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from vitkit.cli import build_parser
from vitkit.data.sources.idx import default_dir, find_idx

needs_fashion_mnist = pytest.mark.skipif(
    find_idx(default_dir(), "train", "images") is None,
    reason="Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)",
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny 28x28 grayscale ViT with a pre-logits layer, in vitkit's format and as an .npz."""
    torch.manual_seed(0)
    model = vitkit.create_model(
        "vit_test", image_size=28, in_chans=1, depth=1, representation_size=16, mlp_act="gelu_tanh"
    )
    root = tmp_path_factory.mktemp("ckpt")
    vitkit.save_pretrained(model, root / "vit")
    vitkit.checkpoint.save_checkpoint(model, root / "vit.npz", "npz")
    return root


def last_json(done):
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_commands_are_registered_with_help():
    parser = build_parser()
    for name in ("finetune", "fewshot", "linear-probe", "knn"):
        text = parser._subparsers._group_actions[0].choices[name].format_help()
        assert "example" in text and "CKPT" in text


@needs_fashion_mnist
def test_fewshot_and_random_init_baseline(run_cli, vitkit_cmd, checkpoint, tmp_path):
    done = vitkit_cmd("fewshot", checkpoint / "vit.npz", "--shots", "1,5", "--out", tmp_path / "fs", "--threads", "1")
    assert (
        done.returncode == 2 and "records no training data" in done.stderr and "--data" in done.stderr
    )  # never Fashion-MNIST by chance
    result = last_json(
        run_cli(
            "fewshot",
            checkpoint / "vit.npz",
            "--data",
            default_dir(),
            "--shots",
            "1,5",
            "--seeds",
            "2",
            "--out",
            tmp_path / "fs",
            "--threads",
            "1",
        )
    )  # the console script
    assert set(result["shots"]) == {"1", "5"} and result["n_test"] == 10_000 and result["feature_dim"] == 16
    assert (result["data"], result["split"], result["n"]) == (str(default_dir().absolute()), "test", 10_000)
    assert all(0.1 < r["mean"] <= 1.0 and len(r["per_seed"]) == 2 for r in result["shots"].values())
    assert json.loads((tmp_path / "fs" / "fewshot.json").read_text())["shots"] == result["shots"]
    assert "| 5 |" in (tmp_path / "fs" / "fewshot.md").read_text()
    baseline = last_json(
        vitkit_cmd(
            "fewshot",
            checkpoint / "vit",
            "--data",
            default_dir(),
            "--shots",
            "5",
            "--seeds",
            "2",
            "--random-init",
            "3",
            "--threads",
            "1",
        )
    )
    assert (
        baseline["random_init"] == 3 and (checkpoint / "vit.fewshot_random3" / "fewshot.md").is_file()
    )  # default --out: beside the model, never in it
    assert baseline["shots"]["5"] != result["shots"]["5"]  # other weights, other features
    assert result["precision"].startswith("fp32")  # with vitkit's kernels where they build


def test_knn_in_bf16_is_close_to_fp32(run_cli, vitkit_cmd, checkpoint, tmp_path):
    from vitkit.inference import precision

    if precision.native_bf16() is None:
        pytest.skip("this CPU has no native bf16")
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for k, c in enumerate(("dark", "light")):
            (tmp_path / "data" / split / c).mkdir(parents=True)
            for i in range(12):
                Image.fromarray(rng.normal(60 + 120 * k, 40, (28, 28)).clip(0, 255).astype(np.uint8)).save(
                    tmp_path / "data" / split / c / f"{i}.png"
                )
    args = ("knn", checkpoint / "vit", "--data", tmp_path / "data", "--k", "5", "--threads", "1")
    fp32 = last_json(run_cli(*args, "--out", tmp_path / "fp32"))  # the console script
    bf16 = last_json(vitkit_cmd(*args, "--out", tmp_path / "bf16", "--precision", "bf16"))
    assert bf16["precision"].startswith("bf16 (") and fp32["precision"].startswith("fp32") and bf16["n_test"] == 24
    assert abs(bf16["top1"]["5"] - fp32["top1"]["5"]) <= 1 / 24
    assert "Features read at bf16 (" in (tmp_path / "bf16" / "knn.md").read_text()  # the report says what read them
    last_json(
        vitkit_cmd(*args, "--precision", "bf16")
    )  # default --out: a folder of its own, never over the fp32 report
    assert "Features read at bf16 (" in (checkpoint / "vit.knn_bf16" / "knn.md").read_text()


def image_folder(root):
    """train/ and test/ folders of 28x28 grayscale PNGs, 3 classes told apart by brightness."""
    rng = np.random.default_rng(0)
    for split, n in (("train", 20), ("test", 8)):
        for c, name in enumerate(("dark", "mid", "bright")):
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 50, (28, 28)) + 90 * c
                Image.fromarray(pixels.astype(np.uint8), mode="L").save(root / split / name / f"{i}.png")
    return root


def test_linear_probe_and_knn(vitkit_cmd, checkpoint, tmp_path):
    data = image_folder(tmp_path / "data")
    probe = last_json(
        vitkit_cmd(
            "linear-probe",
            checkpoint / "vit",
            "--data",
            data,
            "--l2",
            "1e-4,1",
            "--max-iter",
            "50",
            "--val-fraction",
            "0.25",
            "--out",
            tmp_path / "lp",
        )
    )
    assert [r["l2"] for r in probe["runs"]] == [1e-4, 1.0] and (probe["n_train"], probe["n_val"], probe["n_test"]) == (
        45,
        15,
        24,
    )
    assert probe["best_l2"] in (1e-4, 1.0) and probe["test_top1"] > 0.9  # brightness survives any random ViT
    assert "| 0.0001 |" in (tmp_path / "lp" / "linear_probe.md").read_text()
    knn = last_json(
        vitkit_cmd(
            "knn", checkpoint / "vit", "--data", data, "--k", "1,5", "--temperature", "0", "--out", tmp_path / "knn"
        )
    )
    assert (
        set(knn["top1"]) == {"1", "5"} and knn["n_train"] == 54 and knn["temperature"] is None
    )  # 10% of train/ held out as val
    assert all(v > 0.9 for v in knn["top1"].values())
    assert json.loads((tmp_path / "knn" / "knn.json").read_text())["top1"] == knn["top1"]
    # --image-size: its own report beside the one at the model's resolution (it replaced it, unsaid), the size said
    import shutil

    shutil.copytree(checkpoint / "vit", tmp_path / "mine")
    reports = {}
    for extra in ([], ["--image-size", "32"]):
        done = last_json(vitkit_cmd("knn", tmp_path / "mine", "--data", data, "--k", "1", *extra))
        reports[done["image_size"][0]] = sorted(tmp_path.glob("mine.knn*"))
    assert len(reports[32]) == 2 and len(reports[28]) == 1 and reports[28][0] in reports[32]
    new = next(p for p in reports[32] if p != reports[28][0])
    assert new.name.endswith("_32px") and "at 32x32 px" in (new / "knn.md").read_text()
    assert "at 28x28 px" in (reports[28][0] / "knn.md").read_text()


@needs_fashion_mnist
def test_finetune_at_a_higher_resolution_then_eval(vitkit_cmd, checkpoint, tmp_path):
    out = tmp_path / "ft"
    done = vitkit_cmd(  # in-process (fewshot above runs the console script)
        "finetune",
        "--from",
        checkpoint / "vit.npz",
        "--image-size",
        "32",
        "--lr",
        "0.03",
        "--out",
        out,
        "--steps",
        "2",
        "--batch-size",
        "64",
        "--micro-batch",
        "32",
        "--no-progress",
        "train.warmup_steps=1",
        "train.threads=1",
        "augment.crop=pad",
        "data.val_fraction=0.05",
    )
    result = last_json(done)
    assert (
        f"== learning rate 0.03 (run 1 of 1): {out / 'lr_0.03'}" in done.stdout
    )  # each run's lines say whose they are
    assert (
        "lr 0.03 (sgd, cosine)" in done.stdout and "warning    train.warmup_steps" not in done.stdout
    )  # warmup 1 of 2 steps
    assert [r["run"] for r in result["runs"]] == ["lr_0.03"] and result["image_size"] == [32, 32]
    config = json.loads((out / "final" / "config.json").read_text())
    assert (
        config["model"]["image_size"] == [32, 32] and config["model"]["representation_size"] is None
    )  # pre-logits dropped
    assert config["class_names"][0] == "T-shirt/top"
    evaluated = last_json(vitkit_cmd("eval", out, "--split", "test", "--json"))
    assert evaluated["n"] == 10_000
    assert (out / "sweep.md").is_file() and (out / "sweep.json").is_file()


def test_user_errors_are_one_line(vitkit_cmd, checkpoint, tmp_path):
    done = vitkit_cmd("fewshot", checkpoint / "vit", "--shots", "0,5")  # argparse's own error
    assert done.returncode == 2 and "expected positive values" in done.stderr
    done = vitkit_cmd("finetune", "--from", tmp_path / "missing.npz", "--out", tmp_path / "ft", "data.name=synthetic")
    assert (
        done.returncode == 2
        and "missing.npz: no such file" in done.stderr
        and len(done.stderr.strip().splitlines()) == 1
    )
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("")
    done = vitkit_cmd("finetune", "--from", checkpoint / "vit", "--out", tmp_path / "busy", "data.name=synthetic")
    assert done.returncode == 2 and "choose another --out" in done.stderr
    done = vitkit_cmd("fewshot", checkpoint / "vit", "--data", "synthetic-does-not-exist")
    assert done.returncode == 2 and "no such file or directory" in done.stderr


def test_a_finetune_refused_before_any_step_leaves_no_out_behind(vitkit_cmd, checkpoint, tmp_path):
    """A folder of one class passed finetune's own checks and was refused by the first run, leaving finetune.json and
    init/ in --out: the corrected command was then refused as "a fine-tuning run with other arguments"."""
    for split, count in (("train", 8), ("val", 2)):
        (tmp_path / "data" / split / "only").mkdir(parents=True)
        for i in range(count):
            Image.new("L", (28, 28), 20 * i).save(tmp_path / "data" / split / "only" / f"{i}.png")
    args = ("--from", checkpoint / "vit", "--steps", "1", "--batch-size", "4", "--no-progress", "train.threads=1")
    for out in (tmp_path / "new", tmp_path / "empty"):  # one the command makes, one that was there, empty
        if out.name == "empty":
            out.mkdir()
        done = vitkit_cmd("finetune", *args, "--data", tmp_path / "data", "--out", out)
        assert done.returncode == 2 and "one class ('only')" in done.stderr and "Traceback" not in done.stderr
        assert out.exists() == (out.name == "empty") and not (out.exists() and any(out.iterdir()))
    (tmp_path / "data" / "train" / "other").mkdir()
    for i in range(4):
        Image.new("L", (28, 28), 200).save(tmp_path / "data" / "train" / "other" / f"{i}.png")
    (tmp_path / "data" / "val" / "other").mkdir()
    Image.new("L", (28, 28), 200).save(tmp_path / "data" / "val" / "other" / "0.png")
    assert last_json(vitkit_cmd("finetune", *args, "--data", tmp_path / "data", "--out", tmp_path / "new"))["runs"]


def test_finetune_on_the_checkpoint_s_own_data_keeps_its_held_out_cut(vitkit_cmd, tmp_path):
    """A run trained on a list without a val split, 25% held out with seed 7: finetune cut its own 10% with seed 0, so
    it picked the lr on images the checkpoint had trained on (23 of 28 in a user's run)."""
    rng = np.random.default_rng(0)
    rows = []
    for k, name in enumerate(("dark", "light")):
        for i in range(24):
            path = tmp_path / "imgs" / f"{name}{i}.png"
            path.parent.mkdir(exist_ok=True)
            Image.fromarray((rng.integers(0, 60, (12, 12, 3)) + 150 * k).astype(np.uint8)).save(path)
            rows.append(f"{path},{name}")
    (tmp_path / "all.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    run = tmp_path / "run"
    done = vitkit_cmd(
        "train",
        "--data",
        tmp_path / "all.csv",
        "--out",
        run,
        "--no-progress",
        "train.steps=2",
        "model.name=vit_test",
        "model.depth=1",
        "model.image_size=12",
        "model.patch_size=4",
        "train.batch_size=8",
        "train.threads=1",
        "augment.crop=pad",
        "data.val_fraction=0.25",
        "data.split_seed=7",
    )
    assert done.returncode == 0, done.stderr
    done = vitkit_cmd(
        "finetune",
        "--from",
        run,
        "--image-size",
        "16",
        "--lr",
        "0.01",
        "--out",
        tmp_path / "ft",
        "--steps",
        "2",
        "--batch-size",
        "8",
        "--no-progress",
        "train.warmup_steps=1",
        "train.threads=1",
        "augment.crop=pad",
    )
    assert done.returncode == 0, done.stderr
    assert "held out as it was: val_fraction 0.25, split_seed 7" in done.stdout
    # one learning rate picks nothing, and says so (it printed "picked lr 0.01" and "picked: ...")
    said = "\n".join(line for line in done.stdout.splitlines() if not line.startswith("{"))  # the JSON keeps its keys
    assert "one learning rate (0.01), nothing picked" in said and "picked" not in said.replace("nothing picked", ""), (
        said
    )
    held_out = [
        json.loads((where / "final" / "config.json").read_text())["data"]["splits"]["val"]
        for where in (run, tmp_path / "ft" / "lr_0.01")
    ]
    assert held_out[0]["n"] == 12 and held_out[0] == held_out[1]  # the very same images
    # a cut given anew: not "held out as it was" (it said so of seed 1 too), and warned of (val overlaps its training images)
    done = vitkit_cmd(
        "finetune",
        "--from",
        run,
        "--image-size",
        "16",
        "--lr",
        "0.01",
        "--out",
        tmp_path / "ft1",
        "--steps",
        "1",
        "--batch-size",
        "8",
        "--no-progress",
        "train.warmup_steps=1",
        "train.threads=1",
        "augment.crop=pad",
        "data.split_seed=1",
    )
    assert done.returncode == 0, done.stderr
    assert "held out as it was" not in done.stdout
    assert (
        "warning    data.split_seed=1 cuts the data anew" in done.stdout
        and "trained with data.split_seed=7" in done.stdout
    )
