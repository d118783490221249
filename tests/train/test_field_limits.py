"""Each limit sits on the field it guards, once: the run config's sections and the commands' requests declare theirs
in field metadata (`vitkit.limits.limits`), and the CLI parser leaves the range of a number to them."""

import dataclasses

import pytest

from vitkit import limits
from vitkit.cli import UNREQUESTED, build_parser
from vitkit.data.augment import AugmentConfig
from vitkit.errors import ConfigError
from vitkit.evaluate import requests as eval_requests
from vitkit.train import config
from vitkit.train import requests as train_requests


def test_the_run_config_keeps_no_tables_of_limits_away_from_its_fields():
    assert not {"CHOICES", "POSITIVE", "INTERVALS"} & set(vars(config))


@pytest.mark.parametrize(
    "cls, name, limit",
    [
        (config.TrainConfig, "lr", limits.Limit(interval="[0, inf)")),
        (config.TrainConfig, "steps", limits.Limit(positive=True)),
        (config.TrainConfig, "optimizer", limits.Limit(choices=("adamw", "adam", "sgd"))),
        (config.DataConfig, "val_fraction", limits.Limit(interval="[0, 1)")),
        (config.DataConfig, "on_error", limits.Limit(choices=("skip", "fail"))),
        (AugmentConfig, "hflip", limits.Limit(interval="[0, 1]")),
        (AugmentConfig, "eval_crop_pct", limits.DOMAINS["crop_pct"]),
        (config.TrainConfig, "threads", limits.DOMAINS["threads"]),
        (eval_requests.FeatureRequest, "threads", limits.DOMAINS["threads"]),
        (eval_requests.InspectRequest, "show", limits.Limit(positive=True)),
        (train_requests.DataRequest, "per_shard", limits.Limit(positive=True)),
    ],
)
def test_each_limit_is_declared_on_its_field(cls, name, limit):
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    assert limits.limit_of(field) == limit


def test_every_limited_section_field_declares_its_limit_in_metadata():
    limited = {
        f"{section}.{f.name}"
        for section, cls in config.SECTIONS.items()
        for f in dataclasses.fields(cls)
        if limits.limit_of(f) != limits.NO_LIMIT
    }
    assert (
        len(limited) == 47
        and {"train.log_to", "train.threads", "augment.rrc_scale", "data.repeats", "data.split_rule"} <= limited
    )


def _number_types(parser):
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, command in sub.choices.items():
        for action in command._actions:
            if action.type is not None and getattr(action.type, "__name__", "") in ("int", "_finite_float", "float"):
                yield name, action


def test_the_parser_checks_no_number_ranges_of_commands_that_make_a_request():
    wrapped = {(name, a.dest) for name, a in _number_types(build_parser()) if a.type not in (int, float)}
    plain = {(name, a.dest) for name, a in _number_types(build_parser()) if a.type in (int, float)}
    assert wrapped and {name for name, _ in wrapped} <= set(UNREQUESTED)
    assert ("train", "steps") not in wrapped and ("eval", "batch_size") in plain and ("finetune", "steps") in plain


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: eval_requests.EvalRequest("ck", batch_size=0), "--batch-size: expected a positive number, got 0"),
        (
            lambda: eval_requests.EvalRequest("ck", val_fraction=1.0),
            "--val-fraction: expected a share from 0 to below 1",
        ),
        (lambda: eval_requests.KnnRequest("ck", temperature=float("inf")), "--temperature: expected a finite number"),
        (lambda: eval_requests.LinearProbeRequest("ck", max_iter=0), "--max-iter: expected a positive number"),
        (
            lambda: eval_requests.FeatureRequest("ck", threads=-1),
            "--threads: expected a thread count from 0 (automatic",
        ),
        (lambda: eval_requests.FeatureRequest("ck", random_init=2**40), "--random-init: expected at most"),
        (lambda: train_requests.FinetuneRequest("ck", "o", lrs=(float("nan"),)), "--lr: expected a finite number"),
        (lambda: train_requests.FinetuneRequest("ck", "o", epochs=0.0), "--epochs: expected a positive number of"),
        (lambda: train_requests.DataRequest(per_shard=0), "--per-shard: expected a positive number, got 0"),
    ],
)
def test_a_request_checks_its_numbers_by_its_fields_limits(make, words):
    with pytest.raises(ConfigError, match="^" + words.replace("(", r"\(").replace("+", r"\+")):
        make()


def test_a_request_field_that_becomes_a_run_config_key_is_checked_there():
    request = train_requests.FinetuneRequest("ck", "o", steps=0, batch_size=0)
    with pytest.raises(ConfigError, match=r"train\.steps: expected a positive number, got 0"):
        config.load_run_config(overrides=[("train.steps", request.steps)])
