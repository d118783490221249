"""DeiT's distilled models: transformers' DeiTForImageClassificationWithTeacher and timm's deit_*_distilled_* layout
(through the hub cache), logits within 1e-4 of the source, round trips exact, formats without the token refuse."""

import json
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import load_file, save_file
from test_hub import cache_repo

import vitkit
from vitkit.checkpoint import save_checkpoint

transformers = pytest.importorskip("transformers")

TIMM_NAME = "deit_small_distilled_patch16_224.fb_in1k"
D, DEPTH, HEADS, PATCH, SIZE, K = 32, 2, 2, 4, 16, 5


def _hf_deit(cls=None, seed=0):
    config = transformers.DeiTConfig(
        hidden_size=D, num_hidden_layers=DEPTH, num_attention_heads=HEADS, intermediate_size=64, image_size=SIZE,
        patch_size=PATCH, num_labels=K,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = (cls or transformers.DeiTForImageClassificationWithTeacher)(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    return model


def _images(n=2, size=SIZE, seed=1):
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(seed)) * 2 - 1


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """A DeiTForImageClassificationWithTeacher with random weights and its image processor (16 px, bicubic)."""
    folder = tmp_path_factory.mktemp("deit")
    model = _hf_deit()
    model.save_pretrained(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the processor's PIL backend without torchvision, said in a warning
        processor = transformers.ViTImageProcessor(size={"height": SIZE, "width": SIZE}, resample=3)
    processor.save_pretrained(folder)
    return folder, model, processor


def test_python_api_logits_equal_transformers_with_teacher(hf_folder):
    folder, hf, _ = hf_folder
    model = vitkit.load_pretrained(folder)
    assert model.config.distilled and model.config.num_classes == K
    x = _images()
    with torch.no_grad():
        out = hf(pixel_values=x)
        got = model(x)
        tokens = model.forward_features(x)
        assert (got - out.logits).abs().max() <= 1e-4
        assert (model.head(tokens[:, 0]) - out.cls_logits).abs().max() <= 1e-4  # each head on its own token
        assert (model.head_dist(tokens[:, 1]) - out.distillation_logits).abs().max() <= 1e-4


def test_cli_predict_and_info_read_the_folder_as_transformers_runs_it(hf_folder, vitkit_cmd, tmp_path):
    folder, hf, processor = hf_folder
    rng = np.random.default_rng(0)
    paths = []
    for i, shape in enumerate([(21, 16, 3), (16, 27, 3)]):
        paths.append(tmp_path / f"{i}.png")
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(paths[-1])
    done = vitkit_cmd("predict", folder, *paths, "--json", "--top", str(K))
    assert done.returncode == 0, done.stderr
    ours = [json.loads(line) for line in done.stdout.splitlines()]
    for entry, path in zip(ours, paths):
        with torch.no_grad():
            pixels = processor(Image.open(path), return_tensors="pt")["pixel_values"]
            probs = hf(pixel_values=pixels).logits.softmax(-1)[0]
        want = {str(i): float(p) for i, p in enumerate(probs)}  # HF placeholders LABEL_i: vitkit says the index
        np.testing.assert_allclose(
            [t["prob"] for t in entry["top"]], [want[t["label"]] for t in entry["top"]], atol=1e-5
        )
    info = vitkit_cmd("info", folder, "--json")
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["config"]["distilled"] is True


def test_round_trip_vitkit_hf_vitkit_is_exact_and_runs_in_transformers(hf_folder, tmp_path):
    model = vitkit.load_pretrained(hf_folder[0])
    with torch.no_grad():
        model.head.bias.add_(1.0)  # not the folder's weights: the written ones are read back
    save_checkpoint(model, tmp_path / "hf", "hf")
    back = vitkit.load_pretrained(tmp_path / "hf")
    assert back.config == model.config
    for key, value in model.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key
    hf = transformers.DeiTForImageClassificationWithTeacher.from_pretrained(tmp_path / "hf").eval()
    x = _images()
    with torch.no_grad():
        assert (hf(pixel_values=x).logits - model(x)).abs().max() <= 1e-4


def test_formats_without_the_token_refuse_in_one_line(hf_folder, vitkit_cmd, tmp_path, capsys):
    done = vitkit_cmd("convert", hf_folder[0], tmp_path / "m.npz")
    assert done.returncode == 2 and not (tmp_path / "m.npz").exists()
    assert (
        done.stderr.count("\n") == 1 and "the .npz format (Google's Flax ViT) has no distillation token" in done.stderr
    )
    _hf_deit(transformers.DeiTForImageClassification).save_pretrained(tmp_path / "cls_only")
    capsys.readouterr()  # transformers' progress bar, not vitkit's
    done = vitkit_cmd("info", tmp_path / "cls_only")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "a DeiTForImageClassification folder, whose distillation token has no head" in done.stderr
    headless = vitkit.load_pretrained(hf_folder[0], num_classes=0)
    with pytest.raises(vitkit.CheckpointError, match="cannot hold a distilled model without heads"):
        save_checkpoint(headless, tmp_path / "headless", "hf")


# -- timm's layout, through the hub cache ----------------------------------------------------------------------------
def _timm_state(seed=2) -> dict[str, torch.Tensor]:
    """A deit_*_distilled_* state dict with random tensors under timm's names (a tiny width, two layers)."""
    g = torch.Generator().manual_seed(seed)
    shapes = {
        "cls_token": (1, 1, D), "dist_token": (1, 1, D), "pos_embed": (1, 2 + (SIZE // PATCH) ** 2, D),
        "patch_embed.proj.weight": (D, 3, PATCH, PATCH), "patch_embed.proj.bias": (D,),
        "norm.weight": (D,), "norm.bias": (D,), "head.weight": (K, D), "head.bias": (K,),
        "head_dist.weight": (K, D), "head_dist.bias": (K,),
    }  # fmt: skip
    for i in range(DEPTH):
        p = f"blocks.{i}."
        shapes |= {p + "norm1.weight": (D,), p + "norm1.bias": (D,), p + "norm2.weight": (D,), p + "norm2.bias": (D,)}
        shapes |= {p + "attn.qkv.weight": (3 * D, D), p + "attn.qkv.bias": (3 * D,)}
        shapes |= {p + "attn.proj.weight": (D, D), p + "attn.proj.bias": (D,)}
        shapes |= {p + "mlp.fc1.weight": (2 * D, D), p + "mlp.fc1.bias": (2 * D,)}
        shapes |= {p + "mlp.fc2.weight": (D, 2 * D), p + "mlp.fc2.bias": (D,)}
    state = {k: torch.randn(shape, generator=g) * 0.3 for k, shape in shapes.items()}
    for k in state:
        if "norm" in k and k.endswith("weight"):
            state[k] += 1.0
    return state


def _reference_logits(sd: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """timm's distilled ViT in eval written out from its state dict: class and distillation tokens, pre-norm blocks
    (LayerNorm eps 1e-6, exact GELU), a head on each of the two tokens, their logits averaged."""
    B, hd = x.shape[0], D // HEADS
    t = F.conv2d(x, sd["patch_embed.proj.weight"], sd["patch_embed.proj.bias"], stride=PATCH).flatten(2).transpose(1, 2)
    t = torch.cat([sd["cls_token"].expand(B, -1, -1), sd["dist_token"].expand(B, -1, -1), t], dim=1) + sd["pos_embed"]
    T = t.shape[1]

    def norm(z, name):
        return F.layer_norm(z, (D,), sd[f"{name}.weight"], sd[f"{name}.bias"], eps=1e-6)

    def dense(z, name):
        return F.linear(z, sd[f"{name}.weight"], sd[f"{name}.bias"])

    for i in range(DEPTH):
        p = f"blocks.{i}."
        q, k, v = dense(norm(t, p + "norm1"), p + "attn.qkv").reshape(B, T, 3, HEADS, hd).permute(2, 0, 3, 1, 4)
        a = ((q @ k.transpose(-2, -1)) / math.sqrt(hd)).softmax(-1) @ v  # (B, nh, T, hd)
        t = t + dense(a.transpose(1, 2).reshape(B, T, D), p + "attn.proj")
        t = t + dense(F.gelu(dense(norm(t, p + "norm2"), p + "mlp.fc1")), p + "mlp.fc2")
    t = norm(t, "norm")
    return (dense(t[:, 0], "head") + dense(t[:, 1], "head_dist")) / 2


@pytest.fixture(scope="module")
def timm_cache(tmp_path_factory):
    """huggingface_hub's cache holding timm/deit_small_distilled_patch16_224.fb_in1k as timm's hub layout (tiny)."""
    root = tmp_path_factory.mktemp("timm_hub")
    folder = root / "repo"
    folder.mkdir()
    state = _timm_state()
    save_file(state, folder / "model.safetensors")
    cfg = {"input_size": [3, SIZE, SIZE], "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    cfg |= {"crop_pct": 0.875, "interpolation": "bicubic", "num_classes": K}
    config = {"architecture": TIMM_NAME.split(".")[0], "num_classes": K, "pretrained_cfg": cfg}
    (folder / "config.json").write_text(json.dumps(config))
    cache_repo(root / "cache", f"timm/{TIMM_NAME}", folder)
    return root / "cache", state


def test_timm_hub_name_equals_a_reference_forward(timm_cache, monkeypatch, vitkit_cmd):
    cache, state = timm_cache
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    model = vitkit.load_pretrained(TIMM_NAME)
    c = model.config
    assert c.distilled and (c.width, c.depth, c.num_heads, c.num_classes) == (D, DEPTH, HEADS, K)
    assert c.mean == (0.485, 0.456, 0.406)  # timm's preprocessing from its config
    x = _images()
    with torch.no_grad():
        assert (model(x) - _reference_logits(state, x)).abs().max() <= 1e-4
    info = vitkit_cmd("info", TIMM_NAME, "--json")
    assert info.returncode == 0 and json.loads(info.stdout)["config"]["distilled"] is True


def test_timm_round_trip_is_exact(timm_cache, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(timm_cache[0]))
    model = vitkit.load_pretrained(TIMM_NAME)
    save_checkpoint(model, tmp_path / "deit.safetensors", "timm")
    written = load_file(tmp_path / "deit.safetensors")
    assert set(written) == set(timm_cache[1])  # timm's own names, nothing more
    back = vitkit.load_pretrained(tmp_path / "deit.safetensors")
    assert back.config == model.config
    for key, value in model.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key


def test_timm_distilled_vit_itself_where_installed(tmp_path):
    pytest.importorskip("timm")
    from timm.models.deit import VisionTransformerDistilled

    theirs = VisionTransformerDistilled(
        img_size=SIZE, patch_size=PATCH, embed_dim=D, depth=DEPTH, num_heads=HEADS, mlp_ratio=2.0, num_classes=K
    ).eval()
    theirs.load_state_dict(_timm_state())
    save_file(theirs.state_dict(), tmp_path / "deit.safetensors")
    model = vitkit.load_pretrained(tmp_path / "deit.safetensors")
    x = _images()
    with torch.no_grad():
        assert (model(x) - theirs(x)).abs().max() <= 1e-4
    save_checkpoint(model, tmp_path / "back.safetensors", "timm")
    again = VisionTransformerDistilled(
        img_size=SIZE, patch_size=PATCH, embed_dim=D, depth=DEPTH, num_heads=HEADS, mlp_ratio=2.0, num_classes=K
    ).eval()
    again.load_state_dict(load_file(tmp_path / "back.safetensors"))  # strict: timm's keys and shapes exactly
    with torch.no_grad():
        assert torch.equal(again(x), theirs(x))
