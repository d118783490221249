"""Multi-label classification through the real `vitkit` command: a JSONL list with several labels per image trains
(train.objective=multi_label), `eval` prints mAP and per-class AP, `predict` prints every label over the threshold,
and a round trip through `convert` (Hugging Face, timm) keeps the problem type and the answers."""

import json

import numpy as np
from PIL import Image

COLOURS = ("red", "green", "blue")  # an image's labels: the channels lit in it


def make_data(root, n=48, n_val=12):
    """Images whose labels are their lit colour channels (any number of them), listed in train.jsonl and val.jsonl."""
    rng = np.random.default_rng(0)
    root.mkdir()
    rows = []
    for i in range(n):
        lit = rng.random(3) < 0.5
        pixels = rng.integers(0, 30, (16, 16, 3)) + 200 * lit
        Image.fromarray(pixels.astype(np.uint8)).save(root / f"{i}.png")
        rows.append(json.dumps({"path": f"{i}.png", "labels": [c for c, on in zip(COLOURS, lit) if on]}) + "\n")
    (root / "train.jsonl").write_text("".join(rows[: n - n_val]))
    (root / "val.jsonl").write_text("".join(rows[n - n_val :]))
    return [json.loads(row) for row in rows]


TINY = [
    "model.name=vit_test",
    "model.depth=1",
    "model.image_size=16",
    "train.batch_size=12",
    "train.steps=30",
    "train.warmup_steps=2",
    "train.lr=3e-3",
    "train.log_every=10",
    "train.eval_every=15",
    "train.progress=false",
    "train.threads=1",
    "augment.crop=none",
    "augment.label_smoothing=0.1",
]


def test_a_multi_label_list_trains_evaluates_predicts_and_converts(tmp_path, run_cli, vitkit_cmd):
    rows = make_data(tmp_path / "data")
    data, run = tmp_path / "data", tmp_path / "run"
    shown = vitkit_cmd("data", data, "--samples", "2", "--out", tmp_path / "preview", "model.image_size=16")
    assert shown.returncode == 0 and "3: blue, green, red (several labels per image" in shown.stdout, shown.stderr
    refused = vitkit_cmd(
        "train", "--data", data, "--out", tmp_path / "softmax", *TINY, "train.objective=classification"
    )
    assert refused.returncode == 2 and "train with train.objective=multi_label" in refused.stderr
    trained = run_cli("train", "--data", data, "--out", run, *TINY, "train.objective=multi_label")
    assert trained.returncode == 0, trained.stderr
    assert "step 30: val top-1" in trained.stdout and "mAP" in trained.stdout
    assert json.loads((run / "final" / "config.json").read_text())["problem_type"] == "multi_label_classification"
    summary = json.loads((run / "summary.json").read_text())
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert summary["objective"] == "multi_label" and summary["final_val_map"] == logged[-1]["val_map"] > 0.9

    scored = vitkit_cmd("eval", run, "--split", "val", "--json")
    assert scored.returncode == 0, scored.stderr
    result = json.loads(scored.stdout.splitlines()[-1])
    assert " mAP " in scored.stdout and result["n"] == 12 and set(result["per_class_ap"]) == {"blue", "green", "red"}
    assert result["map"] > 0.9 and result["f1"] > 0.8  # the colours are easy: learned in 30 steps

    knn = vitkit_cmd("knn", run, "--test-split", "val")
    assert knn.returncode == 2 and "score one label per image" in knn.stderr

    two = next(r for r in rows[36:] if len(r["labels"]) == 2)  # a val image with two labels
    image = tmp_path / "data" / two["path"]
    hf, timm = tmp_path / "hf", tmp_path / "m.safetensors"
    for to, source, target in (("hf", run, hf), ("timm", hf, timm)):  # timm from HF: the problem type goes along
        converted = vitkit_cmd("convert", source, target, "--to", to)
        assert converted.returncode == 0, converted.stderr
    answers = {}
    for model in (run, hf, timm):
        predicted = vitkit_cmd("predict", model, image, "--json")
        assert predicted.returncode == 0, predicted.stderr
        answers[model.name] = json.loads(predicted.stdout)["labels"]
    assert sorted(a["label"] for a in answers["run"]) == sorted(two["labels"])  # several labels, each over 0.5
    assert answers["hf"] == answers["m.safetensors"] == answers["run"]
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["problem_type"] == "multi_label_classification"
    assert "multi_label_classification" in vitkit_cmd("info", timm).stdout
