import json

import pytest
import torch

import vitkit
from vitkit.checkpoint import load_pretrained, save_pretrained
from vitkit.checkpoint.native import load_native
from vitkit.errors import CheckpointError


def _random_model(**overrides):
    model = vitkit.create_model("vit_test", **overrides).eval()
    torch.nn.init.normal_(model.head.weight)  # a non-zero head, so logits mean something
    return model


def test_directory_rebuilds_its_model_alone(tmp_path):
    model = _random_model(classifier="gap", representation_size=16, in_chans=1, image_size=(16, 20))
    save_pretrained(model, tmp_path / "ckpt", extra={"class_names": list("abcdefghij")})
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "checksums.json",
        "config.json",
        "model.safetensors",
    ]
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert (
        config["format"] == "vitkit" and config["model"]["image_size"] == [16, 20] and config["model"]["mean"] == [0.5]
    )
    again, extra = load_native(tmp_path / "ckpt")
    assert extra == {"class_names": list("abcdefghij")}
    x = torch.randn(2, 1, 16, 20)
    assert torch.equal(model(x), again.eval()(x))


def test_load_pretrained_resamples_and_resets_head(tmp_path):
    save_pretrained(_random_model(), tmp_path)
    model = load_pretrained(tmp_path, image_size=24, num_classes=3)
    assert model.config.grid_size == (6, 6) and model.head.out_features == 3
    assert torch.count_nonzero(model.head.weight) == 0


def test_wrong_architecture_names_the_file_and_key(tmp_path):
    save_pretrained(_random_model(), tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["model"]["depth"] = 3
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"test_wrong_architecture.*: missing key 'blocks\.2\."):
        load_pretrained(tmp_path)
    cfg["model"]["depth"] = 2
    cfg["model"]["mlp_dim"] = 48
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(
        CheckpointError,
        match=r"'blocks\.0\.mlp\.fc1\.weight' has shape \(64, 32\), the model expects \(48, 32\) \(the model as the file's config, or where it has none its other tensors",
    ):
        load_pretrained(tmp_path)


def test_truncated_weights_and_bad_config_are_clear_errors(tmp_path):
    save_pretrained(_random_model(), tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json"):
        load_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="no such file"):
        load_pretrained(tmp_path / "missing")


def test_a_failed_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    first = _random_model()
    save_pretrained(first, tmp_path)
    before = (tmp_path / "model.safetensors").read_bytes()

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("vitkit.checkpoint.io.save_file", disk_full)
    with pytest.raises(
        CheckpointError, match=rf"{tmp_path}: cannot be written \(model\.safetensors: No space left on device"
    ):
        save_pretrained(_random_model(), tmp_path)
    assert (tmp_path / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checksums.json",
        "config.json",
        "model.safetensors",
    ]  # no temp files


def test_written_files_get_the_usual_permissions(tmp_path):
    import os

    save_pretrained(_random_model(), tmp_path)
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "config.json").stat().st_mode & 0o777 == 0o666 & ~mask
