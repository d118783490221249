"""One suffix table and one set of destination refusals, owned by vitkit.checkpoint: save_checkpoint refuses a name
its format cannot be written to with the line `vitkit convert` prints, and the room on disk is checked once."""

import re
from pathlib import Path

import pytest

import vitkit
import vitkit.checkpoint
from vitkit.checkpoint import SUFFIXES, detect_format, save_checkpoint
from vitkit.cli import main
from vitkit.errors import ConfigError

CONVERT = Path(vitkit.__file__).parent / "cli" / "convert.py"


def test_the_one_suffix_table_is_the_checkpoint_package_s():
    assert SUFFIXES == {".npz": "npz", ".safetensors": "timm", ".pth": "timm", ".pt": "timm", ".bin": "timm"}
    source = CONVERT.read_text()
    assert not re.search(r"""["']\.(npz|safetensors|pth|pt)["']\s*:""", source), "cli/convert.py keeps a suffix table"
    assert "check_room" not in source, "cli/convert.py checks free space itself"


def test_detection_reads_the_table_for_a_damaged_file(tmp_path):
    for name, format in (("weights.bin", "timm"), ("weights.pt", "timm"), ("weights.npz", "npz")):
        (tmp_path / name).write_bytes(b"neither magic")
        assert detect_format(tmp_path / name) == format


@pytest.mark.parametrize(
    "dst, format",
    [
        ("m.onnx", None),
        ("m.bin", None),
        ("m.ckpt", None),
        ("m.ckpt", "timm"),  # another framework's file; a name without a suffix is timm's Hub folder
        ("m.npz", "timm"),
        ("m.bin", "timm"),
        ("m.safetensors", "npz"),
        ("m.npz", "hf"),
        ("m.PTH", "vitkit"),
    ],
)
def test_save_checkpoint_refuses_a_name_its_format_does_not_fit_as_convert_says(tmp_path, capsys, dst, format):
    model = vitkit.create_model("vit_test")
    with pytest.raises(ConfigError) as refused:
        save_checkpoint(model, tmp_path / dst, format)
    save_checkpoint(model, tmp_path / "src")
    assert main(["convert", str(tmp_path / "src"), str(tmp_path / dst), *(["--to", format] if format else [])]) == 2
    assert capsys.readouterr().err == f"vitkit convert: error: {refused.value}\n"
    assert "\n" not in str(refused.value) and not (tmp_path / dst).exists()


def test_a_timm_checkpoint_named_npz_is_refused_naming_the_file_to_give(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"^DST: a timm checkpoint is a \.safetensors or \.pth file, or a folder; name it .*/m\.safetensors or .*/m$",
    ):
        save_checkpoint(vitkit.create_model("vit_test"), tmp_path / "m.npz", "timm")


@pytest.mark.parametrize("dst, written", [("m.npz", "npz"), ("m.pt", "timm"), ("m.bin.d", "vitkit"), ("d", "vitkit")])
def test_save_checkpoint_without_a_format_writes_the_one_the_suffix_names(tmp_path, dst, written):
    save_checkpoint(vitkit.create_model("vit_test", mlp_act="gelu_tanh"), tmp_path / dst, None)
    assert detect_format(tmp_path / dst) == written


@pytest.mark.parametrize("head", [[], ["--num-classes", "7"]])
def test_convert_checks_the_room_on_disk_once(tmp_path, monkeypatch, capsys, head):
    checks = []
    real = vitkit.checkpoint.check_room
    monkeypatch.setattr(
        vitkit.checkpoint, "check_room", lambda *args, **kw: checks.append(args[2]) or real(*args, **kw)
    )
    save_checkpoint(vitkit.create_model("vit_test"), tmp_path / "src")
    checks.clear()
    assert main(["convert", str(tmp_path / "src"), str(tmp_path / "m.npz"), *head]) == 0
    assert checks == (["a model with 7 classes"] if head else ["the npz checkpoint"])
