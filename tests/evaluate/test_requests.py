"""Every scoring command hands the library one frozen, typed request: no argparse Namespace below vitkit.cli, no
`getattr(opts, ...)` fallback, image sizes as (H, W)."""

import argparse
import dataclasses
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import vitkit.evaluate
from vitkit.cli import build_parser
from vitkit.errors import ConfigError
from vitkit.evaluate import requests


def _evaluate_modules():
    return [
        importlib.import_module(f"vitkit.evaluate.{m.name}") for m in pkgutil.iter_modules(vitkit.evaluate.__path__)
    ]


def _functions(module):
    for _, obj in inspect.getmembers(module):
        if inspect.isfunction(obj) and obj.__module__ == module.__name__:
            yield obj
        elif inspect.isclass(obj) and obj.__module__ == module.__name__:
            yield from (f for _, f in inspect.getmembers(obj, inspect.isfunction) if f.__module__ == module.__name__)


def test_no_evaluate_function_takes_a_namespace():
    taking = []
    for module in _evaluate_modules():
        for function in _functions(module):
            for name, parameter in inspect.signature(function).parameters.items():
                if name in ("opts", "args") or "Namespace" in str(parameter.annotation):
                    taking.append(f"{module.__name__}.{function.__qualname__}({name})")
    assert not taking


def test_no_evaluate_source_reads_options():
    found = []
    for path in sorted(Path(vitkit.evaluate.__file__).parent.glob("*.py")):
        text = path.read_text()
        if re.search(r"\bopts\b|getattr\(opts|argparse|Namespace", text):
            found.append(path.name)
    assert not found


def _request(argv: list[str]):
    args = build_parser().parse_args(argv)
    return importlib.import_module(f"vitkit.cli.{args.run.__module__.rsplit('.', 1)[1]}").request(args)


@pytest.mark.parametrize(
    "argv, kind",
    [
        (["eval", "run"], requests.EvalRequest),
        (["fewshot", "run", "--shots", "1,5"], requests.FewshotRequest),
        (["knn", "run", "--k", "3"], requests.KnnRequest),
        (["linear-probe", "run"], requests.LinearProbeRequest),
        (["inspect", "run", "--out", "figures", "--images", "a.png", "b"], requests.InspectRequest),
    ],
)
def test_each_command_makes_one_frozen_request(argv, kind):
    request = _request(argv)
    assert type(request) is kind
    assert request.checkpoint == "run"
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.checkpoint = "other"
    for field in dataclasses.fields(request):
        value = getattr(request, field.name)
        assert not isinstance(value, (list, argparse.Namespace)), field.name


@pytest.mark.parametrize("command", ["fewshot", "knn", "linear-probe", "inspect"])
@pytest.mark.parametrize("given, size", [([], None), (["32"], (32, 32)), (["32", "48"], (32, 48))])
def test_image_size_is_height_and_width(command, given, size):
    out = ["--out", "figures"] if command == "inspect" else []
    flag = ["--image-size", *given] if given else []
    assert _request([command, "run", *out, *flag]).image_size == size


def test_requests_refuse_what_says_nothing():
    with pytest.raises(ConfigError, match="--train-split and --test-split are both val"):
        requests.KnnRequest(checkpoint="run", train_split="val", test_split="val")
    with pytest.raises(ConfigError, match="--seeds: expected at least 1"):
        requests.FewshotRequest(checkpoint="run", seeds=0)
    with pytest.raises(ConfigError, match="--show: expected a positive number, got 0"):
        requests.InspectRequest(checkpoint="run", out="figures", show=0)
    with pytest.raises(ConfigError, match="--split and --data choose the images"):
        requests.InspectRequest(checkpoint="run", out="figures", images=("a.png",), split="test")
