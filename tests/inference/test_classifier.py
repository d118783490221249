"""vitkit.Classifier: a checkpoint's model, class names and preprocessing in Python, as `vitkit predict` runs them."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from vitkit.checkpoint import save_checkpoint

NAMES = ["ant", "bee", "cat"]
RTOL, ATOL = 1e-4, 1e-6  # float32 results of another batch composition or CPU (CONTRIBUTING.md)


@pytest.fixture
def checkpoint(tmp_path):
    torch.manual_seed(0)
    model = vitkit.create_model("vit_test", num_classes=3)
    with torch.no_grad():
        model.head.weight.normal_()  # a head that tells the images apart
    save_checkpoint(
        model, tmp_path / "ck", "vitkit", metadata={"class_names": NAMES, "preprocess": {"crop_pct": 0.875}}
    )
    return tmp_path / "ck"


@pytest.mark.numerics
def test_a_file_a_pil_image_and_an_array_of_one_picture_get_the_answer_vitkit_predict_prints(
    checkpoint, tmp_path, vitkit_cmd
):
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (37, 53, 3), dtype=np.uint8)).save(tmp_path / "a.png")
    Image.fromarray(rng.integers(0, 255, (20, 20), dtype=np.uint8)).save(tmp_path / "gray.png")
    clf = vitkit.Classifier.load(checkpoint)
    assert clf.class_names == NAMES and clf.crop_pct == 0.875
    with Image.open(tmp_path / "a.png") as image:
        inputs = [tmp_path / "a.png", image, np.asarray(image), str(tmp_path / "gray.png")]
        pixels = [clf.pixels(x) for x in inputs]  # preprocessing is exact: the same picture, the same uint8 pixels
        answers = clf.predict(inputs, top=2)
    assert (
        torch.equal(pixels[0], pixels[1])
        and torch.equal(pixels[0], pixels[2])
        and not torch.equal(pixels[0], pixels[3])
    )
    assert len(answers) == 4 and _same(answers[:1], answers[1:2]) and _same(answers[:1], answers[2:3])
    assert not _same(answers[:1], answers[3:])
    for top in answers:
        assert [name for name, _ in top][0] in NAMES and len(top) == 2 and 1 >= top[0][1] >= top[1][1] > 0
    printed = vitkit_cmd("predict", checkpoint, tmp_path / "a.png", "--top", "2", "--json")
    assert printed.returncode == 0, printed.stderr
    cli = json.loads(printed.stdout)["top"]
    assert _same([[(t["label"], t["prob"]) for t in cli]], answers[:1])
    one = clf.predict(tmp_path / "a.png", top=2)
    assert len(one) == 1 and _same(one, answers[:1])  # one image: a list of one (a batch of one sums in another order)


def _same(a, b) -> bool:
    """The same classes in the same order, probabilities equal to float32 tolerance (see CONTRIBUTING.md, "Comparing
    floats"): another batch size or CPU sums each GEMM in another order, so the last bits differ."""
    return [[n for n, _ in row] for row in a] == [[n for n, _ in row] for row in b] and all(
        p == pytest.approx(q, rel=RTOL, abs=ATOL) for x, y in zip(a, b) for (_, p), (_, q) in zip(x, y)
    )


@pytest.mark.numerics
def test_uint8_tensors_as_torchvision_reads_them_get_the_answer_of_the_same_picture(checkpoint):
    rng = np.random.default_rng(1)
    pictures = [rng.integers(0, 255, (37, 53, 3), dtype=np.uint8), rng.integers(0, 255, (37, 53, 3), dtype=np.uint8)]
    clf = vitkit.Classifier.load(checkpoint)
    want = clf.predict(pictures, top=3)
    chw = [torch.from_numpy(p).permute(2, 0, 1) for p in pictures]  # (C, H, W), torchvision.io.read_image's layout
    assert _same(clf.predict(chw, top=3), want) and _same(clf.predict(chw[1], top=3), want[1:])
    assert _same(clf.predict(torch.stack(chw), top=3), want)  # a (B, C, H, W) batch
    gray = rng.integers(0, 255, (20, 20), dtype=np.uint8)
    assert _same(clf.predict(torch.from_numpy(gray)[None], top=3), clf.predict(gray, top=3))
    with pytest.raises(vitkit.DataError, match=r"image tensor: expected uint8 .* got int64 \(3, 37, 53\)"):
        clf.predict(chw[0].long())
    # floats in [0, 1] (torchvision's ToTensor, a (B, H, W, C) array scaled by 255) are the same pictures
    assert _same(clf.predict(torch.stack(chw).float() / 255, top=3), want)
    assert _same(clf.predict(np.stack(pictures).astype(np.float32) / 255, top=3), want)
    assert _same(clf.predict(np.stack(pictures), top=3), want)
    with pytest.raises(
        vitkit.DataError, match=r"float pixels must be in \[0, 1\], got values from 0 to 25\d; divide them by 255"
    ):
        clf.predict(chw[0].float())
    with pytest.raises(vitkit.DataError, match=r"from -\d.* to .*; pass the image before normalisation"):
        clf.predict((chw[0].float() / 255 - 0.5) / 0.25)


def test_images_it_cannot_read_are_one_clear_error(checkpoint, tmp_path):
    clf = vitkit.Classifier.load(checkpoint)
    with pytest.raises(vitkit.DataError, match="image array: expected uint8"):
        clf.predict(np.zeros((8, 8, 5), np.uint8))
    with pytest.raises(vitkit.DataError, match=r"float pixels must be in \[0, 1\]"):
        clf.predict(np.full((8, 8, 3), np.nan, np.float32))
    with pytest.raises(vitkit.DataError, match="no-such.png"):
        clf.predict(tmp_path / "no-such.png")
    with pytest.raises(vitkit.DataError, match=f"{tmp_path}: is a folder; pass its images"):
        clf.predict([tmp_path])


@pytest.mark.numerics
def test_images_come_from_any_iterable(checkpoint, tmp_path):
    rng = np.random.default_rng(2)
    for i in range(3):
        Image.fromarray(rng.integers(0, 255, (30, 40, 3), dtype=np.uint8)).save(tmp_path / f"{i}.png")
    clf = vitkit.Classifier.load(checkpoint)
    files = sorted(tmp_path.glob("*.png"))
    assert (
        _same(clf.predict(iter(files), top=2), clf.predict(files, top=2))
        and len(clf.predict(tmp_path.glob("*.png"))) == 3
    )
    with pytest.raises(vitkit.DataError, match="2 names for a model of 3 classes"):
        vitkit.Classifier(vitkit.create_model("vit_test", num_classes=3), ["a", "b"])


@pytest.mark.numerics
def test_embed_returns_the_features_of_a_chosen_layer(checkpoint, tmp_path):
    from vitkit.data.augment import eval_transform
    from vitkit.errors import ConfigError

    rng = np.random.default_rng(1)
    images = [rng.integers(0, 255, (24, 30, 3), dtype=np.uint8) for _ in range(3)]
    clf = vitkit.Classifier.load(checkpoint)
    model, c = clf.model, clf.model.config
    x = eval_transform(torch.stack([clf.pixels(i) for i in images]), c.image_size, clf.crop_pct, c.mean, c.std)
    with torch.no_grad():
        tokens = model.forward_features(x)  # (B, 1 + N, D)
        first = model.norm(model.blocks[0](model.embed(x)))  # layer 0, normed
    last = clf.embed(images, batch_size=2)  # default: the class token of the last layer, what the head reads
    assert last.shape == (3, c.width)
    torch.testing.assert_close(last, tokens[:, 0], rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(clf.embed(images, layer=-1, pool="mean"), tokens[:, 1:].mean(1), rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(clf.embed(images, layer=0, pool="mean"), first[:, 1:].mean(1), rtol=RTOL, atol=ATOL)
    for bad, match in ((dict(pool="max"), "pool: expected cls or mean"), (dict(layer=c.depth), "layer: expected")):
        with pytest.raises(ConfigError, match=match):
            clf.embed(images, **bad)
    bit = vitkit.create_model("bit_test", num_classes=3).eval()
    with torch.no_grad():
        bit.head.weight.normal_()  # a trained head (Classifier refuses a zero one)
    save_checkpoint(bit, tmp_path / "bit", "vitkit", metadata={"class_names": NAMES})
    bit_clf = vitkit.Classifier.load(tmp_path / "bit")
    xb = eval_transform(
        torch.stack([bit_clf.pixels(i) for i in images]), (16, 16), 1.0, bit.config.mean, bit.config.std
    )
    with torch.no_grad():
        pooled = bit.forward(xb, pre_logits=True)  # the final map's global average: what the head reads
    torch.testing.assert_close(bit_clf.embed(images), pooled, rtol=RTOL, atol=ATOL)
    with pytest.raises(ConfigError, match="no class token"):
        bit_clf.embed(images, pool="cls")


@pytest.mark.numerics
def test_predict_keep_aspect_reads_each_image_at_its_aspect_ratio_on_a_dynamic_size_model(tmp_path, vitkit_cmd):
    from vitkit.errors import ConfigError

    torch.manual_seed(0)
    model = vitkit.create_model("vit_test", num_classes=3, dynamic_img_size=True)
    with torch.no_grad():
        model.head.weight.normal_()
    save_checkpoint(model, tmp_path / "dyn", "vitkit", metadata={"class_names": NAMES})
    rng = np.random.default_rng(2)
    for name, shape in (("wide.png", (37, 53, 3)), ("tall.png", (64, 16, 3)), ("square.png", (20, 20, 3))):
        Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8)).save(tmp_path / name)
    clf = vitkit.Classifier.load(tmp_path / "dyn", keep_aspect=True)
    pixels = [clf.pixels(tmp_path / n) for n in ("wide.png", "tall.png", "square.png")]
    # about the model's 16x16 pixels at each image's aspect ratio, the sides multiples of the 4-pixel patch
    assert [tuple(p.shape[1:]) for p in pixels] == [(12, 20), (32, 8), (16, 16)]
    answers = clf.top(pixels, k=3)
    with torch.no_grad():
        from vitkit.data.augment import normalize

        wide = model.eval()(normalize(pixels[0][None].float() / 255, model.config.mean, model.config.std)).softmax(-1)
    assert [n for n, _ in answers[0]][0] == NAMES[int(wide.argmax())]
    assert answers[0][0][1] == pytest.approx(float(wide.max()), rel=RTOL, abs=ATOL)
    printed = vitkit_cmd("predict", str(tmp_path / "dyn"), str(tmp_path / "wide.png"), str(tmp_path / "tall.png"),
                      "--keep-aspect", "--json", "--top", "3")  # fmt: skip
    assert printed.returncode == 0, printed.stderr
    cli = [json.loads(line)["top"] for line in printed.stdout.splitlines()]
    assert _same([[(t["label"], t["prob"]) for t in top] for top in cli], answers[:2])
    with pytest.raises(ConfigError, match="model.dynamic_img_size=true"):
        vitkit.Classifier(vitkit.create_model("vit_test", num_classes=3), NAMES, keep_aspect=True)
