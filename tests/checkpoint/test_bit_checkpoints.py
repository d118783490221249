"""BiT ResNet-v2 checkpoints: the release .npz and timm layouts against a reference written here from the layout.

The reference reads the release's arrays by name and runs the documented network with plain torch ops:
kernels standardised per output filter with the biased variance and eps 1e-10 (the release's PyTorch port),
GroupNorm(32, eps 1e-5), a symmetric padding, the 7x7/2 root, zero pad + 3x3/2 max-pool, pre-activation
units with the projection on the pre-activation and the stride on the 3x3 conv, GN + ReLU + mean + 1x1 head.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import vitkit
from vitkit.checkpoint import load_pretrained, read_checkpoint, save_checkpoint
from vitkit.errors import CheckpointError
from vitkit.models import ResNetV2

ROOT, LAYERS, CLASSES, IN = 32, (1, 2, 1), 7, 3


def release_arrays(seed=0, root=ROOT, layers=LAYERS, classes=CLASSES, in_chans=IN):
    """Random weights in the release's .npz layout (HWIO kernels, GN gamma/beta), like BiT-M-R50x1.npz."""
    g = np.random.default_rng(seed)
    a = {"resnet/root_block/standardized_conv2d/kernel": g.normal(size=(7, 7, in_chans, root))}
    cin = root
    for s, units in enumerate(layers):
        mid = root * 2**s
        for u in range(units):
            p = f"resnet/block{s + 1}/unit{u + 1:02d}/"
            for letter, n_in, n_out, k in (("a", cin, mid, 1), ("b", mid, mid, 3), ("c", mid, 4 * mid, 1)):
                a[p + f"{letter}/group_norm/gamma"] = 1 + 0.2 * g.normal(size=(n_in,))
                a[p + f"{letter}/group_norm/beta"] = 0.2 * g.normal(size=(n_in,))
                a[p + f"{letter}/standardized_conv2d/kernel"] = g.normal(size=(k, k, n_in, n_out))
            if u == 0:
                a[p + "a/proj/standardized_conv2d/kernel"] = g.normal(size=(1, 1, cin, 4 * mid))
            cin = 4 * mid
    a["resnet/group_norm/gamma"] = 1 + 0.2 * g.normal(size=(cin,))
    a["resnet/group_norm/beta"] = 0.2 * g.normal(size=(cin,))
    a["resnet/head/conv2d/kernel"] = 0.05 * g.normal(size=(1, 1, cin, classes))
    a["resnet/head/conv2d/bias"] = 0.1 * g.normal(size=(classes,))
    return {k: v.astype(np.float32) for k, v in a.items()}


def reference_logits(a, x):
    """The BiT network from the release's arrays, in float64 torch ops."""
    t = {k: torch.from_numpy(v).double() for k, v in a.items()}

    def conv(h, key, stride=1):
        w = t[key].permute(3, 2, 0, 1)  # HWIO -> OIHW
        var, mean = torch.var_mean(w, dim=(1, 2, 3), keepdim=True, unbiased=False)
        w = (w - mean) / torch.sqrt(var + 1e-10)
        return F.conv2d(h, w, stride=stride, padding=w.shape[-1] // 2)

    def gn_relu(h, prefix):
        return F.relu(F.group_norm(h, 32, t[prefix + "gamma"], t[prefix + "beta"], eps=1e-5))

    h = conv(x.double(), "resnet/root_block/standardized_conv2d/kernel", 2)
    h = F.max_pool2d(F.pad(h, (1, 1, 1, 1)), 3, 2)
    s = 1
    while f"resnet/block{s}/unit01/a/group_norm/gamma" in t:
        u = 1
        while (p := f"resnet/block{s}/unit{u:02d}/") + "a/group_norm/gamma" in t:
            stride = 2 if s > 1 and u == 1 else 1
            pre = gn_relu(h, p + "a/group_norm/")
            short = (
                conv(pre, p + "a/proj/standardized_conv2d/kernel", stride)
                if p + "a/proj/standardized_conv2d/kernel" in t
                else h
            )
            y = conv(pre, p + "a/standardized_conv2d/kernel")
            y = conv(gn_relu(y, p + "b/group_norm/"), p + "b/standardized_conv2d/kernel", stride)
            y = conv(gn_relu(y, p + "c/group_norm/"), p + "c/standardized_conv2d/kernel")
            h = y + short
            u += 1
        s += 1
    h = gn_relu(h, "resnet/group_norm/").mean(dim=(2, 3))
    k = t["resnet/head/conv2d/kernel"][0, 0]  # (C, K)
    return h @ k + t["resnet/head/conv2d/bias"]


def timm_state(a):
    """The same weights in timm's resnetv2 layout (OIHW kernels, head.fc a 1x1 conv)."""
    oihw = lambda v: torch.from_numpy(v).permute(3, 2, 0, 1).contiguous()
    s = {"stem.conv.weight": oihw(a["resnet/root_block/standardized_conv2d/kernel"])}
    for key, v in a.items():
        parts = key.split("/")
        if parts[1].startswith("block"):
            stage, unit = int(parts[1][5:]) - 1, int(parts[2][4:]) - 1
            p = f"stages.{stage}.blocks.{unit}."
            i = "abc".index(parts[3]) + 1
            if parts[4] == "proj":
                s[p + "downsample.conv.weight"] = oihw(v)
            elif parts[4] == "group_norm":
                s[p + f"norm{i}.{'weight' if parts[5] == 'gamma' else 'bias'}"] = torch.from_numpy(v)
            else:
                s[p + f"conv{i}.weight"] = oihw(v)
    s["norm.weight"], s["norm.bias"] = (
        torch.from_numpy(a["resnet/group_norm/gamma"]),
        torch.from_numpy(a["resnet/group_norm/beta"]),
    )
    s["head.fc.weight"] = torch.from_numpy(a["resnet/head/conv2d/kernel"]).permute(3, 2, 0, 1).contiguous()
    s["head.fc.bias"] = torch.from_numpy(a["resnet/head/conv2d/bias"])
    return s


def assert_close_relative(ours, ref, tol=1e-4):
    ref = ref.float()
    assert (ours - ref).abs().max().item() <= tol * ref.abs().max().item(), (ours - ref).abs().max()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("bit")
    a = release_arrays()
    np.savez(root / "BiT-M-R.npz", **a)
    from safetensors.torch import save_file

    save_file(timm_state(a), str(root / "resnetv2_bit.safetensors"))
    torch.save(timm_state(a), root / "resnetv2_bit.pth")
    x = torch.randn(2, IN, 64, 64, generator=torch.Generator().manual_seed(1))
    return root, a, x, reference_logits(a, x)


def test_release_npz_matches_the_reference(files):
    root, a, x, ref = files
    model = load_pretrained(root / "BiT-M-R.npz", image_size=64)
    assert isinstance(model, ResNetV2)
    c = model.config
    assert (c.layers, c.width * c.width_factor, c.stem, c.num_classes, c.in_chans) == (LAYERS, ROOT, "bit", CLASSES, IN)
    with torch.no_grad():
        assert_close_relative(model(x), ref)


@pytest.mark.parametrize("name", ["resnetv2_bit.safetensors", "resnetv2_bit.pth"])
def test_timm_state_dict_matches_the_reference(files, name):
    root, a, x, ref = files
    model = load_pretrained(root / name, image_size=64)
    with torch.no_grad():
        assert_close_relative(model(x), ref)


def test_width_factor_and_depth_come_from_the_keys(tmp_path):
    a = release_arrays(root=128, layers=(2, 1), classes=3)  # R-x2 with two stages
    np.savez(tmp_path / "x2.npz", **a)
    config, state, fmt = read_checkpoint(tmp_path / "x2.npz")
    assert fmt == "npz" and config.width == 64 and config.width_factor == 2 and config.layers == (2, 1)
    assert config.image_size == (224, 224)  # a ResNet file holds no resolution


def test_writes_both_layouts_back_unchanged(files, tmp_path):
    root, a, x, ref = files
    model = load_pretrained(root / "BiT-M-R.npz", image_size=64)
    save_checkpoint(model, tmp_path / "again.npz", "npz")
    with np.load(tmp_path / "again.npz") as back:
        assert set(back.files) == set(a)
        assert all(np.array_equal(back[k], a[k]) for k in a)
    save_checkpoint(model, tmp_path / "again.safetensors", "timm")
    from safetensors.torch import load_file

    back, want = load_file(str(tmp_path / "again.safetensors")), timm_state(a)
    assert set(back) == set(want) and all(torch.equal(back[k], want[k]) for k in want)
    assert load_pretrained(tmp_path / "again.safetensors").config.image_size == (64, 64)  # vitkit's metadata kept it
    vitkit.save_pretrained(model, tmp_path / "native")
    with torch.no_grad():
        assert torch.equal(load_pretrained(tmp_path / "native")(x), model(x))


def test_new_head_and_refusals(files, tmp_path):
    root, *_ = files
    model = load_pretrained(root / "BiT-M-R.npz", image_size=32, num_classes=4)
    assert model(torch.randn(1, IN, 32, 32)).abs().max() == 0 and model.config.num_classes == 4
    with pytest.raises(CheckpointError, match="Hugging Face"):
        save_checkpoint(model, tmp_path / "hf", "hf")
    a = release_arrays(layers=(2,))
    del a["resnet/block1/unit02/b/standardized_conv2d/kernel"]
    np.savez(tmp_path / "broken.npz", **a)
    with pytest.raises(CheckpointError, match="unit02/b/standardized_conv2d/kernel"):
        load_pretrained(tmp_path / "broken.npz")
