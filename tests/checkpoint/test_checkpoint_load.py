"""load_pretrained across formats: detection, resolution change, new heads, and errors that name the file and key."""

import os

import numpy as np
import pytest
import torch
from npz_reference import official_arrays
from safetensors.torch import save_file

import vitkit
from vitkit.checkpoint import detect_format, save_checkpoint

FORMATS = {"vitkit": "ckpt", "npz": "m.npz", "timm": "m.safetensors", "hf": "hf"}


@pytest.mark.parametrize("format", list(FORMATS))
def test_format_is_detected_from_the_content(format, make_model, tmp_path):
    model = make_model(mlp_act="gelu_tanh")
    path = save_checkpoint(model, tmp_path / FORMATS[format], format)
    assert detect_format(path) == format
    renamed = tmp_path / "no_suffix"
    os.rename(path, renamed)
    assert detect_format(renamed) == format  # magic bytes, not the name
    assert torch.equal(vitkit.load_pretrained(renamed).pos_embed, model.pos_embed)


def test_a_weights_file_inside_a_vitkit_directory_loads_its_directory(make_model, tmp_path):
    model = make_model()
    vitkit.save_pretrained(model, tmp_path / "ckpt")
    assert vitkit.load_pretrained(tmp_path / "ckpt" / "model.safetensors").config == model.config


def test_new_resolution_resamples_like_the_official_code(tmp_path):
    scipy_ndimage = pytest.importorskip("scipy.ndimage")
    arrays = official_arrays(grid=(4, 4))
    np.savez(tmp_path / "a.npz", **arrays)
    model = vitkit.load_pretrained(tmp_path / "a.npz", image_size=(24, 32))
    assert model.config.image_size == (24, 32) and model.config.grid_size == (6, 8)
    posemb = arrays["Transformer/posembed_input/pos_embedding"][0]
    grid = posemb[1:].reshape(4, 4, -1).astype(np.float64)
    want = scipy_ndimage.zoom(grid, (6 / 4, 8 / 4, 1), order=1).reshape(48, -1)  # vit_jax checkpoint.py
    got = model.pos_embed[0].detach().double().numpy()
    np.testing.assert_allclose(got[0], posemb[0])  # the class-token slot is kept
    np.testing.assert_allclose(got[1:], want, atol=1e-5)
    assert model(torch.zeros(1, 3, 24, 32)).shape == (1, 5)


def test_new_classes_give_a_zero_head_and_drop_pre_logits(tmp_path, make_images):
    np.savez(tmp_path / "a.npz", **official_arrays(representation=24, classes=5))
    model = vitkit.load_pretrained(tmp_path / "a.npz", num_classes=3)
    assert (model.config.num_classes, model.config.representation_size) == (3, None)
    assert model.head.weight.shape == (3, 32) and not model.head.weight.any() and not model.head.bias.any()
    assert not any(k.startswith("pre_logits") for k in model.state_dict())
    kept = vitkit.load_pretrained(tmp_path / "a.npz", num_classes=3, keep_pre_logits=True)
    assert kept.config.representation_size == 24 and kept.head.weight.shape == (3, 24)
    same = vitkit.load_pretrained(tmp_path / "a.npz", num_classes=5)
    assert same.head.weight.any() and same.config.representation_size == 24


def test_unknown_format_names_the_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(vitkit.CheckpointError, match=r"notes.txt: unknown checkpoint format"):
        vitkit.load_pretrained(path)
    with pytest.raises(vitkit.CheckpointError, match="no such file"):
        vitkit.load_pretrained(tmp_path / "missing.npz")
    with pytest.raises(vitkit.CheckpointError, match="unknown format 'onnx'"):
        vitkit.load_pretrained(path, format="onnx")


def test_missing_unexpected_and_misshapen_keys_are_named(make_model, tmp_path):
    state = {k.replace("patch_embed.", "patch_embed.proj."): v for k, v in make_model().state_dict().items()}
    cases = {
        "missing": (
            {k: v for k, v in state.items() if k != "blocks.1.mlp.fc2.bias"},
            r"missing key 'blocks.1.mlp.fc2.bias'",
        ),
        "unexpected": (
            {**state, "blocks.0.attn.q_norm.weight": torch.ones(16)},
            r"unexpected key 'blocks.0.attn.q_norm.weight'",
        ),
        "shape": (
            {**state, "blocks.0.norm1.weight": torch.ones(31)},
            r"'blocks.0.norm1.weight' has shape \(31,\), expected \(32,\)",
        ),
    }
    for name, (tensors, message) in cases.items():
        path = tmp_path / f"{name}.safetensors"
        save_file(tensors, path)
        with pytest.raises(vitkit.CheckpointError, match=message) as err:
            vitkit.load_pretrained(path)
        assert str(path) in str(err.value)


def test_npz_shape_mismatch_says_expected_and_found(tmp_path):
    arrays = official_arrays()
    arrays["Transformer/encoderblock_1/MultiHeadDotProductAttention_1/out/kernel"] = np.zeros((2, 16, 30), np.float32)
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(
        vitkit.CheckpointError,
        match=r"'Transformer/encoderblock_1/MultiHeadDotProductAttention_1/out/kernel' has shape \(2, 16, 30\), expected \(2, 16, 32\)",
    ):
        vitkit.load_pretrained(tmp_path / "bad.npz")


@pytest.mark.parametrize("format", ["npz", "timm", "vitkit"])
def test_truncated_files_are_reported_not_crashed_on(format, make_model, tmp_path):
    path = save_checkpoint(make_model(mlp_act="gelu_tanh"), tmp_path / FORMATS[format], format)
    weights = path / "model.safetensors" if path.is_dir() else path
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(vitkit.CheckpointError, match="truncated|corrupt") as err:
        vitkit.load_pretrained(path)
    assert weights.name in str(err.value)


def test_pickled_objects_are_never_executed(tmp_path):
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    torch.save({"patch_embed.proj.weight": Exploit()}, tmp_path / "evil.pth")
    with pytest.raises(vitkit.CheckpointError, match="evil.pth"):
        vitkit.load_pretrained(tmp_path / "evil.pth")
    assert not marker.exists()
    import pickle
    import warnings

    (tmp_path / "evil.pkl").write_bytes(pickle.dumps({"w": Exploit()}, protocol=4))  # a plain pickle, not torch.save's
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's two-line notice about the protocol came before the one-line error
        with pytest.raises(vitkit.CheckpointError, match="evil.pkl: holds Python objects other than tensors"):
            vitkit.load_pretrained(tmp_path / "evil.pkl", format="timm")
    assert not marker.exists()
    np.save(tmp_path / "obj.npy", np.array([Exploit()], dtype=object), allow_pickle=True)
    with pytest.raises(vitkit.CheckpointError):
        vitkit.load_pretrained(tmp_path / "obj.npy", format="npz")
    np.savez(
        tmp_path / "obj.npz", w=np.array([Exploit()], dtype=object)
    )  # named for what it is, not "truncated or corrupt"
    with pytest.raises(
        vitkit.CheckpointError,
        match=r"obj.npz: w.npy holds Python objects \(a pickled array\), which vitkit never loads",
    ):
        vitkit.load_pretrained(tmp_path / "obj.npz")
    assert not marker.exists()


def test_saving_over_a_checkpoint_keeps_it_readable(make_model, tmp_path):
    """Atomic writes: no partial file is left under the final name, and the old files are replaced whole."""
    first, second = make_model(seed=0), make_model(seed=1)
    for format, name in FORMATS.items():
        save_checkpoint(first.eval(), tmp_path / name, format) if format != "npz" else None
    for format, name in FORMATS.items():
        if format == "npz":
            continue
        save_checkpoint(second, tmp_path / name, format)
        assert torch.equal(vitkit.load_pretrained(tmp_path / name).pos_embed, second.pos_embed)
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_a_wrong_from_format_or_a_file_of_no_weights_says_what_the_file_is(tmp_path, recwarn):
    """--from timm on an .npz leaked torch's internals ('Expected hasRecord("version")... report an enhancement request
    to PyTorch') and called it corrupt; a text file named .pth was 'cannot load (101)'; the .npz warning listed an eps
    that was already the official one."""
    import warnings

    import vitkit
    from vitkit.checkpoint import load_with_metadata, save_checkpoint
    from vitkit.errors import CheckpointError

    model = vitkit.create_model("vit_test", num_classes=2)  # gelu, eps 1e-6: only the activation differs from Flax's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        save_checkpoint(model, tmp_path / "a.npz", "npz")
    said = " ".join(str(w.message) for w in caught)
    assert "this model has mlp_act='gelu'." in said and "layer_norm_eps" not in said.split("this model has")[1]
    for forced, words in (
        ("timm", "an npz checkpoint, not a timm one"),
        ("hf", "an npz checkpoint, not an hf one"),
        ("vitkit", "an npz checkpoint, not a vitkit one"),
    ):
        with pytest.raises(CheckpointError, match=f"a.npz: its content is {words}; drop --from"):
            load_with_metadata(tmp_path / "a.npz", format=forced)
    (tmp_path / "notes.pth").write_text("hello")
    with pytest.raises(CheckpointError, match=r"notes.pth: not a PyTorch weights file \(neither the zip archive"):
        load_with_metadata(tmp_path / "notes.pth")
