"""`card.publishable`: the metadata an export holds, without local paths, and nothing else changed."""

from vitkit.checkpoint.card import publishable


def test_paths_go_and_names_counts_and_digests_stay():
    split = {"source": "/home/me/shapes/val", "selection": "all", "n": 8, "digest": "361892488ad78d91"}
    meta = {
        "class_names": ["/m/01g317", "/m/0199g"],  # OpenImages' names start with a slash: kept as they are
        "data": {"path": "/home/me/shapes", "name": "auto", "val_fraction": 0.1, "splits": {"val": split}},
        "pretrained_on": [{"path": "/data/big", "splits": {"train": {**split, "source": "/data/big/train/part"}}}],
        "source": "/home/me/runs/base/final",
        "picked": {"among": 2, "sweep": "/home/me/sweep/sweep.json", "images": split},
    }
    kept = publishable(meta)
    assert kept["class_names"] == meta["class_names"]
    assert kept["data"] == {
        "name": "auto",
        "val_fraction": 0.1,
        "folder": "shapes",
        "splits": {"val": {**split, "source": "val"}},
    }
    assert kept["pretrained_on"][0]["splits"]["train"]["source"] == "train/part"
    assert kept["source"] == "final" and kept["picked"]["sweep"] == "sweep.json"
    assert kept["picked"]["images"]["source"] == "val" and "/home/me" not in str(kept)
    assert publishable(kept) == kept
