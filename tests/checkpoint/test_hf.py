"""Hugging Face transformers ViT: parity of logits both ways (1e-5, fp32) and bit-exact round trips."""

import json
import warnings

import numpy as np
import pytest
import torch

import vitkit
from vitkit.checkpoint import save_checkpoint

transformers = pytest.importorskip("transformers")


def _hf_config(**overrides):
    kw = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=16,
        patch_size=4,
        num_labels=5,
    )
    return transformers.ViTConfig(**(kw | overrides))


def _randomise(module, seed=0):
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    return module.eval()


def _max_rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize(
    "overrides",
    [dict(), dict(hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6), dict(num_channels=1, image_size=12)],
)
def test_hf_classifier_loads_with_the_same_logits(overrides, tmp_path, make_images):
    hf = _randomise(transformers.ViTForImageClassification(_hf_config(**overrides)))
    hf.save_pretrained(tmp_path)
    model = vitkit.load_pretrained(tmp_path)
    assert model.config.layer_norm_eps == overrides.get("layer_norm_eps", 1e-12)  # HF's default eps is carried over
    x = make_images(model.config)
    with torch.no_grad():
        want, got = hf(pixel_values=x).logits, model(x)
    assert got.shape == want.shape == (2, 5)
    assert _max_rel(got, want) < 1e-5


def test_hf_vitmodel_pooler_is_the_pre_logits_layer(tmp_path, make_images):
    hf = _randomise(transformers.ViTModel(_hf_config()))
    hf.save_pretrained(tmp_path)
    model = vitkit.load_pretrained(tmp_path)
    assert model.config.num_classes == 0 and model.config.representation_size == 32
    x = make_images(model.config)
    with torch.no_grad():
        out = hf(pixel_values=x)
        assert _max_rel(model(x), out.pooler_output) < 1e-5
        assert _max_rel(model.forward_features(x), out.last_hidden_state) < 1e-5


@pytest.mark.parametrize(
    "overrides",
    [
        dict(),
        dict(mlp_act="gelu_tanh", layer_norm_eps=1e-12),
        dict(num_classes=0, representation_size=24),
        dict(image_size=(16, 24)),
    ],
)
def test_vitkit_model_written_as_hf_runs_in_transformers(overrides, make_model, make_images, tmp_path):
    model = make_model(**overrides)
    save_checkpoint(model, tmp_path, "hf")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if model.config.num_classes:
            hf = transformers.ViTForImageClassification.from_pretrained(tmp_path).eval()
        else:
            hf = transformers.ViTModel.from_pretrained(tmp_path).eval()
    x = make_images(model.config)
    with torch.no_grad():
        out = hf(pixel_values=x)
        want = out.logits if model.config.num_classes else out.pooler_output
        assert _max_rel(model(x), want) < 1e-5


@pytest.mark.parametrize(
    "overrides",
    [
        dict(dropout=0.1, attn_dropout=0.05),
        dict(num_classes=0),
        dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), image_size=(16, 24)),
    ],
)
def test_hf_round_trip_is_bit_exact(overrides, make_model, tmp_path):
    model = make_model(**overrides)
    save_checkpoint(model, tmp_path / "hf", "hf")
    back = vitkit.load_pretrained(tmp_path / "hf", image_size=model.config.image_size)
    assert back.config == model.config
    for key, value in model.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key
    assert json.loads((tmp_path / "hf" / "preprocessor_config.json").read_text())["image_mean"] == list(
        model.config.mean
    )


def test_hf_pytorch_model_bin_is_read_with_weights_only(tmp_path, make_images):
    hf = _randomise(transformers.ViTForImageClassification(_hf_config()))
    hf.save_pretrained(tmp_path)
    from safetensors.torch import load_file

    torch.save(load_file(tmp_path / "model.safetensors"), tmp_path / "pytorch_model.bin")
    (tmp_path / "model.safetensors").unlink()
    model = vitkit.load_pretrained(tmp_path)
    x = make_images(model.config)
    with torch.no_grad():
        assert _max_rel(model(x), hf(pixel_values=x).logits) < 1e-5


def test_hf_cannot_hold_gap_hybrid_or_prelogits_under_a_head(make_model, tmp_path):
    """Each refusal names the formats that do hold the model: a GAP model goes to npz and timm as well as vitkit."""
    for overrides, what in [
        (dict(classifier="gap"), "classifier 'gap' .*; save as vitkit, npz or timm .*model.classifier=token"),
        (dict(representation_size=16), "pre-logits .*; save as vitkit, npz or timm"),
    ]:
        with pytest.raises(vitkit.CheckpointError, match=what):
            save_checkpoint(make_model(**overrides), tmp_path / "x", "hf")
    assert not (tmp_path / "x").exists()
    for fmt, name in (("npz", "gap.npz"), ("timm", "gap.safetensors")):
        assert save_checkpoint(make_model(classifier="gap"), tmp_path / name, fmt).exists()


def test_hf_sharded_checkpoint_is_read_through_its_index(tmp_path, make_images):
    hf = _randomise(transformers.ViTForImageClassification(_hf_config()))
    hf.save_pretrained(tmp_path)
    from safetensors.torch import load_file, save_file

    state = load_file(tmp_path / "model.safetensors")
    (tmp_path / "model.safetensors").unlink()
    keys = sorted(state)
    shards = {
        "model-00001-of-00002.safetensors": keys[: len(keys) // 2],
        "model-00002-of-00002.safetensors": keys[len(keys) // 2 :],
    }
    for name, part in shards.items():
        save_file({k: state[k] for k in part}, tmp_path / name)
    weight_map = {k: name for name, part in shards.items() for k in part}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    model = vitkit.load_pretrained(tmp_path)
    x = make_images(model.config)
    with torch.no_grad():
        assert _max_rel(model(x), hf(pixel_values=x).logits) < 1e-5


@pytest.mark.parametrize(
    "in_chans, crop_pct", [(1, 0.875), (3, 0.875), (3, 0.9)]
)  # 0.9: 16 / 0.9 rounds up, floors down
def test_written_hf_directory_works_in_transformers_pipeline_with_its_class_names(
    in_chans, crop_pct, make_model, tmp_path
):
    """pipeline("image-classification") feeds RGB; a grayscale model reads luma through its folded patch embedding."""
    import numpy as np
    from PIL import Image

    from vitkit.data.images import load_image
    from vitkit.inference.predict import predict

    names = ["ankle boot", "bag", "coat", "dress", "shirt"]
    model = make_model(in_chans=in_chans, num_classes=5)
    save_checkpoint(model, tmp_path / "hf", "hf", metadata={"class_names": names, "preprocess": {"crop_pct": crop_pct}})
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf_config["id2label"]["1"] == "bag" and hf_config["label2id"]["coat"] == 2
    image = tmp_path / "x.png"
    # colour, and not square: vitkit resizes the shorter side and cuts the centre; HF's ViTImageProcessor stretched it
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (33, 20, 3), dtype=np.uint8)).save(image)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        classify = transformers.pipeline("image-classification", model=str(tmp_path / "hf"), device="cpu")
        got = classify(Image.open(image), top_k=5)
        seen = transformers.AutoImageProcessor.from_pretrained(str(tmp_path / "hf"))(
            Image.open(image).convert("RGB"), return_tensors="pt"
        )
    pixels = torch.from_numpy(load_image(image, in_chans, 16, crop_pct=crop_pct).copy())[None]
    ours = (pixels.float() / 255 - torch.tensor(model.config.mean).view(1, -1, 1, 1)) / torch.tensor(
        model.config.std
    ).view(1, -1, 1, 1)
    if in_chans == 3:  # the same pixels in HF's pipeline as in vitkit's
        torch.testing.assert_close(seen["pixel_values"], ours, atol=1e-5, rtol=0)
    probs, index = predict(model, pixels, k=5)
    assert [g["label"] for g in got] == [names[i] for i in index[0].tolist()]
    tol = 2e-3 if in_chans == 3 else 1e-2  # grayscale: vitkit rounds PIL's luma to integers, the fold does not
    assert np.allclose([g["score"] for g in got], probs[0].tolist(), atol=tol)
    back, meta = vitkit.checkpoint.load_with_metadata(tmp_path / "hf")
    assert back.config.in_chans == in_chans and meta["class_names"] == names
    x = torch.rand(2, in_chans, 16, 16) * 2 - 1
    with torch.no_grad():
        torch.testing.assert_close(back(x), model(x), atol=1e-5, rtol=1e-5)


def _icons(folder):
    """Transparent images as icons are: RGBA whose transparent pixels keep random colours, a half-transparent band, an
    LA image and a palette image with a transparent entry; not square."""
    from PIL import Image

    rng = np.random.default_rng(3)
    folder.mkdir()
    for i in range(3):
        rgba = rng.integers(0, 256, (20, 23, 4), dtype=np.uint8)
        rgba[..., 3] = 0
        rgba[4 + i : 15, 5:16, 3] = 255
        rgba[1:3, :, 3] = 100
        Image.fromarray(rgba, "RGBA").save(folder / f"rgba{i}.png")
    la = rng.integers(0, 256, (18, 21, 2), dtype=np.uint8)
    la[..., 1] = np.where(np.arange(21) < 9, 0, 255)[None]
    Image.fromarray(la, "LA").save(folder / "la.png")
    palette = Image.fromarray(rng.integers(0, 4, (19, 17), dtype=np.uint8), "P")
    palette.putpalette(rng.integers(0, 256, 12).tolist() + [0] * 756)
    palette.save(folder / "palette.png", transparency=2)
    return sorted(folder.iterdir())


@pytest.mark.numerics
@pytest.mark.parametrize("background", [(1.0, 1.0, 1.0), (0.2, 0.5, 0.9)])
def test_the_hf_pipeline_fed_as_convert_says_agrees_with_predict_on_transparent_images(
    background, make_model, tmp_path, vitkit_cmd
):
    """transformers' pipeline converts a path or PIL image to RGB and drops its alpha (a transparent pixel shows the
    colour it stores), and no image processor composites on another background than white: the pipeline disagreed
    with `vitkit predict` on transparent icons, and convert said nothing. Convert now says so in one line and writes the Python that feeds
    the pipeline as vitkit reads images; fed so, the pipeline agrees with predict (same top-1, probabilities to 2e-3)."""
    from PIL import Image, ImageOps

    names = ["ankle boot", "bag", "coat", "dress", "shirt"]
    model = make_model(num_classes=5, background=background)
    save_checkpoint(model, tmp_path / "ckpt", "vitkit", metadata={"class_names": names})
    done = vitkit_cmd("convert", tmp_path / "ckpt", tmp_path / "hf", "--to", "hf")
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stdout.splitlines() if line.startswith("note: ")]
    rgb = tuple(round(255 * v) for v in background)
    assert len(notes) == 1 and "pipeline drops transparency" in notes[0] and f"RGB {rgb}" in notes[0]
    processor = json.loads((tmp_path / "hf" / "preprocessor_config.json").read_text())
    assert "vitkit_transparency_python" in notes[0] and processor["vitkit_transparency"] in notes[0].replace(
        f" in {tmp_path / 'hf' / 'preprocessor_config.json'}", ""
    )
    images = _icons(tmp_path / "icons")
    done = vitkit_cmd("predict", tmp_path / "ckpt", *images, "--top", "5", "--json")
    assert done.returncode == 0, done.stderr
    ours = [json.loads(line)["top"] for line in done.stdout.splitlines()]
    clf = vitkit.Classifier.load(tmp_path / "ckpt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        classify = transformers.pipeline("image-classification", model=str(tmp_path / "hf"), device="cpu")
        for path, top in zip(images, ours):
            fed = []
            # the user's code, as convert wrote it: `image` a PIL image, `pipe` the pipeline
            code = processor["vitkit_transparency_python"]
            exec(code, {"Image": Image, "ImageOps": ImageOps, "image": Image.open(path), "pipe": fed.append})
            got = classify(fed[0], top_k=5)
            assert [g["label"] for g in got] == [t["label"] for t in top], path.name
            assert np.allclose([g["score"] for g in got], [t["prob"] for t in top], atol=2e-3), path.name
            # the Python API reads an image given as a PIL image or an array as predict reads the file
            for given in (Image.open(path), np.asarray(Image.open(path).convert("RGBA"))):
                again = clf.predict([given], top=5)[0]
                assert [n for n, _ in again] == [t["label"] for t in top], path.name
                assert np.allclose([p for _, p in again], [t["prob"] for t in top], rtol=1e-4, atol=1e-6)
            # given the file, the pipeline sees an RGBA or LA image's stored colours where vitkit sees the background
            # (a palette's transparent colour it puts on white)
            plain = {g["label"]: g["score"] for g in classify(str(path), top_k=5)}
            assert path.name.startswith("palette") or max(abs(plain[t["label"]] - t["prob"]) for t in top) > 2e-3


@pytest.mark.parametrize(
    "processor, crop_pct",
    [
        (
            {
                "image_processor_type": "DeiTImageProcessor",
                "do_resize": True,
                "size": {"height": 18, "width": 18},
                "do_center_crop": True,
                "crop_size": {"height": 16, "width": 16},
            },
            16 / 18,
        ),
        (
            {
                "image_processor_type": "CLIPImageProcessor",
                "do_resize": True,
                "size": {"shortest_edge": 19},
                "do_center_crop": True,
                "crop_size": {"height": 16, "width": 16},
            },
            16 / 19,
        ),
        ({"image_processor_type": "ConvNextImageProcessor", "size": {"shortest_edge": 16}, "crop_pct": 0.875}, 0.875),
        ({"image_processor_type": "ViTImageProcessor", "do_resize": True, "size": {"height": 16, "width": 16}}, 1.0),
    ],
)
def test_the_crop_of_an_hf_checkpoint_s_image_processor_is_read_and_kept(processor, crop_pct, make_model, tmp_path):
    """An HF checkpoint without vitkit's record: its processor's resize-then-crop was ignored (crop_pct 1.0), so
    predict disagreed with the HF pipeline, and HF -> vitkit -> HF lost the crop."""
    import math

    from vitkit.checkpoint.hf import crop_pct_of

    save_checkpoint(make_model(num_classes=3), tmp_path / "hf", "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    config.pop("vitkit", None)  # as transformers' own save_pretrained writes it
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    (tmp_path / "hf" / "preprocessor_config.json").write_text(json.dumps(processor))
    _, meta = vitkit.checkpoint.load_with_metadata(tmp_path / "hf")
    got = meta.get("preprocess", {}).get("crop_pct")
    assert got == pytest.approx(crop_pct)  # 1.0 where the processor cuts nothing
    if crop_pct and "crop_size" in processor:  # vitkit resizes to exactly the processor's size
        resized = processor["size"].get("shortest_edge", processor["size"].get("height"))
        assert math.floor(16 / crop_pct_of(processor)) == resized
    save_checkpoint(vitkit.checkpoint.load_pretrained(tmp_path / "hf"), tmp_path / "back", "hf", metadata=meta)
    _, again = vitkit.checkpoint.load_with_metadata(tmp_path / "back")
    assert again.get("preprocess", {}).get("crop_pct", 1.0) == (got or 1.0)  # HF -> vitkit -> HF keeps it


def test_a_pre_logits_model_refused_by_hf_is_pointed_to_every_format_that_holds_it(tmp_path):
    """The refusal said "save as vitkit instead"; .npz and timm hold a pre-logits layer too (checked here)."""
    from vitkit.errors import CheckpointError

    model = vitkit.create_model("vit_test", num_classes=3, representation_size=16).eval()
    with pytest.raises(
        CheckpointError, match=r"pre-logits layer under a head .*; save as vitkit, npz or timm \(.safetensors\) instead"
    ):
        save_checkpoint(model, tmp_path / "hf", "hf")
    x = torch.rand(2, 3, 16, 16)
    for name, fmt in (("m.npz", "npz"), ("m.safetensors", "timm")):
        save_checkpoint(model, tmp_path / name, fmt)
        back = vitkit.checkpoint.load_pretrained(tmp_path / name).eval()
        with torch.no_grad():
            torch.testing.assert_close(back(x), model(x))


def test_transformers_problem_type_is_written_for_a_multi_label_model_and_read_without_vitkit_s_record(
    make_model, tmp_path
):
    multi = {"problem_type": "multi_label_classification", "class_names": ["a", "b", "c"]}
    save_checkpoint(make_model(num_classes=3), tmp_path / "hf", "hf", metadata=multi)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification"  # transformers trains it with BCEWithLogitsLoss
    config.pop("vitkit")  # as transformers' own save_pretrained writes it
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    assert vitkit.checkpoint.read_metadata(tmp_path / "hf")["problem_type"] == "multi_label_classification"
    save_checkpoint(make_model(num_classes=3), tmp_path / "single", "hf")  # a softmax head: no problem_type written
    assert "problem_type" not in json.loads((tmp_path / "single" / "config.json").read_text())
