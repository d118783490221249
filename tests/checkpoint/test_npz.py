"""Google .npz checkpoints: parity with a NumPy forward of the official Flax model in every layout, round trips."""

import json

import numpy as np
import pytest
import torch
from npz_reference import LINEN, PRE_LINEN, forward, official_arrays

import vitkit
from vitkit.checkpoint import npz, save_checkpoint


def _logits(model, x_nhwc):
    with torch.no_grad():
        return model(torch.from_numpy(x_nhwc).permute(0, 3, 1, 2)).double().numpy()


def _rel_err(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


LAYOUTS = {
    # name: (official_arrays kwargs, image size (h, w), load_pretrained image_size)
    "release token": (dict(), (16, 16), None),
    "release token pre_logits": (dict(representation=24), (16, 16), None),
    "release gap": (dict(classifier="gap"), (16, 16), None),
    "linen gap pre_logits opt/target": (
        dict(classifier="gap", representation=24, names=LINEN, prefix="opt/target/"),
        (16, 16),
        None,
    ),
    "big_vision token params/": (dict(names=LINEN, prefix="params/", big_vision_posemb=True), (16, 16), None),
    "big_vision gap params/": (
        dict(names=LINEN, prefix="params/", big_vision_posemb=True, classifier="gap"),
        (16, 16),
        None,
    ),
    "non-square grid 2x3": (dict(grid=(2, 3)), (8, 12), (8, 12)),
    "grayscale no head": (dict(in_chans=1, classes=0, representation=16), (16, 16), None),
    "hybrid R(2,1) GN (1,1,1,C)": (dict(resnet=((2, 1), 32), patch=1, groupnorm_4d=True), (32, 32), None),
    "hybrid R(1,1,1) linen non-square": (
        dict(resnet=((1, 1, 1), 32), patch=1, grid=(2, 3), names=LINEN),
        (32, 48),
        (32, 48),
    ),
    "hybrid stem only": (dict(resnet=((), 32), patch=2), (32, 32), None),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_npz_logits_match_the_official_flax_forward(layout, tmp_path):
    kwargs, (h, w), image_size = LAYOUTS[layout]
    arrays = official_arrays(seed=3, **kwargs)
    path = tmp_path / "ViT.npz"
    np.savez(path, **arrays)
    model = vitkit.load_pretrained(path, image_size=image_size)
    x = np.random.default_rng(0).uniform(-1, 1, (2, h, w, kwargs.get("in_chans", 3))).astype(np.float32)
    want = forward(arrays, x, num_heads=2, prefix=kwargs.get("prefix", ""), names=kwargs.get("names", PRE_LINEN))
    got = _logits(model, x)
    assert got.shape == want.shape
    assert _rel_err(got, want) < 1e-4


def test_npz_config_is_inferred_from_the_arrays(tmp_path):
    arrays = official_arrays(width=48, depth=3, heads=3, mlp=80, patch=2, grid=(5, 5), representation=20, classes=7)
    np.savez(tmp_path / "a.npz", **arrays)
    config, _, format = vitkit.checkpoint.read_checkpoint(tmp_path / "a.npz")
    assert format == "npz"
    assert (config.width, config.depth, config.num_heads, config.mlp_dim) == (48, 3, 3, 80)
    assert (config.patch_size, config.image_size, config.num_classes) == ((2, 2), (10, 10), 7)
    assert (config.classifier, config.representation_size, config.backbone) == ("token", 20, None)
    assert (config.mlp_act, config.layer_norm_eps) == ("gelu_tanh", 1e-6)


def test_npz_hybrid_config_has_the_resnet_stages(tmp_path):
    np.savez(
        tmp_path / "r.npz",
        **official_arrays(resnet=((2, 1, 3), 32), patch=1, grid=(2, 2), groupnorm_4d=True, classifier="gap"),
    )
    config, state, _ = vitkit.checkpoint.read_checkpoint(tmp_path / "r.npz")
    assert config.backbone.layers == (2, 1, 3) and config.backbone.width == 32
    assert config.image_size == (32, 32)  # 2x2 patches of 1 cell on a stride-16 map
    assert config.classifier == "gap"
    assert state["backbone.stages.0.0.norm1.weight"].shape == (32,)


def test_npz_big_vision_scanned_blocks_load(tmp_path):
    """big_vision with scan=True stacks the blocks on a leading depth axis under Transformer/encoderblock/."""
    arrays = official_arrays(names=LINEN, prefix="params/", big_vision_posemb=True, depth=3)
    scanned = {k: v for k, v in arrays.items() if "encoderblock_" not in k}
    for suffix in {k.split("/", 3)[3] for k in arrays if "encoderblock_" in k}:
        scanned[f"params/Transformer/encoderblock/{suffix}"] = np.stack(
            [arrays[f"params/Transformer/encoderblock_{i}/{suffix}"] for i in range(3)]
        )
    np.savez(tmp_path / "unrolled.npz", **arrays)
    np.savez(tmp_path / "scanned.npz", **scanned)
    a, b = vitkit.load_pretrained(tmp_path / "unrolled.npz"), vitkit.load_pretrained(tmp_path / "scanned.npz")
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)


@pytest.mark.parametrize(
    "overrides",
    [dict(), dict(classifier="gap", representation_size=24), dict(num_classes=0), dict(image_size=(16, 24))],
)
def test_npz_round_trip_is_bit_exact(overrides, make_model, tmp_path):
    model = make_model(mlp_act="gelu_tanh", **overrides)
    save_checkpoint(model, tmp_path / "m.npz", "npz")
    back = vitkit.load_pretrained(tmp_path / "m.npz", image_size=model.config.image_size)
    assert back.config == model.config
    for key, value in model.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key


def test_npz_writes_the_release_layout(make_model, tmp_path):
    model = make_model(mlp_act="gelu_tanh", representation_size=16)
    save_checkpoint(model, tmp_path / "m.npz", "npz")
    written = np.load(tmp_path / "m.npz")
    expected = official_arrays(
        representation=16, classes=10
    )  # vit_test: 16 px, patch 4, width 32, 2 layers, 10 classes
    assert sorted(written.files) == sorted(expected)
    for key in expected:
        assert written[key].shape == expected[key].shape and written[key].dtype == np.float32, key
    x = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype(np.float32)
    want = forward(dict(written), x, num_heads=2, names=PRE_LINEN)
    assert _rel_err(_logits(model, x), want) < 1e-4


def test_npz_writing_warns_about_exact_gelu(make_model, tmp_path):
    with pytest.warns(UserWarning, match="tanh-GELU"):
        save_checkpoint(make_model(), tmp_path / "exact.npz", "npz")


@pytest.mark.parametrize("layers", [(1,), (2, 1), ()])
def test_a_hybrid_is_written_in_the_release_layout_and_read_back_exactly(layers, make_model, tmp_path):
    """R50+ViT-B_16.npz's layout: conv_root, gn_root, blockS/unitU/{conv,gn}{1,2,3,_proj}; the official forward agrees."""
    stride = 4 * 2 ** max(len(layers) - 1, 0)
    hybrid = make_model(
        backbone={"layers": layers, "width": 32},
        patch_size=1,
        image_size=4 * stride,
        mlp_act="gelu_tanh",
        num_classes=5,
    )
    save_checkpoint(hybrid, tmp_path / "h.npz", "npz")
    written = np.load(tmp_path / "h.npz")
    expected = official_arrays(resnet=(layers, 32), patch=1, grid=(4, 4))
    assert sorted(written.files) == sorted(expected)
    for key in expected:
        assert written[key].shape == expected[key].shape and written[key].dtype == np.float32, key
    x = np.random.default_rng(0).uniform(-1, 1, (2, 4 * stride, 4 * stride, 3)).astype(np.float32)
    assert _rel_err(_logits(hybrid, x), forward(dict(written), x, num_heads=2, names=PRE_LINEN)) < 1e-4
    back = vitkit.load_pretrained(tmp_path / "h.npz")
    assert back.config == hybrid.config
    for key, value in hybrid.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key


def test_npz_round_trip_keeps_what_the_arrays_cannot_say_in_the_sidecar(make_model, tmp_path):
    """The release layout implies tanh-GELU, eps 1e-6 and [-1, 1] inputs; a model with others comes back as written."""
    model = make_model(mlp_act="gelu", layer_norm_eps=1e-5, mean=(0.4, 0.5, 0.6))
    with pytest.warns(UserWarning, match="vitkit reads them back"):
        save_checkpoint(model, tmp_path / "m.npz", "npz")
    stored = json.loads((tmp_path / "m.npz.json").read_text())["model"]
    assert stored == {"mlp_act": "gelu", "layer_norm_eps": 1e-5, "mean": [0.4, 0.5, 0.6]}  # std is the arrays' own
    back = vitkit.load_pretrained(tmp_path / "m.npz")
    assert back.config == model.config
    x = torch.randn(2, 3, *model.config.image_size)
    assert torch.equal(back.eval()(x), model.eval()(x))
    (tmp_path / "m.npz.json").write_text(json.dumps({"model": {"mlp_act": "relu"}}))
    with pytest.raises(vitkit.CheckpointError, match=r"m\.npz\.json: its 'model' entry is not valid: .*mlp_act"):
        vitkit.load_pretrained(tmp_path / "m.npz")


def test_canonical_layout_reports_the_keys_of_the_file(tmp_path):
    arrays = official_arrays(prefix="opt/target/")
    del arrays["opt/target/Transformer/encoderblock_1/MlpBlock_3/Dense_1/bias"]
    np.savez(tmp_path / "broken.npz", **arrays)
    with pytest.raises(vitkit.CheckpointError) as err:
        vitkit.load_pretrained(tmp_path / "broken.npz")
    assert "broken.npz" in str(err.value)
    assert "'opt/target/Transformer/encoderblock_1/MlpBlock_3/Dense_1/bias'" in str(err.value)


def test_pre_linen_names_are_mapped(tmp_path):
    tensors, shown = npz.canonical(official_arrays(), source="x.npz")
    assert "Transformer/encoderblock_0/MultiHeadDotProductAttention_0/query/kernel" in tensors
    assert (
        shown("Transformer/encoderblock_0/MlpBlock_0/Dense_0/kernel")
        == "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"
    )


@pytest.mark.parametrize("name, fmt", [("m.npz", "npz"), ("m.pth", "timm")])
def test_a_sidecar_copied_beside_other_weights_is_not_read_as_theirs(make_model, tmp_path, name, fmt):
    """m.npz.json of one model copied beside another model's m.npz gave that model its class names and data record."""
    import shutil
    import warnings

    from vitkit.checkpoint import load_with_metadata

    for folder, seed, names in (("a", 0, ["ant", "bee", "cat"]), ("b", 1, ["dog", "emu", "fox"])):
        save_checkpoint(
            make_model(seed=seed, num_classes=3), tmp_path / folder / name, fmt, metadata={"class_names": names}
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # its own sidecar: read, no warning
        assert load_with_metadata(tmp_path / "b" / name)[1]["class_names"] == ["dog", "emu", "fox"]
    shutil.copy(tmp_path / "a" / f"{name}.json", tmp_path / "b" / f"{name}.json")
    with pytest.warns(UserWarning, match="written for other weights"):
        _, meta = load_with_metadata(tmp_path / "b" / name)
    assert "class_names" not in meta
