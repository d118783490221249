"""The backbones' transformers folders (Dinov2Model, Dinov2WithRegistersModel, CLIPVisionModel, SiglipVisionModel):
vitkit's pooled features against transformers' own pooler_output on random weights, and the round trip."""

import json

import pytest
import torch

import vitkit
from vitkit.checkpoint import detect_format, load_pretrained, save_checkpoint
from vitkit.cli import main

transformers = pytest.importorskip("transformers")

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=4)
CLASSES = {  # name: (model class, config class, config keys beyond SMALL)
    "dinov2": ("Dinov2Model", "Dinov2Config", dict(layerscale_value=0.5)),
    "dinov2_swiglu": ("Dinov2Model", "Dinov2Config", dict(use_swiglu_ffn=True)),
    "dinov2_reg": ("Dinov2WithRegistersModel", "Dinov2WithRegistersConfig", dict(num_register_tokens=2)),
    "clip": ("CLIPVisionModel", "CLIPVisionConfig", dict(intermediate_size=64)),
    "siglip": ("SiglipVisionModel", "SiglipVisionConfig", dict(intermediate_size=64)),
}


def hf_model(name: str, **changes):
    """A transformers model of `name` with random weights large enough to matter (std 0.3 everywhere)."""
    model_class, config_class, extra = CLASSES[name]
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**{**SMALL, **extra, **changes}))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model.eval()


def pooled(model, x, **kwargs):
    with torch.no_grad():
        return model(pixel_values=x, **kwargs).pooler_output


@pytest.mark.parametrize("name", list(CLASSES))
def test_pooled_features_equal_transformers_and_the_round_trip_is_exact(name, tmp_path):
    theirs = hf_model(name)
    theirs.save_pretrained(tmp_path / "hf")
    x = torch.randn(2, 3, 32, 32)
    ours = load_pretrained(tmp_path / "hf")
    assert detect_format(tmp_path / "hf") == "hf" and ours.config.num_classes == 0
    with torch.no_grad():
        features = ours(x, pre_logits=True)
    assert (features - pooled(theirs, x)).abs().max() <= 1e-4
    save_checkpoint(ours, tmp_path / "back", "hf")  # vitkit -> transformers -> vitkit
    back = load_pretrained(tmp_path / "back")
    assert back.config == ours.config
    assert all(torch.equal(back.state_dict()[k], v) for k, v in ours.state_dict().items())
    again = type(theirs).from_pretrained(tmp_path / "back").eval()  # and transformers reads what vitkit wrote
    assert (pooled(again, x) - pooled(theirs, x)).abs().max() <= 1e-6


def test_dinov2_resamples_its_position_embeddings_as_transformers_does(tmp_path):
    """DINOv2 stores E_pos for a larger image (518 px) than it runs at (its processor's 224 crop): vitkit reads it at
    the crop, resampled bicubically as transformers resamples it for that input; read at the stored size, any input
    size is resampled from the stored grid per input, as transformers does."""
    for name in ("dinov2", "dinov2_reg"):  # bicubic; bicubic with antialiasing
        theirs = hf_model(name)
        theirs.save_pretrained(tmp_path / name)
        processor = {"do_center_crop": True, "crop_size": {"height": 16, "width": 16}, "size": {"shortest_edge": 18}}
        (tmp_path / name / "preprocessor_config.json").write_text(json.dumps(processor))
        at_crop, at_stored = load_pretrained(tmp_path / name), load_pretrained(tmp_path / name, image_size=32)
        assert at_crop.config.image_size == (16, 16) and at_stored.config.dynamic_img_size
        for ours, size in ((at_crop, 16), (at_stored, 24), (at_stored, 40)):
            x = torch.randn(2, 3, size, size)
            with torch.no_grad():
                features = ours(x, pre_logits=True)
            assert (features - pooled(theirs, x)).abs().max() <= 1e-4, (name, size)


def test_an_image_text_folder_reads_as_its_vision_tower(tmp_path):
    config = transformers.CLIPConfig(
        vision_config={**SMALL, "intermediate_size": 64},
        text_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64),
        projection_dim=16,
    )
    theirs = transformers.CLIPModel(config).eval()
    theirs.save_pretrained(tmp_path / "clip")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = theirs.vision_model(pixel_values=x).pooler_output
        features = load_pretrained(tmp_path / "clip")(x, pre_logits=True)
    assert (features - expected).abs().max() <= 1e-4


def test_the_cli_converts_and_reads_them(tmp_path, capsys):
    theirs = hf_model("siglip")
    theirs.save_pretrained(tmp_path / "hf")
    assert main(["info", str(tmp_path / "hf")]) == 0
    assert "hf" in capsys.readouterr().out
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "ours")]) == 0
    assert main(["convert", str(tmp_path / "ours"), str(tmp_path / "back"), "--to", "hf"]) == 0
    x = torch.randn(2, 3, 32, 32)
    for folder in ("ours", "back"):
        with torch.no_grad():
            features = vitkit.load_pretrained(tmp_path / folder)(x, pre_logits=True)
        assert (features - pooled(theirs, x)).abs().max() <= 1e-4


@pytest.mark.parametrize(
    "model, to, said",
    [
        (lambda: vitkit.create_model("siglip_test"), "out.npz", "attention pooling"),
        (lambda: vitkit.create_model("dinov2_test"), "hf", "classification head"),
        (lambda: vitkit.create_model("clip_test", num_classes=0, layer_scale=1e-5), "hf", "layer_scale"),
    ],
)
def test_a_format_without_a_piece_refuses_in_one_line(model, to, said, tmp_path, capsys):
    vitkit.save_pretrained(model(), tmp_path / "src")
    dst = tmp_path / ("out" if to == "hf" else to)
    args = ["--to", "hf"] if to == "hf" else []
    assert main(["convert", str(tmp_path / "src"), str(dst), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1 and not dst.exists()
