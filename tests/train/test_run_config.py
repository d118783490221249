import pytest

from vitkit.errors import ConfigError
from vitkit.train.config import dump_run_config, from_dict, load_run_config


def test_overrides_typed_and_applied(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("model: {name: vit_test}\ntrain: {lr: 3.0e-4, steps: 10}\n")
    config = load_run_config(
        path,
        ["train.lr=1e-3", "model.name=vit_s16", "data.name=synthetic", "train.betas=[0.9, 0.95]", "train.ema=null"],
    )
    assert config.train.lr == 1e-3 and isinstance(config.train.lr, float)
    assert config.train.steps == 10
    assert config.model["name"] == "vit_s16"
    assert config.data.name == "synthetic"
    assert config.train.betas == (0.9, 0.95)
    assert config.train.ema is None


def test_round_trip_through_yaml(tmp_path):
    config = load_run_config(None, ["train.steps=7", "augment.rrc_scale=[0.5, 1.0]", "model.width=96"])
    path = tmp_path / "again.yaml"
    path.write_text(dump_run_config(config))
    assert load_run_config(path) == config


@pytest.mark.parametrize(
    "override, key",
    [
        ("train.lrr=1", "train.lrr"),
        ("model.widht=3", "model.widht"),
        ("optim.lr=1", "optim"),
        ("train.steps=ten", "train.steps"),
        ("train.steps=-3", "train.steps"),
        ("train.optimizer=lamb", "train.optimizer"),
        ("augment.crop=zoom", "augment.crop"),
        ("train.compile=3", "train.compile"),
        ("model.name=vit_zz9", "model.name"),
        ("model.depth=0", "depth"),
    ],
)
def test_bad_key_or_value_names_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_run_config(None, [override])


def test_override_needs_section_and_value():
    with pytest.raises(ConfigError, match="section.key=value"):
        load_run_config(None, ["lr=3"])


def test_unknown_key_in_file_names_it(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("train:\n  stepz: 3\n")
    with pytest.raises(ConfigError, match=r"train\.stepz: unknown key"):
        load_run_config(path)


@pytest.mark.parametrize("name", ["null", "3", "[vit_b16]"])
def test_a_model_name_that_is_not_a_string_is_one_clear_error(tmp_path, name):
    """Found by tests/test_input_fuzz.py: `model: {name: null}` ended in an AttributeError inside the registry."""
    path = tmp_path / "bad.yaml"
    path.write_text(f"model:\n  name: {name}\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: model\.name: expected a model name"):
        load_run_config(path)


def test_shipped_configs_load():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "configs"
    for path in sorted(root.glob("*.yaml")):
        config = load_run_config(path)
        config.model_config(num_classes=10)
    assert (root / "fashion_mnist.yaml").is_file() and (root / "imagenet_vit_b16.yaml").is_file()


def test_defaults_are_valid():
    assert from_dict({}).model_config(num_classes=10).in_chans == 1


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["model.name=vit_test", "model.patch_size=5"],
            r"patch_size: image height 16 is not divisible by the patch size 5; .* e\.g\. 15 or 20$",
        ),
        (["model.name=vit_test", "model.num_heads=3"], r"num_heads: 3 heads do not divide width 32"),
        (["model.width=wide"], r"width: expected a positive integer, got 'wide'"),
        (["train.lr=-0.1"], r"train\.lr: expected a value in \[0, inf\)"),
        (["train.eval_batch_size=-1"], r"train\.eval_batch_size: expected a positive number"),
        (["train.seed=-1"], r"train\.seed: expected a number >= 0"),
        (["augment.hflip=1.5"], r"augment\.hflip: expected a value in \[0, 1\]"),
        (["data.val_fraction=1"], r"data\.val_fraction: expected a value in \[0, 1\)"),
        (["train.betas=[0.9, 1.2]"], r"train\.betas: expected a value in \[0, 1\)"),
        (["augment.rrc_scale=[0.9, 0.1]"], r"augment\.rrc_scale: expected \[low, high\] with low <= high"),
        (["augment.erase=2"], r"augment\.erase: expected a value in \[0, 1\]"),
        (["augment.erase_ratio=[3, 0.3]"], r"augment\.erase_ratio: expected \[low, high\] with low <= high"),
        (["train.keep_checkpoints=0"], r"train\.keep_checkpoints: expected a value in \[1, inf\), got 0"),
        (
            ["train.keep_checkpoints=-1"],
            r"train\.keep_checkpoints: expected a value in \[1, inf\), got -1",
        ),  # it said ">= 0"
        (["train.ema=1"], r"train\.ema: expected a value in \(0, 1\)"),
        (
            ["train.batch_size=64", "train.micro_batch=24"],
            r"train\.micro_batch: 24 does not divide train\.batch_size 64",
        ),
        (["train.max_nonfinite_steps=0"], r"train\.max_nonfinite_steps: expected a positive number"),
        (["data.on_error=ignore"], r"data\.on_error: expected one of skip, fail"),
        (["train.layer_decay=1.5"], r"train\.layer_decay: expected a value in \(0, 1\]"),
        (["data.repeats=0"], r"data\.repeats: expected a positive number"),
        (["augment.auto_augment=rand-m9-x2"], r"augment\.auto_augment: 'x2' in 'rand-m9-x2' is not a part"),
        (["augment.auto_augment=autoaug"], r"augment\.auto_augment: expected a RandAugment string such as"),
        (
            ["augment.auto_augment=ta_wide", "augment.randaugment_ops=2"],
            r"augment\.auto_augment=ta_wide and augment\.randaugment_ops=2 are two RandAugments; keep one",
        ),
    ],
)
def test_impossible_values_name_the_key_and_the_reason(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_run_config(None, overrides)


def test_a_batch_must_split_across_the_processes(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(
        ConfigError, match=r"train\.batch_size: 128 images per micro-batch do not split evenly across 3 processes"
    ):
        load_run_config(None, [])
    with pytest.raises(
        ConfigError, match=r"train\.micro_batch: 32 images per micro-batch do not split evenly across 3 processes"
    ):
        load_run_config(None, ["train.batch_size=96", "train.micro_batch=32"])
    assert load_run_config(None, ["train.batch_size=96"]).train.batch_size == 96
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ConfigError, match="WORLD_SIZE"):
        load_run_config(None, [])


def test_config_errors_come_before_any_work(tmp_path, vitkit_cmd):
    done = vitkit_cmd(
        "train", "--out", tmp_path / "run", "data.name=synthetic", "model.name=vit_test", "model.num_heads=5"
    )
    assert done.returncode == 2 and "num_heads: 5 heads do not divide width 32" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_the_training_length_is_steps_or_epochs_and_a_later_layer_replaces_the_earlier_one(tmp_path):
    from vitkit.train.finetune import finetune_recipe

    path = tmp_path / "run.yaml"
    path.write_text("train: {steps: 10, batch_size: 32}\n")
    config = load_run_config(path, ["train.epochs=3"])  # the overrides replace the file's length
    assert config.train.epochs == 3.0 and "steps" not in config.to_dict()["train"]
    assert config.with_steps_for(100).train.steps == 10  # ceil(3 x 100 / 32)
    assert config.with_steps_for(1).train.steps == 1
    assert load_run_config(None, ["train.steps=7"]).with_steps_for(100).train.steps == 7  # no epochs: as given
    again = tmp_path / "again.yaml"
    again.write_text(dump_run_config(config))
    assert load_run_config(again) == config and load_run_config(again, ["train.steps=4"]).train.epochs is None
    path.write_text("train: {steps: 10, epochs: 2}\n")
    with pytest.raises(ConfigError, match="run.yaml: train.steps=10 and train.epochs=2 both set the training length"):
        load_run_config(path)
    # fine-tuning: the recipe's 10,000 steps give way to a length in epochs
    recipe = finetune_recipe(None, ["train.epochs=1"])
    assert recipe.train.epochs == 1.0 and recipe.with_steps_for(5120).train.steps == 10  # batch 512
    path.write_text("train: {epochs: 2}\n")
    assert finetune_recipe(path).train.epochs == 2.0


def test_a_shipped_recipe_named_from_another_directory_is_pointed_to(tmp_path, monkeypatch):
    """`vitkit train --config configs/fashion_mnist.yaml` from outside the repository said only "config file not found"."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ConfigError, match=r"config file not found; the recipe of that name is .*configs/fashion_mnist.yaml"
    ):
        load_run_config("configs/fashion_mnist.yaml")
    with pytest.raises(ConfigError, match=r"nothing.yaml: config file not found$"):
        load_run_config("configs/nothing.yaml")


def test_a_run_yaml_written_before_the_split_rule_resumes_with_the_random_hold_out_it_ran_with(tmp_path):
    """Its run held val out at random (vitkit's only rule then); resumed with today's default, the stratified cut, it
    would train on other images than its checkpoints (refused as "trained on other images"). A user's own config
    naming no rule gets today's default."""
    from vitkit.train.loop import resume_config

    config = load_run_config(None, ["train.steps=7", "data.name=synthetic"])
    saved = dump_run_config(config)
    (tmp_path / "run.yaml").write_text("\n".join(line for line in saved.splitlines() if "split_rule" not in line))
    assert "split_rule" in saved and resume_config(tmp_path).data.split_rule == "random"
    assert resume_config(tmp_path, ["data.split_rule=stratified"]).data.split_rule == "stratified"
    assert load_run_config(tmp_path / "run.yaml").data.split_rule == "stratified"
    (tmp_path / "run.yaml").write_text(saved)
    assert resume_config(tmp_path) == config and config.data.split_rule == "stratified"
