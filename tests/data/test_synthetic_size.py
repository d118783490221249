"""Synthetic data is made at the model's (H, W): a non-square model gets non-square images, not squares of its height."""

from types import SimpleNamespace

import torch

from vitkit.data import DataSpec
from vitkit.evaluate.requests import EvalRequest, FeatureRequest

SYNTHETIC = {"name": "synthetic", "synthetic_size": 16, "synthetic_classes": 2}


def test_a_synthetic_split_is_made_at_height_and_width():
    spec = DataSpec(name="synthetic", synthetic_size=16, synthetic_classes=2)
    split = spec.open("train", channels=3, image_size=(8, 12))
    assert split.images.shape == (16, 3, 8, 12)


def test_one_side_is_a_square_as_before():
    spec = DataSpec(name="synthetic", synthetic_size=16, synthetic_classes=2)
    one = spec.open("val", channels=1, image_size=8)
    pair = spec.open("val", channels=1, image_size=(8, 8))
    assert one.images.shape == (4, 1, 8, 8)
    torch.testing.assert_close(one.images, pair.images, rtol=0, atol=0)
    assert one.labels.tolist() == pair.labels.tolist()


def test_eval_and_frozen_features_open_the_models_height_and_width():
    from vitkit.evaluate.frozen import Frozen
    from vitkit.evaluate.scoring import open_scored_split

    config = SimpleNamespace(in_chans=3, image_size=(8, 12), num_classes=2)
    meta = {"data": SYNTHETIC}
    _, which, split = open_scored_split(EvalRequest(checkpoint="model"), meta, config)
    assert which == "test" and split.images.shape[-2:] == (8, 12)
    spec = DataSpec.from_checkpoint(meta, "model")
    frozen = Frozen(FeatureRequest(checkpoint="model"), SimpleNamespace(config=config), meta, spec, None, {})
    assert frozen.open("train").images.shape[-2:] == (8, 12)


def test_inspect_opens_the_models_height_and_width():
    from vitkit.evaluate.inspect_images import _inspected_split

    config = SimpleNamespace(in_chans=1, image_size=(12, 8), num_classes=2)
    spec = DataSpec.from_checkpoint({"data": SYNTHETIC}, "model")
    name, split = _inspected_split(spec, None, config)
    assert name == "test" and split.images.shape[-2:] == (12, 8)
