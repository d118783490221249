"""`vitkit eval` on data that does not fit the checkpoint or holds a broken file: one line, exit code 2."""

import numpy as np
from PIL import Image

import vitkit
from vitkit.cli import main


def _folder(root, classes):
    for c in classes:
        (root / c).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (16, 16), (40 * i, 0, 0)).save(root / c / f"{i}.png")


def _trained(num_classes):
    """A model whose head is not the new all-zero one (which eval refuses as never trained)."""
    model = vitkit.create_model("vit_test", num_classes=num_classes)
    model.head.bias.data[0] = 1.0
    return model


def test_more_classes_than_the_checkpoint(tmp_path, capsys):
    ckpt = vitkit.save_pretrained(_trained(2), tmp_path / "ckpt")
    _folder(tmp_path / "data" / "test", ["a", "b", "c"])
    assert main(["eval", str(ckpt), "--data", str(tmp_path / "data"), "--split", "test"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "labels go up to 2 but" in err and "has 2 classes" in err


def test_a_broken_image_is_named(tmp_path, capsys):
    ckpt = vitkit.save_pretrained(_trained(2), tmp_path / "ckpt")
    _folder(tmp_path / "data" / "test", ["a", "b"])
    broken = tmp_path / "data" / "test" / "b" / "1.png"
    broken.write_bytes(np.arange(40, dtype=np.uint8).tobytes())
    assert main(["eval", str(ckpt), "--data", str(tmp_path / "data"), "--split", "test"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"vitkit eval: error: {broken}: not an image")


def test_reduced_precision_reports_its_cost_against_fp32(tmp_path, capsys):
    import json

    import pytest
    import torch

    from vitkit.inference import precision

    if precision.native_bf16() is None:
        pytest.skip("this CPU has no native bf16")
    model = vitkit.create_model("vit_test", num_classes=2)
    torch.nn.init.normal_(model.head.weight)
    ckpt = vitkit.save_pretrained(model, tmp_path / "ckpt")
    _folder(tmp_path / "data" / "test", ["a", "b"])
    assert (
        main(["eval", str(ckpt), "--data", str(tmp_path / "data"), "--precision", "bf16", "--compare-fp32", "--json"])
        == 0
    )
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["precision"].startswith("bf16 (") and result["n"] == 4
    assert result["top1_delta"] == pytest.approx(result["top1"] - result["reference_top1"])
    assert 0.5 <= result["agreement"] <= 1.0 and "same prediction on" in out


def test_keep_aspect_scores_each_image_at_its_aspect_ratio_on_a_dynamic_size_model(tmp_path, capsys):
    import json

    import torch

    from vitkit.checkpoint import save_checkpoint

    model = vitkit.create_model("vit_test", num_classes=2, dynamic_img_size=True)
    with torch.no_grad():
        model.head.weight.normal_()
    ckpt = save_checkpoint(model, tmp_path / "ckpt", "vitkit", metadata={"class_names": ["a", "b"]})
    rng = np.random.default_rng(0)
    for c, shapes in (("a", [(16, 40), (30, 12)]), ("b", [(16, 40), (20, 20)])):
        (tmp_path / "data" / "test" / c).mkdir(parents=True)
        for i, (h, w) in enumerate(shapes):
            Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(
                tmp_path / "data" / "test" / c / f"{i}.png"
            )
    args = ["eval", str(ckpt), "--data", str(tmp_path / "data"), "--split", "test", "--json", "--keep-aspect"]
    assert main(args + ["--batch-size", "3"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    clf = vitkit.Classifier.load(ckpt, keep_aspect=True)  # the same images, one at a time
    files = sorted((tmp_path / "data" / "test").glob("*/*.png"))
    hits = [clf.top(clf.pixels(f)[None], k=1)[0][0][0] == f.parent.name for f in files]
    assert result["n"] == 4 and result["top1"] == sum(hits) / 4
    fixed = vitkit.save_pretrained(_trained(2), tmp_path / "fixed")
    assert main(["eval", str(fixed), *args[2:]]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.dynamic_img_size=true" in err
