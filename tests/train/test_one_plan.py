"""One request, one plan (STYLE.md 15): a command builds its model config once, reads rank and world size in one
module, parses "H [W]" in one place, and keeps each of its limits in one place."""

import re
from pathlib import Path

import pytest

from vitkit.cli import main

SRC = Path(__file__).resolve().parents[2] / "src" / "vitkit"

TINY = [
    "data.name=synthetic",
    "data.synthetic_size=32",
    "model.name=vit_test",
    "model.depth=1",
    "train.steps=1",
    "train.batch_size=16",
    "train.threads=1",
    "train.warmup_steps=0",
    "train.log_every=1",
    "train.eval_every=1",
    "train.checkpoint_every=1",
    "augment.crop=pad",
]


def _sources():
    return sorted(SRC.rglob("*.py"))


def _count_get_config(monkeypatch) -> list:
    """Every call of vitkit.models.registry.get_config, by any module that bound it, counted in the returned list. The
    modules that bind it are imported first: one imported while it is patched would keep the counting function."""
    import importlib
    import sys

    from vitkit.models import registry

    for name in ("vitkit.train.config", "vitkit.train.finetune", "vitkit.cli.models", "vitkit.cli.benchmark"):
        importlib.import_module(name)

    calls, real = [], registry.get_config

    def counted(name, **overrides):
        calls.append(name)
        return real(name, **overrides)

    # vitkit's modules only: another library's module may raise on the attribute (pydantic.config does)
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] == "vitkit" and getattr(module, "get_config", None) is real:
            monkeypatch.setattr(module, "get_config", counted)
    return calls


def test_vitkit_train_builds_its_model_config_once(tmp_path, monkeypatch):
    """The model config came from the run config's model section at seven places (data, batches, the model, the
    resume check, the fit's report, the sweep), and loading the run config built it twice (once to learn the family's
    keys, once to check the overrides) and the plan's model line a third time for its label. Now checking the model
    section builds it once, the typed model choice carries it, and everything reads that object."""
    calls = _count_get_config(monkeypatch)
    assert main(["train", "--out", str(tmp_path / "run"), "--no-progress", *TINY]) == 0
    assert calls == ["vit_test"], calls


def test_vitkit_train_fitted_to_a_folder_builds_its_model_config_once(tmp_path, monkeypatch):
    """With no model named, the fit reads the data and train sections the overrides make before the model is chosen:
    no model config is built for the default model the fit then replaces, only the fitted one."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for name in ("a", "b"):
            (tmp_path / "data" / split / name).mkdir(parents=True)
            for i in range(4):
                pixels = rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(tmp_path / "data" / split / name / f"{i}.png")
    calls = _count_get_config(monkeypatch)
    argv = ["train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "run"), "--no-progress"]
    assert main([*argv, "train.steps=1", "train.threads=1", "train.eval_every=1"]) == 0
    assert len(calls) == 1 and calls[0] != "vit_mini4_28", calls


def test_vitkit_finetune_builds_its_model_config_once(tmp_path, monkeypatch):
    """`vitkit finetune` with two learning rates: the recipe's model section is checked (its config built) once, the
    fit is applied to that recipe with dataclasses.replace, and each run's model choice is the checkpoint's config as
    read, built with replace on the registered config, never by name again: one get_config call for the whole sweep,
    not one per candidate run."""
    from vitkit import create_model, save_pretrained

    model = create_model("vit_test", image_size=8, depth=1, num_classes=3)
    save_pretrained(model, tmp_path / "pre")
    calls = _count_get_config(monkeypatch)
    argv = ["finetune", "--from", str(tmp_path / "pre"), "--out", str(tmp_path / "ft"), "--no-progress"]
    argv += ["--lr", "0.01,0.03", "--steps", "1", "--batch-size", "16", "data.name=synthetic"]
    argv += ["data.synthetic_size=32", "data.synthetic_classes=3", "train.threads=1", "augment.crop=pad"]
    assert main(argv) == 0
    assert len(calls) == 1, calls


def test_only_the_plan_builds_a_model_config_from_a_run_config():
    callers = {p.relative_to(SRC).as_posix() for p in _sources() if ".model_config(" in p.read_text()}
    assert callers <= {"train/plan.py"}, callers


def test_rank_and_world_size_are_read_from_the_environment_in_one_module():
    names = re.compile(r"\b(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|TORCHELASTIC_RUN_ID)\b")
    readers = {
        p.relative_to(SRC).as_posix()
        for p in _sources()
        for line in p.read_text().splitlines()
        if names.search(line) and ("environ" in line or "getenv" in line)
    }
    assert readers == {"train/distributed.py"}, readers


def test_one_definition_of_the_largest_whole_number_and_one_micro_batch_check():
    defined = [p.relative_to(SRC).as_posix() for p in _sources() if re.search(r"^MAX_INT\s*=", p.read_text(), re.M)]
    assert len(defined) == 1, defined
    checks = [p.relative_to(SRC).as_posix() for p in _sources() if "does not divide train.batch_size" in p.read_text()]
    assert len(checks) == 1, checks


@pytest.mark.parametrize(("values", "pair"), [([32], (32, 32)), ([32, 48], (32, 48)), (None, None)])
def test_the_cli_size_is_always_height_and_width(values, pair):
    from vitkit.cli import image_size_arg

    assert image_size_arg(values) == pair


def test_one_parser_of_h_w_sizes():
    from vitkit.models.config import size_pair

    assert size_pair(7, "image_size") == (7, 7)
    assert size_pair([7], "--image-size") == (7, 7)
    assert size_pair((7, 9), "image_size") == (7, 9)
    with pytest.raises(Exception, match="--image-size: expected"):
        size_pair([1, 2, 3], "--image-size")


def test_training_never_reads_the_parsed_arguments():
    """The parsers of train, finetune and data make a typed request (vitkit.train.requests); training never sees
    argparse's Namespace."""
    below = [
        p.relative_to(SRC).as_posix()
        for p in sorted((SRC / "train").glob("*.py"))
        if re.search(r"\bopts\.|argparse", p.read_text())
    ]
    assert below == [], below
