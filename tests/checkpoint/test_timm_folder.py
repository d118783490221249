"""`vitkit convert SRC --to timm DIR` writes timm's Hub folder: config.json (architecture, num_classes, model_args,
pretrained_cfg, label_names) beside model.safetensors and a model card, which timm builds with no other argument.

timm is not installed here: the folder's fields are checked against timm's documented layout (its PretrainedCfg fields,
VisionTransformer's constructor arguments), and a reference forward written from timm's module names, built from
config.json alone, gives vitkit's logits. With timm installed (the GPU machine), timm itself builds and runs it."""

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

import vitkit
from vitkit.checkpoint import load_with_metadata, read_checkpoint
from vitkit.cli import main

# timm's PretrainedCfg fields (timm/models/_pretrained.py): timm builds PretrainedCfg(**cfg), so any other key fails
PRETRAINED_CFG_FIELDS = {
    "url", "file", "state_dict", "hf_hub_id", "hf_hub_filename", "source", "architecture", "tag", "custom_load",
    "input_size", "test_input_size", "min_input_size", "fixed_input_size", "interpolation", "crop_pct", "test_crop_pct",
    "crop_mode", "mean", "std", "num_classes", "label_offset", "label_names", "label_descriptions", "pool_size",
    "test_pool_size", "first_conv", "classifier", "license", "description", "origin_url", "paper_name", "paper_ids",
    "notes",
}  # fmt: skip
# the arguments of timm's VisionTransformer.__init__ (timm/models/vision_transformer.py) a folder may set
VIT_ARGS = {
    "img_size", "patch_size", "in_chans", "num_classes", "global_pool", "embed_dim", "depth", "num_heads", "mlp_ratio",
    "qkv_bias", "class_token", "fc_norm", "dynamic_img_size", "act_layer",
}  # fmt: skip
# timm's plain ViT entry points (register_model in vision_transformer.py)
TIMM_VITS = {
    "vit_tiny_patch16_224", "vit_small_patch16_224", "vit_base_patch16_224", "vit_large_patch16_224",
    "vit_huge_patch14_224",
}  # fmt: skip
NAMES = ["cat", "dog", "emu"]


def timm_reference(folder, x: torch.Tensor) -> torch.Tensor:
    """timm's VisionTransformer forward as its modules compute it (PatchEmbed's conv, class token, pos_embed added,
    pre-norm blocks of Attention and Mlp with timm's LayerNorm eps 1e-6, the final norm, token or mean pooling, head),
    built from config.json and the tensors by timm's names, and nothing else."""
    config = json.loads((folder / "config.json").read_text())
    a, w = config["model_args"], load_file(folder / "model.safetensors")
    D, heads, patch = a["embed_dim"], a["num_heads"], a["patch_size"]
    hidden = int(D * a["mlp_ratio"])
    act = {"gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}[a.get("act_layer", "gelu")]
    expected = {"pos_embed", "patch_embed.proj.weight", "patch_embed.proj.bias", "norm.weight", "norm.bias"}
    expected |= {"cls_token"} if a["class_token"] else set()
    expected |= {f"head.{p}" for p in ("weight", "bias")} if config["num_classes"] else set()
    for i in range(a["depth"]):
        for m in ("norm1", "attn.qkv", "attn.proj", "norm2", "mlp.fc1", "mlp.fc2"):
            expected |= {f"blocks.{i}.{m}.weight", f"blocks.{i}.{m}.bias"}  # qkv_bias: True
    assert set(w) == expected  # timm loads strictly: no key more, none missing
    assert w["blocks.0.mlp.fc1.weight"].shape == (hidden, D) and w["head.weight"].shape[0] == config["num_classes"]

    def norm(t, key):
        return F.layer_norm(t, (D,), w[f"{key}.weight"], w[f"{key}.bias"], eps=1e-6)

    x = F.conv2d(x, w["patch_embed.proj.weight"], w["patch_embed.proj.bias"], stride=patch).flatten(2).transpose(1, 2)
    prefix = 1 if a["class_token"] else 0
    if prefix:
        x = torch.cat([w["cls_token"].expand(len(x), -1, -1), x], dim=1)
    x = x + w["pos_embed"]
    for i in range(a["depth"]):
        b = f"blocks.{i}."
        qkv = F.linear(norm(x, b + "norm1"), w[b + "attn.qkv.weight"], w[b + "attn.qkv.bias"])
        q, k, v = qkv.unflatten(-1, (3, heads, D // heads)).permute(2, 0, 3, 1, 4)  # (B, heads, N, D / heads) each
        attn = (q @ k.transpose(-2, -1) * (D // heads) ** -0.5).softmax(-1)
        x = x + F.linear((attn @ v).transpose(1, 2).flatten(2), w[b + "attn.proj.weight"], w[b + "attn.proj.bias"])
        h = act(F.linear(norm(x, b + "norm2"), w[b + "mlp.fc1.weight"], w[b + "mlp.fc1.bias"]))
        x = x + F.linear(h, w[b + "mlp.fc2.weight"], w[b + "mlp.fc2.bias"])
    x = norm(x, "norm")  # fc_norm False: the final norm comes before the pooling
    pooled = x[:, 0] if a["global_pool"] == "token" else x[:, prefix:].mean(dim=1)
    return F.linear(pooled, w["head.weight"], w["head.bias"])


def _source(make_model, tmp_path, **overrides):
    model = make_model(num_classes=3, **overrides)
    vitkit.save_pretrained(model, tmp_path / "src", extra={"class_names": NAMES, "preprocess": {"crop_pct": 0.875}})
    return model, tmp_path / "src"


@pytest.mark.parametrize("overrides", [{}, {"classifier": "gap", "mlp_act": "gelu_tanh"}], ids=["token", "gap_tanh"])
def test_convert_to_timm_writes_timms_hub_folder(overrides, make_model, make_images, tmp_path, capsys):
    """It was refused ("a timm checkpoint is a .safetensors or .pth file"), and the .safetensors held no architecture:
    timm built a 224-px, 1000-class model from it."""
    model, src = _source(make_model, tmp_path, **overrides)
    assert main(["convert", str(src), str(tmp_path / "timm"), "--to", "timm"]) == 0
    assert "(timm, " in capsys.readouterr().out
    folder = tmp_path / "timm"
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    config = json.loads((folder / "config.json").read_text())
    assert config["architecture"] in TIMM_VITS and config["num_classes"] == 3 and config["label_names"] == NAMES
    assert set(config["model_args"]) <= VIT_ARGS and set(config["pretrained_cfg"]) <= PRETRAINED_CFG_FIELDS
    args, cfg, c = config["model_args"], config["pretrained_cfg"], model.config
    assert (args["img_size"], args["patch_size"], args["embed_dim"], args["depth"]) == (16, 4, c.width, c.depth)
    assert args["num_heads"] == c.num_heads and args["fc_norm"] is False
    assert (args["class_token"], args["global_pool"]) == (
        (True, "token") if c.classifier == "token" else (False, "avg")
    )
    assert cfg["input_size"] == [3, 16, 16] and cfg["num_classes"] == 3 and cfg["crop_pct"] == 0.875
    assert cfg["mean"] == pytest.approx(list(c.mean)) and cfg["std"] == pytest.approx(list(c.std))
    x = make_images(c)
    with torch.no_grad():
        torch.testing.assert_close(timm_reference(folder, x), model(x), atol=1e-5, rtol=1e-5)


def test_a_round_trip_through_the_folder_is_exact_and_config_json_alone_holds_the_model(make_model, tmp_path):
    """Read back with vitkit's record in model.safetensors, and without it (timm's save_for_hf writes the tensors
    alone): the config.json the writer wrote is what the reader needs."""
    model, src = _source(make_model, tmp_path, mlp_act="gelu_tanh", background=(0.2, 0.4, 0.6), mean=(0.1, 0.2, 0.3))
    folder = tmp_path / "timm"
    assert main(["convert", str(src), str(folder), "--to", "timm"]) == 0
    loaded, meta = load_with_metadata(folder)
    assert loaded.config == model.config and meta == {"class_names": NAMES, "preprocess": {"crop_pct": 0.875}}
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    save_file(load_file(folder / "model.safetensors"), folder / "model.safetensors")  # timm's tensors, no metadata
    config, state, fmt = read_checkpoint(folder)
    assert fmt == "timm" and config == model.config
    assert load_with_metadata(folder)[1] == {"class_names": NAMES, "preprocess": {"crop_pct": 0.875, **CENTER}}
    assert main(["convert", str(folder), str(tmp_path / "again"), "--to", "timm"]) == 0  # a folder replaced as a whole
    assert main(["convert", str(src), str(folder), "--to", "timm"]) == 0


CENTER = {"crop_mode": "center", "interpolation": "bilinear"}


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"representation_size": 16}, "a pre-logits layer"),
        ({"layer_norm_eps": 1e-12}, "layer_norm_eps 1e-12"),
        ({"backbone": {"layers": [], "width": 32}, "patch_size": 1}, "a ResNet or hybrid"),
    ],
)
def test_what_timm_s_vit_cannot_be_is_refused_in_one_line(overrides, words, make_model, tmp_path, capsys):
    _, src = _source(make_model, tmp_path, **overrides)
    assert main(["convert", str(src), str(tmp_path / "timm"), "--to", "timm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and "timm.safetensors" in err[0]
    assert not (tmp_path / "timm").exists()
    assert main(["convert", str(src), str(tmp_path / "timm.safetensors")]) == 0  # the file keeps every tensor


@pytest.mark.parametrize("overrides", [{}, {"classifier": "gap", "mlp_act": "gelu_tanh"}], ids=["token", "gap_tanh"])
def test_timm_builds_the_folder_by_itself_locally_and_by_hub_name(overrides, make_model, make_images, tmp_path):
    """timm.create_model("local-dir:DIR", pretrained=True) and "hf-hub:ORG/NAME" (from a huggingface_hub cache, offline
    as the suite runs) build the model from the folder alone, and its logits are vitkit's."""
    timm = pytest.importorskip("timm")
    from test_hub import cache_repo

    model, src = _source(make_model, tmp_path, **overrides)
    assert main(["convert", str(src), str(tmp_path / "timm"), "--to", "timm"]) == 0
    cache_repo(tmp_path / "cache", "someone/tiny-vit", tmp_path / "timm")
    x = make_images(model.config)
    for name in (f"local-dir:{tmp_path / 'timm'}", "hf-hub:someone/tiny-vit"):
        built = timm.create_model(name, pretrained=True, cache_dir=tmp_path / "cache").eval()
        assert built.num_classes == 3 and built.pretrained_cfg["label_names"] == NAMES
        with torch.no_grad():
            torch.testing.assert_close(built(x), model(x), atol=1e-5, rtol=1e-5)


def test_reports_about_a_timm_folder_go_beside_it(make_model, tmp_path):
    """eval and inspect wrote their reports into the folder (DIR/eval/), which then held more than the export."""
    from vitkit.checkpoint.runs import report_dir

    _, src = _source(make_model, tmp_path)
    assert main(["convert", str(src), str(tmp_path / "timm"), "--to", "timm"]) == 0
    assert report_dir(tmp_path / "timm", "eval") == tmp_path / "timm.eval"
