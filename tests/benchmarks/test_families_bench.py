"""benchmarks/families.py's bookkeeping: several seeds' runs become one figure, and the fitted row's verdict."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import families


def test_seeds_average_into_one_record_that_keeps_each_seed():
    runs = [{"top1": t, "cpu_s": c, "steps": 100, "val_n": 238} for t, c in ((0.6, 90.0), (0.7, 110.0), (0.8, 100.0))]
    record = families.averaged(runs)
    assert record["top1"] == pytest.approx(0.7) and record["cpu_s"] == pytest.approx(100.0)
    assert record["tops"] == [0.6, 0.7, 0.8] and (record["steps"], record["val_n"]) == (100, 238)


def test_each_seed_trains_in_its_own_directory_with_its_train_seed(tmp_path, monkeypatch):
    seen = []

    def fake(folder, out, recipe, changes):
        seen.append((out.name, changes))
        return {"top1": 0.5 + 0.1 * len(seen), "cpu_s": 1.0, "steps": 3, "val_n": 4}

    monkeypatch.setattr(families, "train_once", fake)
    record = families.train_seeds(tmp_path, tmp_path / "plain", {}, ["train.steps=3"], 2)
    assert seen == [
        ("plain", ["train.steps=3", "train.seed=0"]),
        ("plain-seed1", ["train.steps=3", "train.seed=1"]),
    ]
    assert record["top1"] == pytest.approx(0.65) and len(record["tops"]) == 2


def test_the_fitted_row_says_whether_it_beats_the_best_pixel_baseline():
    said = families.verdict("icons", "hybrid", 0.70, {"forest": 0.72, "logistic": 0.6}, 0.74, "resnet")
    assert said == "icons: fitted (hybrid) does not beat forest; resnet 4.0 points higher"
    assert families.verdict("digits", "hybrid", 0.99, {"forest": 0.96}, 0.99, "hybrid") == (
        "digits: fitted (hybrid) beats forest"
    )


@pytest.mark.parametrize(
    ("side", "n", "family"), [(16, 600, "conv"), (48, 600, "conv"), (32, 2000, "hybrid"), (32, 10**6, "plain")]
)
def test_the_fitted_recipe_is_named_by_its_family_and_each_family_replaces_its_model(side, n, family):
    """The fitted row's family is the one fitted_to_data chose; each family's recipe keeps the rest of the fit."""
    from vitkit.data.scan import ImageScan
    from vitkit.train.fit import fitted_to_data

    fitted, _ = fitted_to_data(ImageScan(64, n, side, side, 3), n)
    assert families.family_of(fitted) == family
    for other in ("plain", "hybrid", "deep", "conv"):
        recipe = families.with_family(fitted, other)
        assert families.family_of(recipe) == other
        assert {k: v for k, v in recipe.items() if not k.startswith("model.")} == {
            k: v for k, v in fitted.items() if not k.startswith("model.")
        }
