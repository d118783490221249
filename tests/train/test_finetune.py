"""Fine-tuning: head rules, resolution change, the recipe, the learning-rate sweep and its continuation."""

import json
import os

import pytest
import torch

import vitkit
from vitkit.checkpoint import save_checkpoint
from vitkit.checkpoint.native import load_native
from vitkit.errors import ConfigError
from vitkit.models import create_model
from vitkit.train.finetune import finetune, finetune_recipe, pick_best, prepare_for_finetuning, registered_name

TINY = [
    "data.name=synthetic",
    "data.synthetic_size=48",
    "data.synthetic_classes=3",
    "data.val_split=test",
    "train.batch_size=16",
    "train.micro_batch=8",
    "train.steps=3",
    "train.warmup_steps=1",
    "train.eval_every=3",
    "train.log_every=1",
    "train.checkpoint_every=3",
    "train.progress=false",
    "train.figures=false",
    "train.threads=1",
    "augment.crop=none",
]


def pretrained(tmp_path, **overrides):
    model = create_model("vit_test", **{"image_size": 8, "depth": 1, "mlp_act": "gelu_tanh", **overrides})
    with torch.no_grad():
        model.head.weight.normal_()
    vitkit.save_pretrained(model, tmp_path / "pre")
    return model, tmp_path / "pre"


def test_recipe_is_the_papers_under_files_and_overrides(tmp_path):
    r = finetune_recipe()
    t = r.train
    assert (t.optimizer, t.momentum, t.weight_decay, t.clip_norm, t.decay, t.batch_size, t.warmup_steps) == (
        "sgd",
        0.9,
        0.0,
        1.0,
        "cosine",
        512,
        500,
    )
    assert r.data.val_split == "val" and r.augment.crop == "rrc"
    (tmp_path / "r.yaml").write_text("train:\n  steps: 77\n  micro_batch: 64\naugment:\n  crop: pad\n")
    r = finetune_recipe(tmp_path / "r.yaml", ["train.steps=5"])
    assert (r.train.steps, r.train.micro_batch, r.train.optimizer, r.augment.crop) == (5, 64, "sgd", "pad")
    with pytest.raises(ConfigError, match="train.bogus"):
        finetune_recipe(None, ["train.bogus=1"])


def test_a_shorter_fine_tuning_run_warms_up_for_the_papers_share_of_it(tmp_path):
    """500 warmup steps of the paper's 10k (CIFAR); Pets' 500 steps warmed up for all 500 and never decayed (a warning
    said so). A warmup given in the file or the overrides, and a length in epochs, keep theirs."""
    steps = lambda *o: (finetune_recipe(None, list(o)).train.steps, finetune_recipe(None, list(o)).train.warmup_steps)
    assert steps() == (10_000, 500) and steps("train.steps=20000") == (20_000, 500)
    assert steps("train.steps=500") == (500, 25) and steps("train.steps=9") == (9, 0)
    assert steps("train.steps=500", "train.warmup_steps=100") == (500, 100)
    (tmp_path / "r.yaml").write_text("train:\n  steps: 500\n  warmup_steps: 50\n")
    assert finetune_recipe(tmp_path / "r.yaml").train.warmup_steps == 50
    assert finetune_recipe(None, ["train.epochs=3"]).train.warmup_steps == 500


@pytest.mark.parametrize("keep", [False, True])
def test_head_rules(tmp_path, keep):
    source, path = pretrained(tmp_path, representation_size=12, num_classes=10)
    model = vitkit.load_pretrained(path)
    model = prepare_for_finetuning(model, 10, keep_pre_logits=keep, drop_path=0.1)
    assert model.config.num_classes == 10 and model.config.drop_path == 0.1
    assert (
        torch.count_nonzero(model.head.weight) == 0 and torch.count_nonzero(model.head.bias) == 0
    )  # new even for 10 -> 10
    assert (model.config.representation_size == 12) is keep
    assert isinstance(model.pre_logits, torch.nn.Identity) is not keep
    assert model.head.in_features == (12 if keep else 32)
    if keep:
        torch.testing.assert_close(model.pre_logits[0].weight, source.pre_logits[0].weight)
    torch.testing.assert_close(model.blocks[0].attn.qkv.weight, source.blocks[0].attn.qkv.weight)


def test_finetune_at_a_new_resolution_resamples_the_grid_and_writes_a_sweep(tmp_path):
    source, path = pretrained(tmp_path)
    npz = save_checkpoint(source, tmp_path / "pre.npz", "npz")  # any format vitkit reads
    out = tmp_path / "ft"
    result = finetune(finetune_recipe(None, TINY), npz, out, lrs=[0.01, 0.1], image_size=16)
    init, extra = load_native(out / "init")
    assert init.config.image_size == (16, 16) and init.config.grid_size == (4, 4) and init.config.num_classes == 3
    assert init.pos_embed.shape == (1, 1 + 16, 32)
    expected = vitkit.resample_pos_embed(source.pos_embed.data, (4, 4))
    torch.testing.assert_close(init.pos_embed.data, expected)
    assert extra["class_names"] == ["class_0", "class_1", "class_2"]
    for lr in ("0.01", "0.1"):
        assert f"lr: {lr}" in (out / f"lr_{lr}" / "run.yaml").read_text()
        final, _ = load_native(out / f"lr_{lr}" / "final")
        assert final.pos_embed.shape == (1, 17, 32) and final.config.image_size == (16, 16)
        assert not torch.equal(final.pos_embed, init.pos_embed)  # trained
    assert [r["lr"] for r in result["runs"]] == [0.01, 0.1]
    best = max(result["runs"], key=lambda r: r["final_val_top1"])
    assert result["best"]["lr"] == best["lr"]
    assert (out / "final").resolve() == (out / best["run"] / "final").resolve()
    saved = json.loads((out / "sweep.json").read_text())
    assert saved["best"]["run"] == best["run"] and "| lr |" in (out / "sweep.md").read_text()


def test_sweep_continues_and_refuses_other_arguments(tmp_path, monkeypatch):
    _, path = pretrained(tmp_path)
    out = tmp_path / "ft"
    recipe = finetune_recipe(None, TINY)
    first = finetune(recipe, path, out, lrs=[0.01])
    before = (out / "lr_0.01" / "final" / "model.safetensors").stat().st_mtime_ns
    again = finetune(recipe, path, out, lrs=[0.01])  # finished: kept, not retrained
    assert again["runs"] == first["runs"]
    assert (out / "lr_0.01" / "final" / "model.safetensors").stat().st_mtime_ns == before
    with pytest.raises(ConfigError, match=r"other arguments \(lrs differ"):  # which ones, said
        finetune(recipe, path, out, lrs=[0.01, 0.03])
    # the same checkpoint named from another directory is the same sweep (it was "other arguments": paths as typed)
    monkeypatch.chdir(path.parent)
    assert finetune(recipe, os.path.relpath(path), out, lrs=[0.01])["runs"] == first["runs"]
    with pytest.raises(ConfigError, match="architecture from the checkpoint"):
        finetune(finetune_recipe(None, [*TINY, "model.depth=3"]), path, tmp_path / "other")


def test_a_sweep_stopped_by_a_signal_picks_nothing_until_every_learning_rate_has_finished(tmp_path, monkeypatch):
    """SIGINT during the second of two learning rates published a pick (and out/final) from the first alone, exit 0."""
    import vitkit.train.finetune as transfer

    _, path = pretrained(tmp_path)
    out = tmp_path / "ft"
    recipe = finetune_recipe(None, [*TINY, "train.checkpoint_every=1"])
    real = transfer.train

    def stopped_in_the_second(config, run_dir, **kwargs):  # as SIGINT at step 2 of lr 0.03 does
        return real(config, run_dir, **kwargs, **({"stop_at": 2} if run_dir.name == "lr_0.03" else {}))

    monkeypatch.setattr(transfer, "train", stopped_in_the_second)
    stopped = finetune(recipe, path, out, lrs=[0.01, 0.03])
    assert stopped == {"stopped": {"lr": 0.03, "run": "lr_0.03", "step": 2, "steps": 3, "runs_finished": 1, "runs": 2}}
    assert not (out / "final").exists() and not (out / "sweep.json").exists()
    monkeypatch.setattr(transfer, "train", real)
    done = finetune(recipe, path, out, lrs=[0.01, 0.03])  # the same command again continues the stopped run
    assert [r["lr"] for r in done["runs"]] == [0.01, 0.03] and all(r["steps"] == 3 for r in done["runs"])
    assert (out / "final").exists() and json.loads((out / "sweep.json").read_text())["best"] == done["best"]


def test_pick_best_by_final_validation_accuracy():
    runs = [
        {"lr": 0.001, "final_val_top1": 0.5},
        {"lr": 0.003, "final_val_top1": 0.8},
        {"lr": 0.01, "final_val_top1": 0.8},
        {"lr": 0.03, "final_val_top1": None},
    ]
    assert pick_best(runs)["lr"] == 0.003  # the earliest of equals; a run without validation never wins
    with pytest.raises(ConfigError):
        pick_best([])


def test_registered_name():
    assert registered_name(create_model("vit_b16").config) == "vit_b16"
    assert registered_name(create_model("vit_test", image_size=8).config) == "vit_test"
    assert (
        registered_name(create_model("vit_mini4_28", width=64, mlp_dim=128, num_heads=4).config) == "vit_mini4_28"
    )  # same patches


def test_the_checkpoints_patch_size_decides_which_sizes_it_fine_tunes_at(tmp_path):
    """A patch-3 checkpoint at 9 px (not a multiple of the recipe's placeholder model's patch of 4), by --image-size
    and by model.image_size alike; a size its patches do not divide is one error, and --out stays free for the
    corrected command."""
    _, path = pretrained(tmp_path, image_size=6, patch_size=3)
    for i, (overrides, size) in enumerate([([], 9), (["model.image_size=9"], None)]):
        finetune(finetune_recipe(None, [*TINY, *overrides]), path, tmp_path / f"ft{i}", image_size=size)
        init, _ = load_native(tmp_path / f"ft{i}" / "init")
        assert init.config.image_size == (9, 9) and init.config.patch_size == (3, 3)
        assert "patch_size" not in json.loads((tmp_path / f"ft{i}" / "finetune.json").read_text())["recipe"]["model"]
    out = tmp_path / "refused"
    with pytest.raises(ConfigError, match=r"at 8 px: .*not divisible by the patch size 3; .* e\.g\. 6 or 9$"):
        finetune(finetune_recipe(None, TINY), path, out, image_size=8)
    assert not out.exists()
    finetune(finetune_recipe(None, TINY), path, out, image_size=12)  # the corrected command, the same --out
    assert load_native(out / "init")[0].config.image_size == (12, 12)
    for key in ("model.patch_size=4", "model.name=vit_b16"):
        with pytest.raises(
            ConfigError, match=f"{key.split('=')[0]}: fine-tuning takes the architecture from the checkpoint"
        ):
            finetune_recipe(None, [*TINY, key])


def test_finetune_crops_suit_the_images_and_flip_as_the_fitted_recipe_does():
    """An Inception crop down to 5% of a 32-px digit left a few pixels of it; the paper's 5% is for large images."""
    from vitkit.data.scan import ImageScan
    from vitkit.train.fit import _finetune_augment, fitted_to_data

    photos, digits = ImageScan(64, 5000, 375, 500, 3), ImageScan(64, 1400, 32, 32, 1)
    flip = f"{fitted_to_data(digits, 1400)[0]['augment.hflip']:g}"
    assert _finetune_augment(photos, 5000, 375, 384) == {
        "augment.crop": "rrc",
        "augment.rrc_scale": "[0.05,1.0]",
        "augment.hflip": flip,
    }
    assert _finetune_augment(photos, 5000, 96, 96)["augment.rrc_scale"] == "[0.25,1.0]"  # a 48-px box of 96
    assert _finetune_augment(digits, 1400, 32, 48) == {"augment.crop": "pad", "augment.pad": 3, "augment.hflip": flip}


def test_a_head_trained_on_the_data_s_classes_is_kept_with_its_rows_in_the_data_s_order(tmp_path, vitkit_cmd):
    """Fine-tuning on the classes a checkpoint scores (a new resolution for the same task) started from a zero head, so
    its first steps relearned what the checkpoint knew; that head is now kept, its rows matched by class name. Another
    task's head, and --new-head, give the paper's zero head."""
    model = create_model("vit_test", image_size=8, depth=1, num_classes=3)
    with torch.no_grad():
        model.head.weight.normal_()
        model.head.bias.normal_()
    order = ["class_2", "class_0", "class_1"]
    vitkit.save_pretrained(model, tmp_path / "pre", extra={"class_names": order})
    recipe = finetune_recipe(None, TINY)
    finetune(recipe, tmp_path / "pre", tmp_path / "kept", image_size=16)
    init, extra = load_native(tmp_path / "kept" / "init")
    rows = [order.index(name) for name in extra["class_names"]]
    assert extra["class_names"] == ["class_0", "class_1", "class_2"] and rows == [1, 2, 0]
    torch.testing.assert_close(init.head.weight, model.head.weight[rows])
    torch.testing.assert_close(init.head.bias, model.head.bias[rows])
    done = vitkit_cmd(
        "finetune",
        "--from",
        tmp_path / "pre",
        "--out",
        tmp_path / "new",
        "--image-size",
        "16",
        "--new-head",
        "--lr",  # one rate: the claim is the head it starts from (no --lr on small data tries three)
        "0.01",
        *TINY,
    )
    assert done.returncode == 0, done.stderr
    assert "its head, all zeros (not trained yet)" in done.stdout + done.stderr
    assert not load_native(tmp_path / "new" / "init")[0].head.weight.any()
    vitkit.save_pretrained(model, tmp_path / "other", extra={"class_names": ["ant", "bee", "cat"]})
    finetune(recipe, tmp_path / "other", tmp_path / "other_ft", image_size=16)
    assert not load_native(tmp_path / "other_ft" / "init")[0].head.weight.any()


def test_finetune_on_small_data_tries_three_learning_rates_and_picks_on_val(tmp_path, vitkit_cmd):
    """With no --lr, finetune ran the recipe's one rate, 0.01, on any data, and on a small set that made the model
    worse at every rate tried after. Under 5,000 training images it now tries 0.003, 0.01 and 0.03, each as long as
    the one was, picks on val and says so in its plan line; a rate given (--lr, train.lr) and 5,000 images run one."""
    pretrained(tmp_path)
    args = ("finetune", "--from", tmp_path / "pre", *TINY, "train.steps=1")
    for out, extra, lrs in (
        ("small", (), [0.003, 0.01, 0.03]),
        ("given", ("train.lr=0.01",), [0.01]),
        ("flag", ("--lr", "0.03"), [0.03]),
        ("large", ("data.synthetic_size=5000",), [0.01]),
    ):
        done = vitkit_cmd(*args, "--out", tmp_path / out, *extra)
        assert done.returncode == 0, done.stderr
        plan = next(line for line in done.stdout.splitlines() if line.startswith("vitkit finetune: fitted to"))
        sweep = json.loads((tmp_path / out / "sweep.json").read_text())
        assert [run["lr"] for run in sweep["runs"]] == lrs, out
        assert {run["steps"] for run in sweep["runs"]} == {1}
        assert ("; tries lr 0.003, 0.01, 0.03; picks on val" in plan) == (len(lrs) == 3), plan
        if len(lrs) == 3:
            assert sweep["best"] == pick_best(sweep["runs"]) and f"picked: {tmp_path / out}/final" in done.stdout


def test_the_sweep_table_gives_seconds_in_tenths_and_marks_the_pick():
    from vitkit.train.finetune import sweep_markdown

    runs = [
        {"lr": lr, "final_val_top1": top1, "best_val_top1": top1, "best_step": 16, "steps": 64, "wall_time_s": 2.318247}
        for lr, top1 in ((0.003, 0.9444), (0.01, 0.9333))
    ]
    table = sweep_markdown(
        {"runs": runs, "best": runs[0], "checkpoint": "run", "image_size": [48, 48], "val_split": "val"}
    )
    assert "| **0.003** | 0.9444 | 0.9444 | 16 | 64 | 2.3 |" in table and "| 0.01 | 0.9333 |" in table
    assert "picked lr 0.003 by final top-1 on the val split" in table
