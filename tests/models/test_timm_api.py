"""timm's model API on every vitkit model (ViT, hybrid, BiT), used the way timm's own helpers use it: the head,
pretrained_cfg, group_matcher for layer-wise learning-rate decay, features_only, drop_path_rate, list_models."""

import copy
import json
import re

import pytest
import torch
from torch import nn

import vitkit
from vitkit.errors import ConfigError
from vitkit.models import MODELS, ResNetConfig, VisionTransformer, get_config

TOL = dict(rtol=1e-4, atol=1e-5)
# tiny models of every family: name, overrides
FAMILIES = {
    "vit": ("vit_test", {"depth": 3}),
    "vit_gap": ("vit_test", {"depth": 3, "classifier": "gap", "representation_size": 16}),
    "hybrid": ("vit_test", {"depth": 2, "backbone": ResNetConfig(layers=(1,), width=32), "image_size": 32}),
    "bit": ("bit_test", {}),
}


def build(family: str, **more) -> nn.Module:
    name, overrides = FAMILIES[family]
    torch.manual_seed(0)
    model = vitkit.create_model(name, **{**overrides, **more})
    with torch.no_grad():  # no zero heads or identity units, which would hide a mistake
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def images(model, n: int = 2) -> torch.Tensor:
    return torch.randn(n, *model.pretrained_cfg["input_size"], generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("family", FAMILIES)
def test_the_head_api_reads_and_changes_the_model_as_timm_s_does(family):
    model = build(family)
    x = images(model)
    with torch.no_grad():
        pooled = model.forward_head(model.forward_features(x), pre_logits=True)
        torch.testing.assert_close(model.forward_head(model.forward_features(x)), model(x), **TOL)
    assert model.num_classes == model.config.num_classes == 10
    assert model.get_classifier() is model.head and model.head.out_features == 10
    assert model.head.in_features == model.head_hidden_size == pooled.shape[-1]
    assert model.forward_features(x).shape[1 if family == "bit" else -1] == model.num_features
    if family != "bit":
        assert model.embed_dim == model.num_features == model.config.width
    model.reset_classifier(3)
    assert model.num_classes == 3 and model.get_classifier().out_features == 3 and model(x).shape == (2, 3)
    model.reset_classifier(0, global_pool=model.global_pool)  # no head: the pooled features, as timm's
    assert isinstance(model.get_classifier(), nn.Identity) and model(x).shape == (2, model.head_hidden_size)
    other = "token" if model.global_pool == "avg" else "avg"
    with pytest.raises(ConfigError, match=f"global_pool: this model pools with '{model.global_pool}'"):
        model.reset_classifier(3, global_pool=other)


@pytest.mark.parametrize("family", FAMILIES)
def test_pretrained_cfg_describes_the_input_the_model_takes(family):
    model = build(family, mean=(0.1, 0.2, 0.3), std=(0.4, 0.5, 0.6))
    cfg = model.pretrained_cfg
    assert cfg == model.default_cfg
    assert cfg["input_size"] == (model.config.in_chans, *model.config.image_size)
    assert cfg["mean"] == pytest.approx((0.1, 0.2, 0.3)) and cfg["std"] == pytest.approx((0.4, 0.5, 0.6))
    assert cfg["num_classes"] == model.num_classes and cfg["fixed_input_size"] is True
    # vitkit's own eval preprocessing of a checkpoint that records none: the whole image, bilinear
    assert (cfg["crop_pct"], cfg["crop_mode"], cfg["interpolation"]) == (1.0, "center", "bilinear")
    assert isinstance(model.get_submodule(cfg["first_conv"]), nn.Conv2d)
    assert model.get_submodule(cfg["classifier"]) is model.get_classifier()
    model(images(model))  # an input of input_size is one the model takes
    model.reset_classifier(4)
    assert model.pretrained_cfg["num_classes"] == 4


def test_a_model_of_any_image_size_says_its_input_size_is_not_fixed():
    assert vitkit.create_model("vit_test", dynamic_img_size=True).pretrained_cfg["fixed_input_size"] is False


def layer_ids(model: nn.Module) -> dict[str, int]:
    """{parameter: layer} from model.group_matcher(), as layer-decay optimisers read it: the first regex of a group
    that matches a name gives its ordinal (group number, the regex's numbers, the suffix); ordinals sorted become
    layers 0, 1, ...; a suffix of 99999 joins the layer before; a name no regex matches goes last (the head)."""
    rules = []
    for group, spec in enumerate(model.group_matcher(coarse=False).values()):
        for regex, suffix in spec if isinstance(spec, list) else [(spec, None)]:
            rules.append((re.compile(regex), group, suffix))

    def ordinal(name: str) -> tuple:
        for regex, group, suffix in rules:
            if m := regex.match(name):
                return (group, *map(int, m.groups()), *(suffix or ()))
        return (float("inf"),)

    ordinals = {name: ordinal(name) for name, _ in model.named_parameters()}
    layers, layer = {}, -1
    for key in sorted(set(ordinals.values())):
        if layer < 0 or key[-1] != 99999:
            layer += 1
        layers[key] = layer
    return {name: layers[key] for name, key in ordinals.items()}


@pytest.mark.parametrize("family", FAMILIES)
def test_group_matcher_puts_the_stem_first_each_block_next_and_the_head_last(family):
    model = build(family)
    ids = layer_ids(model)
    blocks = model.blocks if family != "bit" else [u for s in model.stages for u in s]
    last = len(blocks) + 1
    for name, layer in ids.items():
        if name.startswith(("head", "pre_logits")):
            expected = last
        elif name.startswith("norm"):
            expected = len(blocks)  # with the last block, as timm's ViTs group it
        elif m := re.match(r"blocks\.(\d+)\.|stages\.(\d+)\.(\d+)\.", name):
            unit = int(m[1]) if m[1] is not None else sum(len(s) for s in model.stages[: int(m[2])]) + int(m[3])
            expected = 1 + unit
        else:
            expected = 0  # class token, position and patch embeddings, the hybrid's CNN, BiT's stem
        assert layer == expected, name
    stem = {n for n, layer in ids.items() if layer == 0}
    assert ("backbone.stem_conv.weight" in stem) == (family == "hybrid")
    assert ("patch_embed.weight" in stem) == (family != "bit") and ("stem.weight" in stem) == (family == "bit")
    if family == "bit":  # coarse: one group per stage
        assert re.match(model.group_matcher(coarse=True)["blocks"], "stages.1.0.conv1.weight")[1] == "1"


@pytest.mark.parametrize("family", ["vit", "bit"])
def test_a_layer_decay_optimiser_built_from_group_matcher_trains_the_head_fastest(family):
    """Layer-wise learning-rate decay (BEiT, timm's param_groups_layer_decay) written from group_matcher alone."""
    model = build(family).train()
    ids, decay, lr = layer_ids(model), 0.5, 1e-2
    top = max(ids.values())
    groups = {}
    for name, p in model.named_parameters():
        no_decay = p.ndim <= 1 or name in model.no_weight_decay()
        group = groups.setdefault(
            (ids[name], no_decay), {"params": [], "names": [], "lr": lr * decay ** (top - ids[name])}
        )
        group["weight_decay"] = 0.0 if no_decay else 0.05
        group["params"].append(p)
        group["names"].append(name)
    optimizer = torch.optim.AdamW([{k: v for k, v in g.items() if k != "names"} for g in groups.values()])
    by_name = {n: g["lr"] for g in groups.values() for n in g["names"]}
    first = "patch_embed.weight" if family == "vit" else "stem.weight"
    assert by_name["head.weight"] == lr and by_name[first] == pytest.approx(lr * decay**top)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model(images(model)).logsumexp(-1).mean().backward()
    optimizer.step()
    moved = {n: (p - before[n]).abs().max().item() for n, p in model.named_parameters()}
    # Adam's first step moves each weight by about its lr: the head by lr, the stem by lr * decay ** top
    assert moved["head.bias"] == pytest.approx(lr, rel=0.1)
    assert moved[first] == pytest.approx(lr * decay**top, rel=0.1)


@pytest.mark.parametrize("family", FAMILIES)
def test_features_only_returns_the_maps_feature_info_describes(family):
    model = build(family)
    x = images(model)
    depth = len(model.feature_info)
    picks = [(0, -1), [1], None] if depth > 2 else [(0, -1), None]
    for out_indices in picks:
        reference = copy.deepcopy(model)
        features = vitkit.create_model(
            FAMILIES[family][0], **FAMILIES[family][1], features_only=True, out_indices=out_indices
        )
        features.model.load_state_dict(reference.state_dict(), strict=False)  # the pruned model: its part of them
        with torch.no_grad():
            maps = features(x)
            expected = reference.forward_intermediates(x, out_indices or None, intermediates_only=True)
        info = features.feature_info
        wanted = [i % depth for i in out_indices] if out_indices else list(range(depth))[-3 if family != "bit" else 0 :]
        assert list(info.out_indices) == wanted == [d["index"] for d in info.get_dicts()]
        assert len(maps) == len(wanted) == len(info.channels())
        for m, e, channels, reduction in zip(maps, expected[-len(wanted) :], info.channels(), info.reduction()):
            assert m.ndim == 4 and m.shape[1] == channels
            assert (x.shape[-2] // m.shape[-2], x.shape[-1] // m.shape[-1]) == (reduction, reduction)
        if out_indices:  # the same maps as the whole model's
            torch.testing.assert_close(maps, expected, **TOL)
        for name in info.module_name():
            features.model.get_submodule(name)
        assert isinstance(features.model.get_classifier(), nn.Identity)  # pruned: no head, no later blocks
        assert len(model.feature_info) == depth and info.channels(0) == model.feature_info[0]["num_chs"]


def test_features_only_cuts_the_blocks_after_the_last_level_asked_for():
    features = vitkit.create_model("vit_test", depth=3, features_only=True, out_indices=[0])
    assert len(features.model.blocks) == 1 and isinstance(features.model.norm, nn.Identity)
    normed = vitkit.models.FeatureNet(vitkit.create_model("vit_test", depth=3), (-1,), norm=True)
    assert isinstance(normed.model.norm, nn.LayerNorm) and len(normed.model.blocks) == 3
    with pytest.raises(ConfigError, match="out_indices: picks the levels of a feature extractor"):
        vitkit.create_model("vit_test", out_indices=(0,))
    with pytest.raises(ConfigError, match="indices: 5 is out of range"):
        vitkit.create_model("bit_test", features_only=True, out_indices=(5,))


def test_timm_s_constructor_names_set_the_config_fields():
    model = vitkit.create_model("vit_test", depth=3, drop_path_rate=0.2, drop_rate=0.1, attn_drop_rate=0.05)
    c = model.config
    assert (c.drop_path, c.dropout, c.attn_dropout) == (0.2, 0.1, 0.05)
    assert [b.drop_path.rate for b in model.blocks] == pytest.approx([0.0, 0.1, 0.2])
    assert VisionTransformer(get_config("vit_test"), drop_path_rate=0.3, img_size=8).config.drop_path == 0.3
    assert vitkit.create_model("vit_test", drop_path_rate=None).config.drop_path == 0.0  # None: the default
    assert vitkit.create_model("bit_test", drop_path_rate=0.0, img_size=32).config.image_size == (32, 32)
    with pytest.raises(ConfigError, match="model.drop_path_rate: timm's name of drop_path, which is given too"):
        vitkit.create_model("vit_test", drop_path_rate=0.1, drop_path=0.1)
    with pytest.raises(ConfigError, match="model.drop_path_rate: this model has no drop_path"):
        vitkit.create_model("bit_test", drop_path_rate=0.1)
    with pytest.raises(ConfigError, match="drop_path: expected a rate in"):
        vitkit.create_model("vit_test", drop_path_rate=1.5)
    # timm's names of the same fields, and for the arguments vitkit spells otherwise, what to write
    c = vitkit.create_model("vit_test", init_values=1e-5, act_layer="gelu_tanh").config
    assert (c.layer_scale, c.mlp_act) == (1e-5, "gelu_tanh")
    for key, value, hint in [("global_pool", "avg", "classifier: token, gap"), ("mlp_ratio", 2.0, "mlp_dim")]:
        with pytest.raises(ConfigError, match=f"model.{key}: timm's argument; vitkit's is {hint}"):
            vitkit.create_model("vit_test", **{key: value})
    # a timm name that says its size takes the size given, as timm.create_model("vit_small_patch16_224", img_size=96)
    assert vitkit.create_model("vit_small_patch16_224", img_size=96, depth=1).config.image_size == (96, 96)
    assert vitkit.create_model("vit_small_patch16_224", image_size=64, depth=1).config.image_size == (64, 64)


def test_list_models_takes_timm_s_wildcard_patterns():
    assert vitkit.list_models("*s16*") == [n for n in MODELS if "s16" in n] and "vit_s16" in vitkit.list_models("*S16")
    assert vitkit.list_models(["bit_r*x1", "vit_?16"]) == [n for n in MODELS if re.fullmatch(r"bit_r.*x1|vit_.16", n)]
    assert vitkit.list_models("vit_*", exclude_filters=["*mini*", "*test*"]) == [
        n for n in MODELS if n.startswith("vit_") and "mini" not in n and "test" not in n
    ]
    assert vitkit.list_models() == list(MODELS) and vitkit.list_models("no_such_*") == []
    with pytest.raises(ConfigError, match="filter: expected a wildcard pattern"):
        vitkit.list_models([3])


def test_timm_s_own_layer_decay_groups_a_vitkit_model_as_group_matcher_says():
    optim = pytest.importorskip("timm.optim")
    model = build("hybrid")
    groups = optim.param_groups_layer_decay(
        model, weight_decay=0.05, layer_decay=0.5, no_weight_decay_list=model.no_weight_decay()
    )
    ids, top = layer_ids(model), max(layer_ids(model).values())
    names = {id(p): n for n, p in model.named_parameters()}
    seen = set()
    for group in groups:
        for p in group["params"]:
            name = names[id(p)]
            seen.add(name)
            assert group["lr_scale"] == pytest.approx(0.5 ** (top - ids[name])), name
    assert seen == set(ids)


ARCHITECTURE = ("width", "depth", "num_heads", "mlp_dim", "patch_size", "layer_scale", "reg_tokens", "classifier")
PIECES = ("pre_norm", "patch_bias", "mlp_act", "layer_norm_eps", "distilled", "image_size", "mean")


@pytest.mark.parametrize(
    "name, facts",
    [
        # as timm registers them (timm/models/vision_transformer.py, deit.py): sizes, pieces, default image size
        ("deit_small_patch16_224", (384, 12, 6, 1536, (16, 16), None, 0, "token", False, True, "gelu", 1e-6, False, (224, 224), 0.485)),
        ("deit_base_distilled_patch16_384", (768, 12, 12, 3072, (16, 16), None, 0, "token", False, True, "gelu", 1e-6, True, (384, 384), 0.485)),
        ("deit3_large_patch16_384", (1024, 24, 16, 4096, (16, 16), 1e-6, 0, "token", False, True, "gelu", 1e-6, False, (384, 384), 0.485)),
        ("vit_small_patch14_dinov2.lvd142m", (384, 12, 6, 1536, (14, 14), 1e-5, 0, "token", False, True, "gelu", 1e-6, False, (518, 518), 0.485)),
        ("vit_base_patch14_reg4_dinov2", (768, 12, 12, 3072, (14, 14), 1e-5, 4, "token", False, True, "gelu", 1e-6, False, (518, 518), 0.485)),
        ("vit_base_patch16_clip_224", (768, 12, 12, 3072, (16, 16), None, 0, "token", True, False, "gelu", 1e-5, False, (224, 224), 0.48145466)),
        ("vit_large_patch14_clip_quickgelu_336", (1024, 24, 16, 4096, (14, 14), None, 0, "token", True, False, "quick_gelu", 1e-5, False, (336, 336), 0.48145466)),
        ("vit_base_patch16_siglip_256", (768, 12, 12, 3072, (16, 16), None, 0, "map", False, True, "gelu", 1e-6, False, (256, 256), 0.5)),
    ],
)  # fmt: skip
def test_timm_s_names_of_the_families_build_their_architectures(name, facts):
    c = vitkit.get_config(name)
    assert tuple(getattr(c, f) for f in ARCHITECTURE + PIECES[:-1]) + (c.mean[0],) == facts
    assert vitkit.create_model(name, depth=1, img_size=112).config.image_size == (112, 112)


@pytest.mark.parametrize(
    "architecture",
    ["deit_small_distilled_patch16_224", "deit3_small_patch16_224", "vit_small_patch14_reg4_dinov2",
     "vit_base_patch16_clip_224", "vit_base_patch16_siglip_224"],
)  # fmt: skip
def test_timm_s_names_build_what_timm_builds(architecture, tmp_path):
    """Where timm is installed: the model vitkit builds from a timm name holds timm's weights, read as timm's files."""
    timm = pytest.importorskip("timm")
    from safetensors.torch import save_file

    theirs = timm.create_model(architecture, pretrained=False, num_classes=0, img_size=56, depth=2)
    save_file({k: v.contiguous() for k, v in theirs.state_dict().items()}, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"architecture": architecture, "num_classes": 0}))
    read = vitkit.load_pretrained(tmp_path).config
    built = vitkit.create_model(architecture, num_classes=0, img_size=56, depth=2).config
    assert [getattr(built, f) for f in ARCHITECTURE + PIECES[:5]] == [
        getattr(read, f) for f in ARCHITECTURE + PIECES[:5]
    ]
