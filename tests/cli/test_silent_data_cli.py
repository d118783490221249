"""Data that would be read wrong without a word: class folders whose names are one name after Unicode normalisation."""

import unicodedata

from PIL import Image


def test_two_class_folders_equal_after_normalisation_are_refused_naming_both(tmp_path, vitkit_cmd):
    """café in NFC and in NFD were two classes of one name: the checkpoint trained on them was refused by info, eval,
    predict and convert alike, after the training."""
    root = tmp_path / "ds"
    for form in ("NFC", "NFD", "NFC"):
        name = unicodedata.normalize(form, "café") if form != "NFC" or not (root / "café").exists() else "tea"
        (root / name).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (8, 8), (i * 40, 0, 0)).save(root / name / f"{i}.png")
    result = vitkit_cmd("data", root)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, (result.returncode, result.stderr[-1500:])
    assert unicodedata.normalize("NFC", "café") in lines[0] and unicodedata.normalize("NFD", "café") in lines[0]
    assert "rename" in lines[0]


def test_data_given_to_eval_is_scored_whatever_the_run_trained_on(tmp_path, vitkit_cmd):
    """A run trained on data.name=synthetic, evaluated with --data FOLDER, scored synthetic data ("data": "synthetic",
    exit 0); fewshot, knn and linear-probe read their data the same way (DataSpec.from_checkpoint)."""
    import json

    run = tmp_path / "run"
    tiny = ["model.name=vit_test", "model.depth=1", "model.image_size=8", "data.name=synthetic"]
    tiny += ["data.synthetic_size=32", "data.synthetic_classes=2", "train.batch_size=16", "train.steps=2"]
    tiny += ["train.warmup_steps=1", "train.progress=false", "train.threads=1", "augment.crop=pad", "augment.pad=1"]
    trained = vitkit_cmd("train", "--out", run, *tiny)
    assert trained.returncode == 0, trained.stderr[-2000:]
    folder = tmp_path / "mine"
    for c, name in enumerate(["class_0", "class_1"]):
        (folder / name).mkdir(parents=True)
        for i in range(4):
            Image.new("L", (8, 8), 60 * c + i).save(folder / name / f"{i}.png")
    result = vitkit_cmd("eval", run, "--data", folder, "--split", "all", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["data"] == str(folder) and report["n"] == 8, report
