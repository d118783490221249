"""transformers' image classification classes of the backbones people start from, with random weights, through
`vitkit predict`: Dinov2ForImageClassification (a head on [class token; mean of the patch tokens]),
Dinov2WithRegistersForImageClassification (registers left out of the mean), CLIPForImageClassification (the mean of the
patch tokens before post_layernorm) and SiglipForImageClassification (the mean of all tokens; the MAP head unused).
The CLI's probabilities are compared with transformers' softmax(logits) on its own image processor's pixels."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from vitkit import create_model
from vitkit.checkpoint import load_pretrained, read_metadata, save_checkpoint
from vitkit.errors import CheckpointError

transformers = pytest.importorskip("transformers")

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=16, patch_size=4)
TEXT = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
LABELS = {0: "cat", 1: "dog", 2: "fox"}
CROP = dict(height=16, width=16)
FAMILIES = ("dinov2", "dinov2_reg", "clip", "siglip")


def _classifier(family: str):
    """(the transformers model with random weights, its image processor) at 16 px."""
    torch.manual_seed(0)
    T = transformers
    vision = {**TINY, "intermediate_size": 64}
    dinov2_processor = dict(size={"shortest_edge": 16}, crop_size=CROP)
    model, processor = {
        "dinov2": lambda: (
            T.Dinov2ForImageClassification(T.Dinov2Config(**TINY, id2label=LABELS)),
            T.BitImageProcessor(**dinov2_processor, image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]),
        ),
        "dinov2_reg": lambda: (
            T.Dinov2WithRegistersForImageClassification(
                T.Dinov2WithRegistersConfig(**TINY, num_register_tokens=2, id2label=LABELS)
            ),
            T.BitImageProcessor(**dinov2_processor, image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]),
        ),
        "clip": lambda: (
            T.CLIPForImageClassification(T.CLIPConfig(vision_config=vision, text_config=TEXT, id2label=LABELS)),
            T.CLIPImageProcessor(size={"shortest_edge": 16}, crop_size=CROP),
        ),
        "siglip": lambda: (
            T.SiglipForImageClassification(T.SiglipConfig(vision_config=vision, text_config=TEXT, id2label=LABELS)),
            T.SiglipImageProcessor(size=CROP),
        ),
    }[family]()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model.eval(), processor


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Per family: (folder saved by transformers, its model, its processor); and a few small PNGs."""
    root = tmp_path_factory.mktemp("classifiers")
    rng = np.random.default_rng(0)
    images = []
    for i, size in enumerate(((16, 16), (16, 16), (24, 20))):  # the last one resized and cropped by both
        images.append(root / f"{i}.png")
        Image.fromarray(rng.integers(0, 256, (*size, 3)).astype(np.uint8)).save(images[-1])
    folders = {}
    for family in FAMILIES:
        model, processor = _classifier(family)
        model.save_pretrained(root / family)
        processor.save_pretrained(root / family)
        folders[family] = (root / family, model, processor)
    return folders, images


def _theirs(model, processor, images) -> list[dict[str, float]]:
    pixels = processor(images=[Image.open(p).convert("RGB") for p in images], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        probs = model(pixel_values=pixels).logits.softmax(-1)
    return [{LABELS[k]: float(row[k]) for k in LABELS} for row in probs]


@pytest.mark.parametrize("family", FAMILIES)
def test_predict_gives_transformers_probabilities(family, made, vitkit_cmd):
    folders, images = made
    folder, model, processor = folders[family]
    done = vitkit_cmd("predict", folder, *images, "--top", "3", "--json", "--threads", "1")
    assert done.returncode == 0, done.stderr
    ours = [
        {t["label"]: t["prob"] for t in json.loads(line)["top"]} for line in done.stdout.splitlines()[: len(images)]
    ]
    theirs = _theirs(model, processor, images)
    assert [set(o) for o in ours] == [set(LABELS.values())] * len(images)  # the class names of id2label
    diff = max(abs(o[k] - t[k]) for o, t in zip(ours, theirs) for k in t)
    assert diff <= 1e-4
    assert max(max(t.values()) - min(t.values()) for t in theirs) > 1e-3  # not a uniform answer that any head gives


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_equal_transformers_on_the_same_pixels(family, made):
    folders, _ = made
    folder, model, _ = folders[family]
    ours = load_pretrained(folder).eval()
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs = model(pixel_values=x).logits
        assert (ours(x) - theirs).abs().max() <= 1e-4 and theirs.std() > 1e-2


@pytest.mark.parametrize("family", ("dinov2", "dinov2_reg", "clip"))
def test_vitkit_to_the_class_and_back_is_exact(family, made, tmp_path):
    folders, _ = made
    folder, model, _ = folders[family]
    ours = load_pretrained(folder).eval()
    save_checkpoint(ours, tmp_path / "hf", "hf", metadata=read_metadata(folder))  # the class names with it
    back = load_pretrained(tmp_path / "hf")
    assert back.config == ours.config
    mine, again = ours.state_dict(), back.state_dict()
    assert mine.keys() == again.keys() and all(torch.equal(mine[k], again[k]) for k in mine)
    reread = type(model).from_pretrained(tmp_path / "hf").eval()  # transformers reads what vitkit wrote
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (reread(pixel_values=x).logits - model(pixel_values=x).logits).abs().max() <= 1e-5
    assert reread.config.id2label == LABELS


def test_siglip_s_classifier_is_refused_in_one_line(made, tmp_path):
    folders, _ = made
    ours = load_pretrained(folders["siglip"][0])
    with pytest.raises(CheckpointError, match="SiglipForImageClassification is not written") as caught:
        save_checkpoint(ours, tmp_path / "hf", "hf")
    assert "\n" not in str(caught.value)


def test_a_format_without_the_head_refuses_in_one_line(made, tmp_path):
    folders, _ = made
    for family, said in (("dinov2", "head_pool"), ("clip", "head_pool")):
        with pytest.raises(CheckpointError, match=f"timm ViT checkpoint cannot hold .*{said}") as caught:
            save_checkpoint(load_pretrained(folders[family][0]), tmp_path / f"{family}.safetensors", "timm")
        assert "\n" not in str(caught.value)
    with pytest.raises(CheckpointError, match=r"cannot hold .*\(final_norm=false\)"):
        save_checkpoint(create_model("vit_test", final_norm=False), tmp_path / "m.npz", "npz")
