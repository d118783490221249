"""Classes of unlike sizes (HAM10000: two in three images one class): top-1 leans to the large classes, so the balanced
top-1 and what always answering the most common class scores stand beside it, in `eval` and at the end of a run."""

import csv
import json

from PIL import Image

from vitkit.evaluate.metrics import balance_lines, class_balance


def test_class_balance_is_the_mean_of_the_classes_top1_where_their_sizes_differ():
    confusion = [[60, 0, 0], [5, 5, 0], [3, 0, 7]]  # rows: the true class
    balance = class_balance(confusion, ["nv", "mel", "bkl"])
    assert balance["balanced_top1"] == (1.0 + 0.5 + 0.7) / 3 and balance["classes"] == 3
    assert (balance["spread"], balance["majority_class"], balance["majority_share"]) == (6.0, "nv", 60 / 80)
    line = (
        "balanced top-1 0.7333 (the mean of the 3 classes' top-1: they differ up to 6x in size); always answering "
        "'nv', the most common, scores 0.7500"
    )
    assert balance_lines(balance, 0.9) == [line]
    assert balance_lines(balance, 0.75) == [
        line,
        "warning    top-1 0.7500 is no better than always answering 'nv' (0.7500): the model has learned little of "
        "the other classes; see the balanced top-1, and train longer or on more of them",
    ]
    assert balance_lines(None, 0.5) == []
    assert class_balance([[9, 1], [2, 6]], ["a", "b"]) is None  # 10 and 8 images: alike enough
    assert class_balance([[9, 1], [0, 0]], ["a", "b"]) is None  # one class scored: nothing to balance


def skewed_list(root, n=36):
    """A list of n images, two in three of class 'nv', the rest 'mel' and 'bkl'."""
    (root / "img").mkdir(parents=True)
    rows = []
    for i in range(n):
        Image.new("RGB", (8, 8), (7 * i % 255, 90 if i % 3 else 10, 40)).save(root / "img" / f"{i}.png")
        rows.append([f"img/{i}.png", "nv" if i % 3 else ("mel", "bkl")[i // 3 % 2]])
    with open(root / "list.csv", "w", newline="") as f:
        csv.writer(f).writerows([["path", "label"], *rows])
    return root / "list.csv"


def test_eval_and_the_end_of_a_run_say_the_balanced_top1_on_skewed_classes(tmp_path, vitkit_cmd, tiny_run):
    listed = skewed_list(tmp_path / "data")
    out = tmp_path / "run"
    args = [*tiny_run, "data.name=auto", "model.in_chans=3", "train.steps=2", "data.val_fraction=0.5"]
    done = vitkit_cmd("train", "--data", listed, "--out", out, *args)
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    balance = summary["final_val_balance"]
    assert balance["majority_class"] == "nv" and balance["majority_share"] == 12 / 18 and balance["spread"] == 4.0
    said = balance_lines(balance, summary["final_val_top1"])
    assert said and "\n".join(said) in done.stdout
    scored = vitkit_cmd("eval", out, "--split", "val", "--json", "--threads", "1")
    assert scored.returncode == 0, scored.stderr
    result = json.loads(scored.stdout.strip().splitlines()[-1])
    per_class = [v for v in result["per_class"].values() if v is not None]
    assert result["balance"]["balanced_top1"] == sum(per_class) / len(per_class)
    words = vitkit_cmd("eval", out, "--split", "val", "--threads", "1")
    assert balance_lines(result["balance"], result["top1"])[0] in words.stdout.splitlines()
