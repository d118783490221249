"""benchmarks/recipes.py's data makers: each kind of dataset has its classes and images, the same for a seed."""

import hashlib
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitkit.data.sources.idx import default_dir, find_idx

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("recipes", ROOT / "benchmarks" / "recipes.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["recipes"] = module
    spec.loader.exec_module(module)
    return module


recipes = _load()
SCALE = 0.05  # a few images per class


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*.png"))}


def _counted(root: Path) -> dict:
    classes = {p.name for split in ("train", "val") for p in (root / split).iterdir()}
    return {
        "classes": len(classes),
        **{split: sum(1 for _ in (root / split).rglob("*.png")) for split in ("train", "val")},
    }


@pytest.mark.parametrize("name", list(recipes.DATASETS))
def test_each_dataset_has_its_classes_and_images_and_is_the_same_for_a_seed(name, tmp_path):
    if recipes.DATASETS[name][0] is recipes.make_fashion and find_idx(default_dir(), "train", "images") is None:
        pytest.skip("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)")
    said = recipes.make(name, tmp_path / "a", seed=3, scale=SCALE)
    _, per_class, _ = recipes.DATASETS[name]
    expected_classes = {"many": 50, "scenes": 6, "shapes": 8}.get(name, 10)
    assert said == _counted(tmp_path / "a")  # what it says it wrote is on disk
    assert said["classes"] == expected_classes
    for split in ("train", "val"):
        assert said[split] == expected_classes * max(int(per_class[split] * SCALE), 1)
    recipes.make(name, tmp_path / "b", seed=3, scale=SCALE)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")  # byte for byte: the maker promises it for a seed
    recipes.make(name, tmp_path / "c", seed=4, scale=SCALE)
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")  # another seed, other images


def test_a_scene_label_says_on_which_side_its_object_stands(tmp_path):
    """A left-right flip changes a scene's class: the sun of sun_left is in the left half, of sun_right the right."""
    recipes.make("scenes", tmp_path, seed=0, scale=SCALE)
    for side, half in (("left", slice(0, 16)), ("right", slice(16, 32))):
        for path in (tmp_path / "train" / f"sun_{side}").glob("*.png"):
            rgb = np.asarray(Image.open(path).convert("RGB")).astype(int)
            yellow = (rgb[..., 0] > 200) & (rgb[..., 1] > 170) & (rgb[..., 2] < 110)
            assert yellow[:, half].sum() > yellow.sum() * 0.9 > 0, path
