"""Loading a checkpoint reads its config.json once: the path is resolved once and what it holds is passed down."""

import sys

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from vitkit.cli import main

_watched: list = []  # [path, count] while a test counts; an audit hook cannot be removed, so it idles when empty


def _count_opens(event, args):
    if event == "open" and _watched and str(args[0]) == _watched[0]:
        _watched[1] += 1


sys.addaudithook(_count_opens)


@pytest.fixture
def config_reads():
    """A function returning how often the watched config.json has been opened since `watch(path)`."""

    def watch(path):
        _watched[:] = [str(path), 0]

    yield watch, lambda: _watched[1]
    _watched.clear()


def _checkpoint(tmp_path, run: bool):
    model = vitkit.create_model("vit_test", num_classes=3)
    torch.nn.init.normal_(model.head.weight)  # a trained head: a new one is refused
    folder = tmp_path / "run" / "final" if run else tmp_path / "ckpt"
    vitkit.save_pretrained(model, folder, extra={"class_names": ["ant", "bee", "cat"]})
    image = tmp_path / "a.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(image)
    return (tmp_path / "run" if run else folder), folder / "config.json", image


@pytest.mark.parametrize("run", [False, True], ids=["vitkit directory", "run directory"])
def test_classifier_load_reads_config_json_once(tmp_path, config_reads, run):
    given, config, _ = _checkpoint(tmp_path, run)
    watch, reads = config_reads
    watch(config)
    vitkit.Classifier.load(given)
    assert reads() == 1


@pytest.mark.parametrize("run", [False, True], ids=["vitkit directory", "run directory"])
def test_predict_reads_config_json_once(tmp_path, config_reads, capsys, run):
    given, config, image = _checkpoint(tmp_path, run)
    watch, reads = config_reads
    watch(config)
    assert main(["predict", str(given), str(image)]) == 0
    assert "ant" in capsys.readouterr().out
    assert reads() == 1
