"""The hold-out of val from the training images: each class keeps its share (stratified), the same images for one
seed, and a checkpoint recorded before the rule was named is cut again by the rule that made it (random)."""

import numpy as np
import pytest
import torch
from PIL import Image

from vitkit.data import DataSpec
from vitkit.data.sources import open_split
from vitkit.data.split import Split, first_of, hold_out, seeded_split, stratified_split
from vitkit.errors import DataError


@pytest.mark.parametrize("seed", range(6))
def test_each_class_holds_out_its_share_and_keeps_an_image_in_train(seed):
    """A seeded permutation held out 36 images of one class and 22 of another where their shares were 31.5 and 26.7."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 60, size=int(rng.integers(2, 12)))
    strata = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))
    fraction = float(rng.choice([0.1, 0.2, 0.25, 0.5]))
    train, val = stratified_split(strata, fraction, seed)
    assert np.array_equal(np.sort(np.concatenate([train, val])), np.arange(len(strata)))
    held, kept = np.bincount(strata[val], minlength=len(sizes)), np.bincount(strata[train], minlength=len(sizes))
    # within one image of its share; a class of one image stays whole in train, a larger one keeps one there
    assert np.all(np.abs(held - sizes * fraction) < 1), (sizes, held)
    assert np.all(kept >= 1)
    if sizes.min() >= 2:  # no class short of room: the images the random rule held out, in all
        assert len(val) == round(len(strata) * fraction)
    again = stratified_split(strata, fraction, seed)
    assert np.array_equal(again[1], val) and np.array_equal(again[0], train)


def make_folder(root, sizes: dict) -> None:
    """root/<class>/<i>.png, each image its own pixels."""
    rng = np.random.default_rng(0)
    for name, n in sizes.items():
        (root / name).mkdir(parents=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)).save(root / name / f"{i}.png")


def test_a_checkpoint_recorded_before_the_rule_was_named_is_cut_again_at_random(tmp_path):
    """A record without data.split_rule is of a val held out at random, vitkit's only rule then: evaluating it cuts
    val again at random, the very images it recorded, where the stratified cut is other images (and was refused as a
    cut that "holds images the model trained on")."""
    make_folder(tmp_path / "flat", {"a": 30, "b": 12, "c": 5})
    whole = open_split(tmp_path / "flat", "train", channels=3, val_fraction=0.0)
    rest, held = (whole.subset(index) for index in seeded_split(len(whole), 0.2, 0))
    held.selection, rest.selection = "0.2 held out (seed 0)", "all but the 0.2 held out (seed 0)"
    record = {"path": str(tmp_path / "flat"), "name": "auto", "train_split": "train", "val_split": "val"}
    record.update(val_fraction=0.2, split_seed=0, splits={"train": rest.describe(), "val": held.describe()})
    spec = DataSpec.from_checkpoint({"data": record}, tmp_path / "old")
    for name, recorded in (("val", held), ("train", rest)):
        assert spec.open(name, channels=3, image_size=4).describe() == recorded.describe()
    stratified = DataSpec.from_checkpoint({"data": {**record, "split_rule": "stratified"}}, tmp_path / "new")
    with pytest.raises(DataError, match="this cut is not the one"):
        stratified.open("val", channels=3, image_size=4)


@pytest.mark.parametrize("rule", ["stratified", "random"])
def test_each_image_keeps_its_source_row_through_cuts_and_subsets(rule):
    """A held-out part of images in memory said nothing of which rows of the source they were; its `source_rows`
    are now the rows as stored, through a cut, the first n of the rest and a subset of that, and leave the
    images' digest as it was."""
    n = 50
    source = Split(
        labels=torch.arange(n) % 4,
        class_names=list("abcd"),
        images=torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1),  # each image's pixel is its row
    )
    rest, held = hold_out(source, 0.2, seed=3, rule=rule)
    part = first_of(rest, 20, seed=3)
    picked = part.subset(np.array([7, 2, 19]))
    for split in (rest, held, part, picked):
        assert split.source_rows().tolist() == split.images.flatten().tolist()
    assert set(held.source_rows().tolist()).isdisjoint(part.source_rows().tolist())
    again = Split(labels=held.labels, class_names=list("abcd"), images=held.images)
    assert held.describe() == {**again.describe(), "selection": held.selection}
