"""timm's DINOv2, DINOv2-with-registers, CLIP, SigLIP and DeiT III through the hub cache (MODEL.TAG names).

timm is not installed here: the timm files are made from transformers' own models by a key map written in this test
(timm's layout: no_embed_class for registers, attn_pool's q and kv, norm_pre), so vitkit's pooled features are checked
against transformers' forward; DeiT III, which transformers has no class for, against a forward written out here. Where
timm is installed, a test also checks against timm's own models."""

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from test_hf_families import hf_model, pooled
from test_hub import cache_repo

import vitkit
from vitkit.checkpoint import save_checkpoint

IMAGENET = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


def _blocks(state: dict, layer: str, qkv: tuple[str, str, str], names: dict) -> dict:
    """HF encoder layers (two) as timm's blocks.i.*: q, k and v into qkv, the rest renamed by `names`."""
    out = {}
    for i in range(2):
        h = f"{layer}{i}."
        for kind in ("weight", "bias"):
            out[f"blocks.{i}.attn.qkv.{kind}"] = torch.cat([state[f"{h}{n}.{kind}"] for n in qkv])
        for theirs, ours in names.items():
            for key in [k for k in state if k.startswith(h + theirs + ".")]:
                out[f"blocks.{i}.{ours}{key[len(h + theirs) :]}"] = state[key]
    return out


def timm_state(name: str, model, folder) -> dict:
    """The state dict timm holds for transformers model `model` of kind `name` (hf_model's), made from the tensors
    transformers writes into `folder` (their names on disk)."""
    model.save_pretrained(folder)
    s, D = load_file(folder / "model.safetensors"), model.config.hidden_size
    if name.startswith("dinov2"):
        renamed = {k.replace(".lambda1", ".gamma"): v for k, v in s.items()}
        a = "attention.attention."
        names = {"norm1": "norm1", "norm2": "norm2", "mlp": "mlp", "attention.output.dense": "attn.proj",
                 "layer_scale1": "ls1", "layer_scale2": "ls2"}  # fmt: skip
        out = _blocks(renamed, "encoder.layer.", (a + "query", a + "key", a + "value"), names)
        out |= {"patch_embed.proj.weight": s["embeddings.patch_embeddings.projection.weight"],
                "patch_embed.proj.bias": s["embeddings.patch_embeddings.projection.bias"],
                "norm.weight": s["layernorm.weight"], "norm.bias": s["layernorm.bias"]}  # fmt: skip
        cls, pos = s["embeddings.cls_token"], s["embeddings.position_embeddings"]
        if name == "dinov2_reg":  # timm: no_embed_class, the class position folded into the class token
            out |= {
                "cls_token": cls + pos[:, :1],
                "pos_embed": pos[:, 1:],
                "reg_token": s["embeddings.register_tokens"],
            }
        else:
            out |= {"cls_token": cls, "pos_embed": pos}
        return out
    same = {"layer_norm1": "norm1", "layer_norm2": "norm2", "mlp": "mlp", "self_attn.out_proj": "attn.proj"}
    a = "self_attn."
    out = _blocks(s, "encoder.layers.", (a + "q_proj", a + "k_proj", a + "v_proj"), same)
    out |= {"patch_embed.proj.weight": s["embeddings.patch_embedding.weight"],
            "norm.weight": s["post_layernorm.weight"], "norm.bias": s["post_layernorm.bias"]}  # fmt: skip
    if name == "clip":
        out |= {"cls_token": s["embeddings.class_embedding"].reshape(1, 1, D),
                "pos_embed": s["embeddings.position_embedding.weight"][None],
                "norm_pre.weight": s["pre_layrnorm.weight"], "norm_pre.bias": s["pre_layrnorm.bias"]}  # fmt: skip
        return out
    out |= {"patch_embed.proj.bias": s["embeddings.patch_embedding.bias"],
            "pos_embed": s["embeddings.position_embedding.weight"][None], "attn_pool.latent": s["head.probe"]}  # fmt: skip
    for kind in ("weight", "bias"):
        packed = s[f"head.attention.in_proj_{kind}"]
        out |= {f"attn_pool.q.{kind}": packed[:D], f"attn_pool.kv.{kind}": packed[D:]}
        out[f"attn_pool.proj.{kind}"] = s[f"head.attention.out_proj.{kind}"]
        out[f"attn_pool.norm.{kind}"] = s[f"head.layernorm.{kind}"]
        for fc in ("fc1", "fc2"):
            out[f"attn_pool.mlp.{fc}.{kind}"] = s[f"head.mlp.{fc}.{kind}"]
    return out


# (hf_model's name, changes to its config, timm's architecture, tag): timm's SigLIP runs exact GELU, its CLIP models
# QuickGELU only where the name says so
TIMM = [
    ("dinov2", {}, "vit_small_patch14_dinov2", "lvd142m"),
    ("dinov2_reg", {}, "vit_small_patch14_reg4_dinov2", "lvd142m"),
    ("clip", {}, "vit_base_patch16_clip_quickgelu_224", "openai"),
    ("siglip", {"hidden_act": "gelu"}, "vit_base_patch16_siglip_224", "webli"),
]


def hub_folder(root, name: str, state: dict, architecture: str, labels: list | None = None, **cfg) -> str:
    """`state` as timm's Hub repository timm/ARCH.TAG in the cache under `root` (a head's `labels` as label_names);
    returns the name."""
    folder = root / name
    folder.mkdir()
    save_file({k: v.contiguous() for k, v in state.items()}, folder / "model.safetensors")
    config = {"architecture": architecture.split(".")[0], "num_classes": len(labels or []),
              "pretrained_cfg": {"crop_pct": 1.0, **cfg}, **({"label_names": labels} if labels else {})}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    cache_repo(root / "cache", f"timm/{architecture}", folder)
    return architecture


@pytest.mark.parametrize("name, changes, architecture, tag", TIMM)
def test_timm_hub_names_read_as_transformers_computes(name, changes, architecture, tag, tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    theirs = hf_model(name, **changes)
    state = timm_state(name, theirs, tmp_path / "hf")
    hub = hub_folder(tmp_path, name, state, f"{architecture}.{tag}", input_size=[3, 32, 32])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    ours = vitkit.load_pretrained(hub)
    assert ours.config.feature_pool == ("cls_mean" if "dinov2" in architecture else "head")  # DINOv2's linear protocol
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert (ours(x, pre_logits=True) - pooled(theirs, x)).abs().max() <= 1e-4
    save_checkpoint(ours, tmp_path / "back.safetensors", "timm")  # and back to timm's layout, exactly
    back = vitkit.load_pretrained(tmp_path / "back.safetensors")
    assert back.config == ours.config
    assert all(torch.equal(back.state_dict()[k], v) for k, v in ours.state_dict().items())


def deit3_forward(s: dict, x: torch.Tensor, heads: int) -> torch.Tensor:
    """timm's DeiT III (vit with no_embed_class and LayerScale) written out from its state dict: the class token."""
    t = F.conv2d(x, s["patch_embed.proj.weight"], s["patch_embed.proj.bias"], stride=4).flatten(2).transpose(1, 2)
    t = torch.cat([s["cls_token"].expand(len(x), -1, -1), t + s["pos_embed"]], 1)  # the class token: no position
    D = t.shape[-1]
    for i in range(2):
        b = f"blocks.{i}."
        h = F.layer_norm(t, (D,), s[b + "norm1.weight"], s[b + "norm1.bias"], 1e-6)
        q, k, v = F.linear(h, s[b + "attn.qkv.weight"], s[b + "attn.qkv.bias"]).chunk(3, -1)
        q, k, v = (z.unflatten(-1, (heads, -1)).transpose(1, 2) for z in (q, k, v))
        a = ((q @ k.transpose(-1, -2)) / (D // heads) ** 0.5).softmax(-1) @ v
        a = F.linear(a.transpose(1, 2).flatten(2), s[b + "attn.proj.weight"], s[b + "attn.proj.bias"])
        t = t + s[b + "ls1.gamma"] * a
        h = F.layer_norm(t, (D,), s[b + "norm2.weight"], s[b + "norm2.bias"], 1e-6)
        h = F.gelu(F.linear(h, s[b + "mlp.fc1.weight"], s[b + "mlp.fc1.bias"]))
        t = t + s[b + "ls2.gamma"] * F.linear(h, s[b + "mlp.fc2.weight"], s[b + "mlp.fc2.bias"])
    return F.layer_norm(t, (D,), s["norm.weight"], s["norm.bias"], 1e-6)[:, 0]


def deit3_state() -> dict:
    """Random tensors in timm's deit3 layout (width 32, 2 heads, 2 blocks, 4 px patches on 16 px images)."""
    shapes = {"cls_token": (1, 1, 32), "pos_embed": (1, 16, 32), "patch_embed.proj.weight": (32, 3, 4, 4),
              "patch_embed.proj.bias": (32,), "norm.weight": (32,), "norm.bias": (32,)}  # fmt: skip
    for i in range(2):
        b = f"blocks.{i}."
        shapes |= {b + "norm1.weight": (32,), b + "norm1.bias": (32,), b + "attn.qkv.weight": (96, 32),
                   b + "attn.qkv.bias": (96,), b + "attn.proj.weight": (32, 32), b + "attn.proj.bias": (32,),
                   b + "ls1.gamma": (32,), b + "norm2.weight": (32,), b + "norm2.bias": (32,),
                   b + "mlp.fc1.weight": (128, 32), b + "mlp.fc1.bias": (128,), b + "mlp.fc2.weight": (32, 128),
                   b + "mlp.fc2.bias": (32,), b + "ls2.gamma": (32,)}  # fmt: skip
    return {k: torch.randn(shape) * 0.3 for k, shape in shapes.items()}


def test_deit3_reads_as_the_plain_vit_with_layer_scale(tmp_path, monkeypatch):
    state = deit3_state()
    hub = hub_folder(
        tmp_path, "deit3", state, "deit3_small_patch16_224.fb_in22k_ft_in1k", input_size=[3, 16, 16], **IMAGENET
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    ours = vitkit.load_pretrained(hub)
    c = ours.config
    assert (c.layer_scale, c.reg_tokens, c.classifier, c.num_heads) == (1e-6, 0, "token", 2)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        assert (ours(x, pre_logits=True) - deit3_forward(state, x, c.num_heads)).abs().max() <= 1e-4
    assert list(c.mean) == pytest.approx(IMAGENET["mean"])
    save_checkpoint(ours, tmp_path / "back.safetensors", "timm")
    assert load_file(tmp_path / "back.safetensors")["pos_embed"].shape == (1, 16, 32)  # no_embed_class, as timm's


@pytest.mark.parametrize(
    "architecture", ["vit_small_patch14_reg4_dinov2", "vit_base_patch16_siglip_224", "deit3_small_patch16_224"]
)
def test_against_timm_itself(architecture, tmp_path):
    timm = pytest.importorskip("timm")
    model = timm.create_model(architecture, pretrained=False, num_classes=0, img_size=56, depth=2).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.1)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"architecture": architecture, "num_classes": 0}))
    ours = vitkit.load_pretrained(tmp_path)
    x = torch.randn(2, 3, 56, 56)
    with torch.no_grad():
        assert (ours(x, pre_logits=True) - model(x)).abs().max() <= 1e-4


def test_deit3_through_the_cli_gives_the_written_out_forward_s_probabilities(tmp_path, monkeypatch, vitkit_cmd):
    """`vitkit predict` on timm's DeiT III name (with a head of 3 classes) in the hub cache: the probabilities of the
    forward written out above, on the image as the hub config's preprocessing makes it (16 px, ImageNet mean/std)."""
    import numpy as np
    from PIL import Image

    state = deit3_state()
    state |= {"head.weight": torch.randn(3, 32) * 0.3, "head.bias": torch.randn(3) * 0.3}
    architecture = "deit3_small_patch16_224.fb_in22k_ft_in1k"
    hub = hub_folder(tmp_path, "deit3", state, architecture, list("abc"), input_size=[3, 16, 16], **IMAGENET)
    pixels = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "x.png")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    done = vitkit_cmd("predict", f"hf-hub:timm/{hub}", tmp_path / "x.png", "--top", "3", "--json", "--threads", "1")
    assert done.returncode == 0, done.stderr
    ours = {t["label"]: t["prob"] for t in json.loads(done.stdout.splitlines()[0])["top"]}
    x = torch.from_numpy(pixels).permute(2, 0, 1)[None].float() / 255
    x = (x - torch.tensor(IMAGENET["mean"]).view(1, 3, 1, 1)) / torch.tensor(IMAGENET["std"]).view(1, 3, 1, 1)
    with torch.no_grad():
        theirs = F.linear(deit3_forward(state, x, 2), state["head.weight"], state["head.bias"]).softmax(-1)[0]
    assert max(abs(ours[name] - float(p)) for name, p in zip("abc", theirs)) <= 1e-4, (ours, theirs)
