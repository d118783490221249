"""timm state dicts, built here by timm's key names and shapes: plain ViT (checked against HF) and hybrids (against the Flax reference)."""

import numpy as np
import pytest
import torch
from npz_reference import forward, official_arrays
from safetensors.torch import load_file, save_file

import vitkit
from vitkit.checkpoint import save_checkpoint

transformers = pytest.importorskip("transformers")


def _timm_from_hf(hf_state: dict, depth: int) -> dict:
    """A timm ViT state dict from a transformers ViTForImageClassification one, by timm's names."""
    h = {k.removeprefix("vit."): v for k, v in hf_state.items()}
    t = {
        "cls_token": h["embeddings.cls_token"],
        "pos_embed": h["embeddings.position_embeddings"],
        "patch_embed.proj.weight": h["embeddings.patch_embeddings.projection.weight"],
        "patch_embed.proj.bias": h["embeddings.patch_embeddings.projection.bias"],
        "norm.weight": h["layernorm.weight"],
        "norm.bias": h["layernorm.bias"],
        "head.weight": h["classifier.weight"],
        "head.bias": h["classifier.bias"],
    }
    for i in range(depth):
        e, b = f"encoder.layer.{i}.", f"blocks.{i}."
        for p in ("weight", "bias"):
            t[f"{b}norm1.{p}"] = h[f"{e}layernorm_before.{p}"]
            t[f"{b}attn.qkv.{p}"] = torch.cat([h[f"{e}attention.attention.{n}.{p}"] for n in ("query", "key", "value")])
            t[f"{b}attn.proj.{p}"] = h[f"{e}attention.output.dense.{p}"]
            t[f"{b}norm2.{p}"] = h[f"{e}layernorm_after.{p}"]
            t[f"{b}mlp.fc1.{p}"] = h[f"{e}intermediate.dense.{p}"]
            t[f"{b}mlp.fc2.{p}"] = h[f"{e}output.dense.{p}"]
    return t


def _timm_hybrid_from_npz(a: dict, layers: tuple) -> dict:
    """A timm hybrid (ResNetV2 under patch_embed.backbone) state dict from official .npz arrays, by timm's names."""
    conv = lambda k: torch.from_numpy(a[k]).permute(3, 2, 0, 1).contiguous()  # HWIO -> OIHW
    vec = lambda k: torch.from_numpy(a[k].reshape(-1))
    stem = "patch_embed.backbone." + ("stem." if layers else "")
    t = {
        f"{stem}conv.weight": conv("conv_root/kernel"),
        f"{stem}norm.weight": vec("gn_root/scale"),
        f"{stem}norm.bias": vec("gn_root/bias"),
    }
    for s, units in enumerate(layers):
        for u in range(units):
            src, dst = f"block{s + 1}/unit{u + 1}/", f"patch_embed.backbone.stages.{s}.blocks.{u}."
            for r in (1, 2, 3):
                t[f"{dst}conv{r}.weight"] = conv(f"{src}conv{r}/kernel")
                t[f"{dst}norm{r}.weight"], t[f"{dst}norm{r}.bias"] = vec(f"{src}gn{r}/scale"), vec(f"{src}gn{r}/bias")
            if f"{src}conv_proj/kernel" in a:
                t[f"{dst}downsample.conv.weight"] = conv(f"{src}conv_proj/kernel")
                t[f"{dst}downsample.norm.weight"], t[f"{dst}downsample.norm.bias"] = (
                    vec(f"{src}gn_proj/scale"),
                    vec(f"{src}gn_proj/bias"),
                )
    t["patch_embed.proj.weight"], t["patch_embed.proj.bias"] = conv("embedding/kernel"), vec("embedding/bias")
    t["cls_token"] = torch.from_numpy(a["cls"])
    t["pos_embed"] = torch.from_numpy(a["Transformer/posembed_input/pos_embedding"])
    D = a["cls"].shape[-1]
    i = 0
    while f"Transformer/encoderblock_{i}/LayerNorm_0/scale" in a:
        src, dst = f"Transformer/encoderblock_{i}/", f"blocks.{i}."
        att = src + "MultiHeadDotProductAttention_1/"
        t[f"{dst}norm1.weight"], t[f"{dst}norm1.bias"] = vec(src + "LayerNorm_0/scale"), vec(src + "LayerNorm_0/bias")
        t[f"{dst}attn.qkv.weight"] = torch.cat(
            [torch.from_numpy(a[f"{att}{n}/kernel"]).reshape(D, D).T for n in ("query", "key", "value")]
        )
        t[f"{dst}attn.qkv.bias"] = torch.cat([vec(f"{att}{n}/bias") for n in ("query", "key", "value")])
        t[f"{dst}attn.proj.weight"] = torch.from_numpy(a[att + "out/kernel"]).reshape(D, D).T.contiguous()
        t[f"{dst}attn.proj.bias"] = vec(att + "out/bias")
        t[f"{dst}norm2.weight"], t[f"{dst}norm2.bias"] = vec(src + "LayerNorm_2/scale"), vec(src + "LayerNorm_2/bias")
        for r in (0, 1):
            t[f"{dst}mlp.fc{r + 1}.weight"] = torch.from_numpy(a[f"{src}MlpBlock_3/Dense_{r}/kernel"]).T.contiguous()
            t[f"{dst}mlp.fc{r + 1}.bias"] = vec(f"{src}MlpBlock_3/Dense_{r}/bias")
        i += 1
    t["norm.weight"], t["norm.bias"] = vec("Transformer/encoder_norm/scale"), vec("Transformer/encoder_norm/bias")
    t["head.weight"], t["head.bias"] = torch.from_numpy(a["head/kernel"]).T.contiguous(), vec("head/bias")
    return t


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_timm_vit_matches_the_hf_model_it_was_built_from(suffix, tmp_path, make_images):
    torch.manual_seed(0)
    config = transformers.ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=16,
        patch_size=4,
        num_labels=5,
        layer_norm_eps=1e-6,
    )
    hf = transformers.ViTForImageClassification(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    hf.save_pretrained(tmp_path / "hf")
    state = _timm_from_hf(load_file(tmp_path / "hf" / "model.safetensors"), depth=2)  # the on-disk names
    path = tmp_path / f"vit{suffix}"
    save_file(state, path) if suffix == ".safetensors" else torch.save(
        {"state_dict": {f"module.{k}": v for k, v in state.items()}}, path
    )
    model = vitkit.load_pretrained(path)
    assert model.config.num_heads == 2  # not in a state dict: taken from the named size with width 32
    x = make_images(model.config)
    with torch.no_grad():
        want = hf(pixel_values=x).logits
        assert ((model(x) - want).abs().max() / want.abs().max()).item() < 1e-5


@pytest.mark.parametrize("layers", [(2, 1), ()])
def test_timm_hybrid_matches_the_official_forward(layers, tmp_path):
    arrays = official_arrays(resnet=(layers, 32), patch=1 if layers else 2, groupnorm_4d=True)
    save_file(_timm_hybrid_from_npz(arrays, layers), tmp_path / "hybrid.safetensors")
    loaded = vitkit.load_pretrained(tmp_path / "hybrid.safetensors")
    assert loaded.config.backbone.layers == layers
    assert loaded.config.mlp_act == "gelu"  # timm's models use exact GELU; the Flax reference the tanh form
    model = vitkit.VisionTransformer(loaded.config.replace(mlp_act="gelu_tanh")).eval()
    model.load_state_dict(loaded.state_dict())
    x = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    want = forward(arrays, x, num_heads=2)
    with torch.no_grad():
        got = model(torch.from_numpy(x).permute(0, 3, 1, 2)).double().numpy()
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-4


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
@pytest.mark.parametrize(
    "overrides",
    [
        dict(),
        dict(classifier="gap", representation_size=16),
        dict(backbone={"layers": (1, 1), "width": 32}, patch_size=1, image_size=32),
        dict(mlp_act="gelu_tanh", layer_norm_eps=1e-5),
    ],
)  # what the tensors cannot say
def test_timm_round_trip_is_bit_exact(suffix, overrides, make_model, tmp_path):
    model = make_model(**overrides)
    save_checkpoint(model, tmp_path / f"m{suffix}", "timm")
    back = vitkit.load_pretrained(tmp_path / f"m{suffix}")
    assert back.config == model.config
    for key, value in model.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key


def test_timm_written_keys_are_timms(make_model, tmp_path):
    model = make_model(backbone={"layers": (1,), "width": 32}, patch_size=1, image_size=16, representation_size=8)
    save_checkpoint(model, tmp_path / "m.pth", "timm")
    state = torch.load(tmp_path / "m.pth", weights_only=True)
    assert "patch_embed.backbone.stem.conv.weight" in state
    assert "patch_embed.backbone.stages.0.blocks.0.downsample.conv.weight" in state
    assert state["patch_embed.proj.weight"].shape == (32, 128, 1, 1)
    assert state["pre_logits.fc.weight"].shape == (8, 32)
    assert not any(k.startswith("backbone.") for k in state)


def test_timm_heads_come_from_vitkit_metadata_or_a_clear_error(make_model, tmp_path):
    model = make_model(width=48, num_heads=4, mlp_dim=96)  # not a named size: a state dict alone cannot say 4 heads
    save_checkpoint(model, tmp_path / "m.safetensors", "timm")
    assert vitkit.load_pretrained(tmp_path / "m.safetensors").config.num_heads == 4
    save_checkpoint(model, tmp_path / "m.pth", "timm")  # the config goes to m.pth.json beside it
    assert vitkit.load_pretrained(tmp_path / "m.pth").config.num_heads == 4
    (tmp_path / "m.pth.json").unlink()  # a .pth as timm writes it: the tensors alone
    with pytest.raises(vitkit.CheckpointError, match="number of heads"):
        vitkit.load_pretrained(tmp_path / "m.pth")


def test_timm_fc_norm_gap_is_refused(make_model, tmp_path):
    state = {k: v for k, v in make_model(classifier="gap").state_dict().items()}
    state["patch_embed.proj.weight"] = state.pop("patch_embed.weight")
    state["patch_embed.proj.bias"] = state.pop("patch_embed.bias")
    state["fc_norm.weight"], state["fc_norm.bias"] = state.pop("norm.weight"), state.pop("norm.bias")
    save_file(state, tmp_path / "fc_norm.safetensors")
    with pytest.raises(vitkit.CheckpointError, match="fc_norm"):
        vitkit.load_pretrained(tmp_path / "fc_norm.safetensors")


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_a_timm_hub_directory_loads_with_its_class_names_mean_std_and_input_size(
    weights, make_model, make_images, tmp_path
):
    """What `huggingface-cli download timm/NAME` leaves: config.json ("architecture", "label_names", "pretrained_cfg")
    beside the bare tensors. It was "unknown checkpoint format"; its weights file stands for the directory."""
    import json

    from vitkit.checkpoint import detect_format, load_with_metadata

    model = make_model(num_classes=3, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    save_checkpoint(model, tmp_path / "m.pth", "timm")
    state = torch.load(tmp_path / "m.pth", weights_only=True)  # the tensors alone, as timm writes them
    hub = tmp_path / "hub"
    hub.mkdir()
    save_file(state, hub / weights) if weights.endswith(".safetensors") else torch.save(state, hub / weights)
    (hub / "config.json").write_text(
        json.dumps(
            {
                "architecture": "vit_test_patch4_16",
                "num_classes": 3,
                "num_features": 32,
                "label_names": ["cat", "dog", "emu"],
                "pretrained_cfg": {
                    "input_size": [3, 16, 16],
                    "mean": [0.485, 0.456, 0.406],
                    "std": [0.229, 0.224, 0.225],
                    "crop_pct": 0.875,
                    "interpolation": "bicubic",
                    "num_classes": 3,
                },
            }
        )
    )
    assert detect_format(hub) == "timm"
    for given in (hub, hub / weights):
        loaded, meta = load_with_metadata(given)
        assert meta["class_names"] == ["cat", "dog", "emu"]
        assert meta["preprocess"] == {"crop_pct": 0.875, "interpolation": "bicubic"}  # timm's resize filter too
        assert tuple(loaded.config.mean) == (0.485, 0.456, 0.406) and tuple(loaded.config.std) == (0.229, 0.224, 0.225)
        x = make_images(loaded.config)
        with torch.no_grad():
            assert torch.allclose(loaded(x), model(x), atol=1e-5)
    from vitkit.checkpoint import (
        read_metadata,  # what vitkit info shows: it left the names and crop of the weights file out
    )

    assert (
        read_metadata(hub / weights, format="timm")
        == read_metadata(hub)
        == {"class_names": ["cat", "dog", "emu"], "preprocess": {"crop_pct": 0.875, "interpolation": "bicubic"}}
    )
    (hub / "config.json").write_text(
        json.dumps({"label_names": {"0": "cat", "2": "emu", "1": "dog"}, "architecture": "x"})
    )
    assert load_with_metadata(hub)[1]["class_names"] == ["cat", "dog", "emu"]  # timm's {index: name} form


def test_a_timm_hub_directory_s_model_args_give_the_head_count(make_model, make_images, tmp_path):
    """timm writes the arguments it built the model with under "model_args"; they were ignored, so a width-64 ViT of 4
    heads loaded with 64 // 64 = 1 head and gave other outputs without a word."""
    import json

    from vitkit.checkpoint import load_with_metadata

    model = make_model(width=64, num_heads=4, mlp_dim=128, num_classes=3)
    save_checkpoint(model, tmp_path / "m.pth", "timm")
    hub = tmp_path / "hub"
    hub.mkdir()
    save_file(torch.load(tmp_path / "m.pth", weights_only=True), hub / "model.safetensors")
    config = {
        "architecture": "vit_tiny_patch16_224",
        "num_classes": 3,
        "label_names": ["a", "b", "c"],
        "model_args": {"embed_dim": 64, "depth": model.config.depth, "num_heads": 4, "img_size": 16, "patch_size": 4},
    }
    (hub / "config.json").write_text(json.dumps(config))
    loaded, _ = load_with_metadata(hub)
    assert loaded.config.num_heads == 4
    x = make_images(loaded.config)
    with torch.no_grad():
        assert torch.allclose(loaded(x), model(x), atol=1e-5)


def test_a_damaged_safetensors_file_is_named_as_one(tmp_path):
    """An empty .safetensors (or one whose header length is 2**60) was called "a PyTorch weights file"."""
    import struct

    from vitkit.checkpoint import load_with_metadata
    from vitkit.errors import CheckpointError

    (tmp_path / "empty.safetensors").write_bytes(b"")
    (tmp_path / "huge.safetensors").write_bytes(struct.pack("<Q", 2**60) + b"{}")
    for name in ("empty.safetensors", "huge.safetensors"):
        with pytest.raises(CheckpointError, match=f"{name}: cannot read safetensors .*header too (small|large)"):
            load_with_metadata(tmp_path / name)
