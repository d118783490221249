"""`vitkit info` on damaged checkpoints of every format: exit code 2, one line naming the file, no traceback."""

import json

import pytest

import vitkit
from vitkit.checkpoint import save_checkpoint
from vitkit.cli import main

FORMATS = {
    "vitkit": ("ckpt", "model.safetensors"),
    "npz": ("m.npz", None),
    "timm": ("m.safetensors", None),
    "pth": ("m.pth", None),
    "hf": ("hf", "model.safetensors"),
}


def _damaged(tmp_path, format, how):
    name, inner = FORMATS[format]
    path = save_checkpoint(
        vitkit.create_model("vit_test", mlp_act="gelu_tanh"), tmp_path / name, "timm" if format == "pth" else format
    )
    target = path / inner if inner else path
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2] if how == "truncated" else data[:100] + bytes(len(data) - 100))
    return path, target


@pytest.mark.parametrize("how", ["truncated", "zeroed"])
@pytest.mark.parametrize("format", list(FORMATS))
def test_damaged_checkpoints_are_one_line(tmp_path, capsys, format, how):
    path, target = _damaged(tmp_path, format, how)
    assert main(["info", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"vitkit info: error: {target}")
    assert any(w in err for w in ("truncated", "corrupt", "unknown checkpoint format")), err


def test_info_through_the_real_command(tmp_path, run_cli):
    path, target = _damaged(tmp_path, "vitkit", "truncated")
    done = run_cli("info", path)
    assert done.returncode == 2 and "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith(f"vitkit info: error: {target}: {target.stat().st_size} bytes")
    assert "the file is truncated or corrupt" in done.stderr


def test_info_counts_the_parameters_training_counts_not_batchnorm_statistics(tmp_path, capsys):
    """A conv-stem hybrid's BatchNorm running means and variances are in its checkpoint but learn nothing: info said
    306,987 parameters where train's plan and convert said 306,085."""
    model = vitkit.create_model("vit_test", patch_size=1, backbone={"convs": [8, 16]}, image_size=16)
    path = save_checkpoint(model, tmp_path / "ckpt", "vitkit")
    assert main(["info", str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["parameters"] == sum(p.numel() for p in model.parameters())
    assert shown["parameters"] < sum(t.numel() for t in model.state_dict().values())  # the statistics are buffers
