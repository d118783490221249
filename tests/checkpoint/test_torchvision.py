"""torchvision's ViT state dicts (vit_b_16, vit_l_16 ...): read from .pth (weights only) and .safetensors, against a
forward written here in torchvision's layout (nn.MultiheadAttention on its packed in_proj), written back exactly,
with torchvision's shipped transform; torchvision's own model where it is installed."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import load_file, save_file

import vitkit
from vitkit.checkpoint import detect_format, read_metadata, save_checkpoint
from vitkit.checkpoint.torchvision import shipped_transform

D, DEPTH, HEADS, PATCH, SIZE, M, K = 32, 2, 2, 4, 16, 64, 5
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def tv_state(seed=0, old_mlp=False) -> dict[str, torch.Tensor]:
    """A torchvision VisionTransformer state dict with random tensors (std 0.3; LayerNorms about 1)."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, around=0.0):
        return around + torch.randn(*shape, generator=g) * 0.3

    n = (SIZE // PATCH) ** 2
    state = {
        "class_token": r(1, 1, D), "conv_proj.weight": r(D, 3, PATCH, PATCH), "conv_proj.bias": r(D),
        "encoder.pos_embedding": r(1, 1 + n, D), "encoder.ln.weight": r(D, around=1), "encoder.ln.bias": r(D),
        "heads.head.weight": r(K, D), "heads.head.bias": r(K),
    }  # fmt: skip
    fc1, fc2 = ("mlp.linear_1", "mlp.linear_2") if old_mlp else ("mlp.0", "mlp.3")
    for i in range(DEPTH):
        p = f"encoder.layers.encoder_layer_{i}."
        state |= {
            p + "ln_1.weight": r(D, around=1), p + "ln_1.bias": r(D),
            p + "self_attention.in_proj_weight": r(3 * D, D), p + "self_attention.in_proj_bias": r(3 * D),
            p + "self_attention.out_proj.weight": r(D, D), p + "self_attention.out_proj.bias": r(D),
            p + "ln_2.weight": r(D, around=1), p + "ln_2.bias": r(D),
            f"{p}{fc1}.weight": r(M, D), f"{p}{fc1}.bias": r(M), f"{p}{fc2}.weight": r(D, M), f"{p}{fc2}.bias": r(D),
        }  # fmt: skip
    return state


def reference_logits(state: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """torchvision's VisionTransformer.forward written out on its own keys (pre-norm blocks, eps 1e-6, exact GELU)."""
    state = {k.replace("mlp.linear_1", "mlp.0").replace("mlp.linear_2", "mlp.3"): v for k, v in state.items()}

    def ln(z, name):
        return F.layer_norm(z, (D,), state[name + ".weight"], state[name + ".bias"], eps=1e-6)

    z = F.conv2d(x, state["conv_proj.weight"], state["conv_proj.bias"], stride=PATCH).flatten(2).transpose(1, 2)
    z = torch.cat([state["class_token"].expand(len(x), -1, -1), z], dim=1) + state["encoder.pos_embedding"]
    for i in range(DEPTH):
        p = f"encoder.layers.encoder_layer_{i}."
        attention = torch.nn.MultiheadAttention(D, HEADS, batch_first=True)
        attention.load_state_dict(
            {k[len(p + "self_attention.") :]: v for k, v in state.items() if "self_attention" in k and k.startswith(p)}
        )
        h = ln(z, p + "ln_1")
        z = z + attention(h, h, h, need_weights=False)[0]
        h = F.gelu(F.linear(ln(z, p + "ln_2"), state[p + "mlp.0.weight"], state[p + "mlp.0.bias"]))
        z = z + F.linear(h, state[p + "mlp.3.weight"], state[p + "mlp.3.bias"])
    return F.linear(ln(z, "encoder.ln")[:, 0], state["heads.head.weight"], state["heads.head.bias"])


def images(n=2):
    return torch.rand(n, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1)) * 4 - 2


@pytest.mark.parametrize("suffix, old_mlp", [(".pth", False), (".pth", True), (".safetensors", False)])
def test_the_state_dict_reads_as_its_forward_computes(suffix, old_mlp, tmp_path):
    state = tv_state(old_mlp=old_mlp)
    path = tmp_path / f"vit{suffix}"
    save_file(state, path) if suffix == ".safetensors" else torch.save(state, path)
    assert detect_format(path) == "torchvision"
    model = vitkit.load_pretrained(path)
    c = model.config
    assert (c.width, c.depth, c.num_heads, c.mlp_dim, c.num_classes, c.image_size) == (D, DEPTH, HEADS, M, K, (16, 16))
    assert c.mean == MEAN and c.std == STD
    x = images()
    with torch.no_grad():
        assert (model(x) - reference_logits(state, x)).abs().max() <= 1e-4
    assert read_metadata(path)["preprocess"] == {
        "crop_pct": 224 / 256,
        "interpolation": "bilinear",
        "crop_mode": "center",
    }


def test_predict_through_the_cli_preprocesses_as_torchvision_ships_the_weights(tmp_path, vitkit_cmd):
    """torchvision's transform for 224 crops resizes the shorter side to 256 (16 px: 18), bilinear; an 18 x 18 image
    is then only cropped, so the reference reads its pixels directly."""
    state = tv_state()
    torch.save(state, tmp_path / "vit.pth")
    pixels = np.random.default_rng(0).integers(0, 256, (2, 18, 18, 3), dtype=np.uint8)
    paths = []
    for i, p in enumerate(pixels):
        paths.append(tmp_path / f"{i}.png")
        Image.fromarray(p).save(paths[-1])
    done = vitkit_cmd("predict", tmp_path / "vit.pth", *paths, "--json", "--top", str(K))
    assert done.returncode == 0, done.stderr
    x = torch.from_numpy(pixels[:, 1:17, 1:17]).permute(0, 3, 1, 2).float() / 255
    x = (x - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]
    with torch.no_grad():
        probs = reference_logits(state, x).softmax(-1)
    for entry, want in zip((json.loads(line) for line in done.stdout.splitlines()), probs):
        np.testing.assert_allclose(
            [t["prob"] for t in entry["top"]], [float(want[int(t["label"])]) for t in entry["top"]], atol=1e-5
        )


def test_round_trip_through_the_cli_is_exact(tmp_path, vitkit_cmd):
    state = tv_state()
    torch.save(state, tmp_path / "vit.pth")
    done = vitkit_cmd("convert", tmp_path / "vit.pth", tmp_path / "ours")
    assert done.returncode == 0, done.stderr
    done = vitkit_cmd("convert", tmp_path / "ours", tmp_path / "back.safetensors", "--to", "torchvision")
    assert done.returncode == 0, done.stderr
    written = load_file(tmp_path / "back.safetensors")
    assert set(written) == set(state) and all(torch.equal(written[k], v) for k, v in state.items())
    ours, back = vitkit.load_pretrained(tmp_path / "ours"), vitkit.load_pretrained(tmp_path / "back.safetensors")
    assert back.config == ours.config
    assert all(torch.equal(back.state_dict()[k], v) for k, v in ours.state_dict().items())
    save_checkpoint(ours, tmp_path / "back.pth", "torchvision")  # and the .pth torchvision's load_state_dict takes
    again = torch.load(tmp_path / "back.pth", weights_only=True)
    assert set(again) == set(state) and all(torch.equal(again[k], v) for k, v in state.items())


@pytest.mark.parametrize(
    "model, said",
    [
        (lambda: vitkit.create_model("dinov2_test"), "LayerScale"),
        (lambda: vitkit.create_model("vit_test", classifier="gap"), "classifier=gap"),
        (lambda: vitkit.create_model("vit_test", distilled=True, num_classes=3), "distillation token"),
    ],
)
def test_what_torchvision_cannot_hold_refuses_in_one_line(model, said, tmp_path, vitkit_cmd):
    vitkit.save_pretrained(model(), tmp_path / "src")
    done = vitkit_cmd("convert", tmp_path / "src", tmp_path / "out.pth", "--to", "torchvision")
    assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1
    assert not (tmp_path / "out.pth").exists()


def test_the_shipped_transforms():
    """ImageClassification's resize before the 224 crop: 256 for vit_b_16, 242 for vit_l_16; SWAG's larger inputs are
    resized to the crop, bicubic."""
    b16 = vitkit.models.ViTConfig(image_size=224, patch_size=16, width=768, depth=12, mlp_dim=3072, num_heads=12)
    l16 = b16.replace(width=1024, depth=24, mlp_dim=4096, num_heads=16)
    assert shipped_transform(b16)["crop_pct"] * 256 == pytest.approx(224)
    assert shipped_transform(l16)["crop_pct"] * 242 == pytest.approx(224)
    assert shipped_transform(b16.replace(image_size=384)) == {
        "crop_pct": 1.0, "interpolation": "bicubic", "crop_mode": "center"
    }  # fmt: skip


def test_torchvision_itself_where_installed(tmp_path):
    tv = pytest.importorskip("torchvision")
    theirs = tv.models.VisionTransformer(
        image_size=SIZE, patch_size=PATCH, num_layers=DEPTH, num_heads=HEADS, hidden_dim=D, mlp_dim=M, num_classes=K
    ).eval()
    theirs.load_state_dict(tv_state())
    torch.save(theirs.state_dict(), tmp_path / "vit.pth")
    model = vitkit.load_pretrained(tmp_path / "vit.pth")
    x = images()
    with torch.no_grad():
        assert (model(x) - theirs(x)).abs().max() <= 1e-4
    save_checkpoint(model, tmp_path / "back.safetensors", "torchvision")
    again = tv.models.VisionTransformer(
        image_size=SIZE, patch_size=PATCH, num_layers=DEPTH, num_heads=HEADS, hidden_dim=D, mlp_dim=M, num_classes=K
    ).eval()
    again.load_state_dict(load_file(tmp_path / "back.safetensors"))  # strict: torchvision's keys and shapes exactly
    with torch.no_grad():
        assert torch.equal(again(x), theirs(x))
