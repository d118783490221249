import json

import pytest
import torch

import vitkit
from vitkit.checkpoint import save_pretrained
from vitkit.errors import ConfigError
from vitkit.export import export, run_exported, verify


@pytest.fixture
def model():
    m = vitkit.create_model("vit_test", image_size=(16, 20)).eval()
    torch.nn.init.normal_(m.head.weight)
    return m


@pytest.mark.parametrize("fmt", ["torchscript", "exported-program", "onnx"])
def test_export_matches_pytorch_on_another_batch_size(model, tmp_path, fmt):
    if fmt == "onnx":
        pytest.importorskip("onnxscript")
        pytest.importorskip("onnxruntime")
    path = export(model, tmp_path / f"model.{fmt}", format=fmt)
    assert path.stat().st_size > 0
    assert {p.name for p in tmp_path.iterdir()} <= {path.name, path.name + ".json"}  # no scratch files, one file for ONNX
    assert verify(model, path, fmt, batch_size=5) < 1e-4
    out = run_exported(path, fmt, torch.randn(1, 3, 16, 20))
    assert out.shape == (1, 10)


def test_unknown_format(model, tmp_path):
    with pytest.raises(ConfigError, match="format"):
        export(model, tmp_path / "m", format="tflite")


def test_cli_export(run_cli, model, tmp_path):
    save_pretrained(model, tmp_path / "ckpt")
    result = run_cli("export", tmp_path / "ckpt", "--format", "exported-program", "--out", tmp_path / "m.pt2")
    assert result.returncode == 0, result.stderr
    assert "max |export - pytorch|" in result.stdout and (tmp_path / "m.pt2").is_file()
    assert "m.pt2.json" in result.stdout and json.loads((tmp_path / "m.pt2.json").read_text())["input_size"] == [3, 16, 20]


def test_onnx_export_is_one_file_with_class_names_and_preprocessing(model, tmp_path):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    names = [f"class {i}" for i in range(10)]
    path = export(model, tmp_path / "m.onnx", format="onnx", metadata={"class_names": names, "preprocess": {"crop_pct": 0.875}})
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # no unmentioned m.onnx.data
    props = {p.key: json.loads(p.value) for p in onnx.load(str(path)).metadata_props}
    assert props["class_names"] == names and props["crop_pct"] == 0.875 and props["input_size"] == [3, 16, 20]
    assert props["mean"] == [0.5, 0.5, 0.5]
