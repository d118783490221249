"""`vitkit convert` and `vitkit info` on every format, in-process and through the real entry point."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import vitkit
from vitkit.cli import main

TARGETS = {"vitkit": "out_vitkit", "npz": "out.npz", "timm": "out.safetensors", "hf": "out_hf"}


@pytest.fixture
def source(tmp_path):
    torch.manual_seed(0)
    model = vitkit.create_model("vit_test", mlp_act="gelu_tanh").eval()
    with torch.no_grad():
        model.head.weight.normal_()
    vitkit.save_pretrained(model, tmp_path / "src")
    return model, tmp_path / "src"


@pytest.mark.parametrize("target", list(TARGETS))
def test_convert_to_every_format_and_back(target, source, tmp_path, capsys):
    model, src = source
    dst = tmp_path / TARGETS[target]
    args = [str(src), str(dst)] + (["--to", "hf"] if target == "hf" else [])
    assert main(["convert", *args]) == 0
    assert f"({target}, " in capsys.readouterr().out
    assert main(["convert", str(dst), str(tmp_path / "back")]) == 0
    back = vitkit.load_pretrained(tmp_path / "back")
    for key, value in model.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key


def test_dst_may_be_given_as_out_as_export_takes_it(source, tmp_path, capsys):
    model, src = source
    assert main(["convert", str(src), "--out", str(tmp_path / "m.npz")]) == 0
    torch.testing.assert_close(vitkit.load_pretrained(tmp_path / "m.npz").state_dict(), model.state_dict())
    for args, error in (
        ([str(tmp_path / "a.npz"), "--out", str(tmp_path / "b.npz")], "given twice"),
        ([], "where to write is missing"),
    ):
        capsys.readouterr()
        assert main(["convert", str(src), *args]) == 2
        assert error in capsys.readouterr().err
        assert not (tmp_path / "a.npz").exists() and not (tmp_path / "b.npz").exists()


@pytest.mark.parametrize("target", ["vitkit", "hf", "npz"])
def test_dst_that_is_src_or_holds_other_files_is_refused_and_left_as_it_was(target, source, tmp_path, capsys):
    """Writing replaces DST as a whole: `convert hf_dir hf_dir` replaced the user's HF folder by a vitkit one, and a DST
    folder holding notes (or a git clone's .git) lost them. Both are one error now, with nothing changed."""
    _, src = source
    to = ["--to", target]
    first = tmp_path / TARGETS[target]
    assert main(["convert", str(src), str(first), *to]) == 0
    before = {p.name: p.read_bytes() for p in ([first] if first.is_file() else first.iterdir())}
    for dst in (first, first / "inner") if first.is_dir() else (first,):
        capsys.readouterr()
        assert main(["convert", str(first), str(dst), *to]) == 2
        assert "writing it would replace the checkpoint being read" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in ([first] if first.is_file() else first.iterdir())} == before
    if target == "npz":
        for name in ("notes.npz", "notes.pth", "notes.safetensors"):  # a file that holds no checkpoint was written over
            (tmp_path / name).write_text("precious")
            assert main(["convert", str(src), str(tmp_path / name)]) == 2
            assert "holds no checkpoint" in capsys.readouterr().err and (tmp_path / name).read_text() == "precious"
        return
    mine = tmp_path / "mine"
    (mine / ".git").mkdir(parents=True)
    (mine / "notes.txt").write_text("precious")
    capsys.readouterr()
    assert main(["convert", str(src), str(mine), *to]) == 2
    err = capsys.readouterr().err
    assert ".git and 1 more, which is not part of a checkpoint" in err and "nothing was changed" in err
    assert (mine / "notes.txt").read_text() == "precious" and (mine / ".git").is_dir()
    assert main(["convert", str(src), str(first), *to]) == 0  # a checkpoint of its own is still replaced as documented


MODELS = {  # each with what its format's arrays cannot say set away from that format's defaults
    "vit": dict(
        name="vit_test",
        mlp_act="gelu",
        layer_norm_eps=1e-5,
        mean=(0.4, 0.45, 0.5),
        std=(0.2, 0.25, 0.3),
        background=(0.2, 0.4, 0.6),
        image_size=(16, 24),
    ),
    "hybrid": dict(
        name="vit_test", backbone={"layers": (1,), "width": 32}, patch_size=1, image_size=(20, 20), mlp_act="gelu"
    ),
    "bit": dict(name="bit_test", image_size=(48, 40), mean=(0.4, 0.45, 0.5), std=(0.2, 0.25, 0.3), background=0.0),
}


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("kind", list(MODELS))
def test_every_model_comes_back_from_every_format_as_it_was(kind, target, tmp_path, capsys):
    """The whole config, not only the weights: a BiT ResNet at 48x40 came back from .npz at 224 (and scored otherwise)."""
    if target == "hf" and kind != "vit":
        pytest.skip("Hugging Face's ViT holds plain ViTs only (vitkit refuses the others in one line)")
    torch.manual_seed(0)
    overrides = dict(MODELS[kind])
    model = vitkit.create_model(overrides.pop("name"), num_classes=3, **overrides).eval()
    vitkit.save_pretrained(model, tmp_path / "src")
    assert main(["convert", str(tmp_path / "src"), str(tmp_path / TARGETS[target]), "--to", target]) == 0
    assert main(["convert", str(tmp_path / TARGETS[target]), str(tmp_path / "back")]) == 0
    capsys.readouterr()
    back = vitkit.load_pretrained(tmp_path / "back")
    assert back.config == model.config
    for key, value in model.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key


@pytest.mark.parametrize("target", list(TARGETS))
def test_info_reports_format_config_and_parameters(target, source, tmp_path, capsys):
    model, src = source
    dst = tmp_path / TARGETS[target]
    vitkit.checkpoint.save_checkpoint(model, dst, target)
    assert main(["info", str(dst), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == target
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    assert info["config"]["width"] == 32 and info["config"]["depth"] == 2 and info["config"]["num_classes"] == 10


def test_the_background_is_recorded_in_every_checkpoint_and_read_back_from_every_format(tmp_path, vitkit_cmd, tiny_run):
    """model.background (what transparent pixels are composited on, and what the padded crop fills with) is preprocessing
    as mean and std are: a run records it in every checkpoint, info shows it, and each format keeps it where its readers
    look: timm's beside its pretrained_cfg (timm's PretrainedCfg refuses a key it does not know), Hugging Face's in
    preprocessor_config.json."""
    from safetensors import safe_open

    want = (0.2, 0.4, 0.6)
    done = vitkit_cmd("train", "--out", tmp_path / "run", *tiny_run, "train.steps=2", f"model.background={list(want)}")
    assert done.returncode == 0, done.stderr
    for checkpoint in (tmp_path / "run", *sorted((tmp_path / "run" / "checkpoints").iterdir())):
        assert vitkit.load_pretrained(checkpoint).config.background == pytest.approx(want), checkpoint
    info = vitkit_cmd("info", tmp_path / "run")
    assert dict(line.split(None, 1) for line in info.stdout.strip().splitlines())["background"] == str(want)
    for target, name in [*TARGETS.items(), ("timm", "out.pth")]:
        done = vitkit_cmd("convert", tmp_path / "run", tmp_path / name, "--to", target)
        assert done.returncode == 0, done.stderr
        assert vitkit.load_pretrained(tmp_path / name).config.background == pytest.approx(want), name
    with safe_open(str(tmp_path / "out.safetensors"), "pt") as f:
        stored = f.metadata()
    assert json.loads(stored["background"]) == pytest.approx(list(want))
    assert "background" not in json.loads(stored["pretrained_cfg"])
    assert json.loads((tmp_path / "out.pth.json").read_text())["background"] == pytest.approx(list(want))
    processor = json.loads((tmp_path / "out_hf" / "preprocessor_config.json").read_text())
    assert processor["vitkit_background"] == pytest.approx(list(want))


def test_convert_with_new_resolution_and_classes(source, tmp_path):
    _, src = source
    assert main(["convert", str(src), str(tmp_path / "big"), "--image-size", "24", "32", "--num-classes", "3"]) == 0
    model = vitkit.load_pretrained(tmp_path / "big")
    assert model.config.image_size == (24, 32) and model.config.num_classes == 3


def test_errors_are_one_line_and_exit_2(tmp_path, vitkit_cmd):
    """convert through the real `python -m vitkit` entry point; info in-process (tests/cli/test_info.py runs its console script)."""
    bad = tmp_path / "weights.npz"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    src_dir = Path(vitkit.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{src_dir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    args = ["convert", str(tmp_path / "missing"), str(tmp_path / "out")]
    converted = subprocess.run(
        [sys.executable, "-m", "vitkit", *args], capture_output=True, text=True, env=env, timeout=120
    )
    for command, done in (("info", vitkit_cmd("info", bad)), ("convert", converted)):
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"vitkit {command}: error: ")
        assert str(tmp_path) in lines[0]


@pytest.mark.parametrize(
    "dst, to, words",
    [
        ("m.onnx", [], "vitkit export SRC --format onnx --out"),
        ("m.bin", [], "reads as a file"),
        ("m.ckpt", ["--to", "timm"], "or a folder; name it"),  # another framework's file (a folder for timm's Hub)
        ("m.npz", ["--to", "timm"], "/m.safetensors or "),  # it said "name it .../m.npz.safetensors"
        ("m.safetensors", ["--to", "npz"], "m.npz"),  # an npz zip named .safetensors, which no safetensors reader opens
        ("m.npz", ["--to", "hf"], "a hf checkpoint is a directory"),
    ],
)
def test_a_dst_convert_cannot_write_as_named_is_refused(source, tmp_path, capsys, dst, to, words):
    """m.onnx and m.bin became vitkit directories of those names; --to timm without a suffix wrote a pickle named m (it
    is timm's Hub folder now: tests/checkpoint/test_timm_folder.py)."""
    _, src = source
    assert main(["convert", str(src), str(tmp_path / dst), *to]) == 2
    assert words in capsys.readouterr().err and not (tmp_path / dst).exists()


def test_info_text_output(tmp_path, vitkit_cmd):
    np.savez(tmp_path / "ViT.npz", **_tiny_official_arrays())
    done = vitkit_cmd("info", tmp_path / "ViT.npz")
    assert done.returncode == 0, done.stderr
    rows = dict(line.split(None, 1) for line in done.stdout.strip().splitlines())
    assert rows["format"] == "npz" and rows["mlp_act"] == "gelu_tanh" and rows["classifier"] == "gap"
    assert rows["parameters"] == f"{sum(a.size for a in _tiny_official_arrays().values()):,}"


def _tiny_official_arrays():
    """A 1-layer GAP ViT in the release layout: 8x8 images, 4x4 patches, width 32, 2 heads, 3 classes."""
    rng = np.random.default_rng(0)
    shapes = {
        "embedding/kernel": (4, 4, 3, 32), "embedding/bias": (32,), "Transformer/posembed_input/pos_embedding": (1, 4, 32),
        "Transformer/encoder_norm/scale": (32,), "Transformer/encoder_norm/bias": (32,), "head/kernel": (32, 3), "head/bias": (3,),
    }  # fmt: skip
    b = "Transformer/encoderblock_0/"
    for ln in ("LayerNorm_0", "LayerNorm_2"):
        shapes |= {f"{b}{ln}/scale": (32,), f"{b}{ln}/bias": (32,)}
    for n in ("query", "key", "value"):
        shapes |= {
            f"{b}MultiHeadDotProductAttention_1/{n}/kernel": (32, 2, 16),
            f"{b}MultiHeadDotProductAttention_1/{n}/bias": (2, 16),
        }
    shapes |= {
        f"{b}MultiHeadDotProductAttention_1/out/kernel": (2, 16, 32),
        f"{b}MultiHeadDotProductAttention_1/out/bias": (32,),
    }
    shapes |= {f"{b}MlpBlock_3/Dense_0/kernel": (32, 64), f"{b}MlpBlock_3/Dense_0/bias": (64,)}
    shapes |= {f"{b}MlpBlock_3/Dense_1/kernel": (64, 32), f"{b}MlpBlock_3/Dense_1/bias": (32,)}
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


def test_vitkit_s_own_warnings_are_one_line_each(tmp_path):
    """An .npz of a model with exact GELU warns that other readers assume tanh-GELU: one line, not Python's two."""
    torch.manual_seed(0)
    vitkit.save_pretrained(vitkit.create_model("vit_test"), tmp_path / "src")  # vitkit's default: exact GELU
    done = subprocess.run(
        [sys.executable, "-m", "vitkit", "convert", str(tmp_path / "src"), str(tmp_path / "m.npz")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "default"},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vitkit convert: warning: ") and "tanh-GELU" in lines[0], done.stderr
    assert ".py:" not in done.stderr


def test_info_refuses_an_image_size_that_is_not_the_checkpoint_s(source, tmp_path, capsys):
    """--image-size names the grid of a non-square checkpoint; on a square one it was ignored, 50 px on a 16-px model
    included, exit 0."""
    model, src = source
    size = model.config.image_size[0]
    assert main(["info", str(src), "--image-size", str(size)]) == 0
    capsys.readouterr()
    assert main(["info", str(src), "--image-size", "50"]) == 2
    assert f"is a {size}x{size} model" in capsys.readouterr().err
